"""What issue 32 listed as not yet tried, tried as an attacker would: a
kubeconfig's exec plugin, the API token through HTTPS_PROXY, credentials in a
kubeconfig's server URL, and a snapshot of a million pods. What leaked or
crashed is fixed, and each fix has its test here (docs/robustness.md says
what was found for all of them, `--debug` traces included).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.apiserver import FakeApiServer
from tests.robustness.hostile import SMALL_CLUSTER, cluster_seed
from tests.robustness.processes import GIB, gpuaudit

SECRET = "S3CRET-token-0123456789abcdef"
FORMATS = ("json", "text", "sarif", "policyreport", "junit", "github")


def kubeconfig(path: Path, server: str, user: dict, **cluster: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def api():
    with FakeApiServer(json.loads(SMALL_CLUSTER.read_text()), token=SECRET) as server:
        yield server


# --- credentials in the kubeconfig's server URL ---------------------------------------


def test_credentials_in_the_server_url_reach_no_output(api, tmp_path):
    """`server: https://admin:PASSWORD@host` named the cluster in every
    finding on it (text, JSON, SARIF, PolicyReports) and in the snapshot."""
    host = urlsplit(api.url).netloc
    config = kubeconfig(tmp_path / "kc", f"http://admin:{SECRET}@{host}", {"token": SECRET})
    for fmt in FORMATS:
        run = gpuaudit("audit", "--kubeconfig", str(config), "--format", fmt, cwd=tmp_path)
        assert run.code == 1, run.stderr  # findings, judged
        assert SECRET not in run.stdout + run.stderr, fmt
    snap = tmp_path / "snap.json"
    run = gpuaudit("snapshot", "--kubeconfig", str(config), "-o", str(snap), cwd=tmp_path)
    assert run.code == 0, run.stderr
    assert SECRET not in snap.read_text()
    assert json.loads(snap.read_text())["cluster"]["server"] == f"http://{host}"


def test_a_snapshot_written_with_them_reports_without_them(tmp_path):
    snapshot = dict(cluster_seed(), cluster={"server": f"https://admin:{SECRET}@k8s.example:6443", "context": None})
    path = tmp_path / "old.json"
    path.write_text(json.dumps(snapshot))
    for fmt in FORMATS:
        run = gpuaudit("audit", "--snapshot", str(path), "--format", fmt, cwd=tmp_path)
        assert SECRET not in run.stdout + run.stderr, fmt
    run = gpuaudit("report", "--snapshot", str(path), "--out", "review", "--no-record", cwd=tmp_path)
    assert run.code in (0, 1, 2), run.stderr
    for file in (tmp_path / "review").iterdir():
        assert SECRET not in file.read_text(), file.name


# --- the token in error messages ----------------------------------------------------------


def test_no_error_message_repeats_the_token(api, tmp_path):
    """A kubeconfig token that ends in a newline (a `token: |` block, a file
    written with echo) made http.client refuse the header, and its message
    -- `Invalid header value b'Bearer <token>\\n'` -- went into every list's
    error, so into JSON, SARIF and PolicyReports. A server that echoes the
    token in its error is scrubbed alike."""
    config = kubeconfig(tmp_path / "kc", api.url, {"token": SECRET + "\n\x1b[31m"})
    outputs = {fmt: tmp_path / f"out.{fmt}" for fmt in FORMATS}
    formats = [a for fmt, path in outputs.items() for a in ("--format", f"{fmt}={path}")]
    run = gpuaudit("audit", "--kubeconfig", str(config), *formats, cwd=tmp_path)
    assert run.code == 2, run.stderr
    assert run.seconds < 30  # a request that cannot be made is not retried
    for fmt, path in outputs.items():
        assert SECRET not in path.read_text(), fmt
    assert SECRET not in run.stdout + run.stderr
    errors = json.loads(outputs["json"].read_text())["errors"]
    assert any("Bearer <redacted>" in e["message"] for e in errors), errors[:2]

    api.inject("/api/v1/events", status=403, message=f"events is forbidden for token {SECRET}")
    config = kubeconfig(tmp_path / "kc2", api.url, {"token": SECRET})
    run = gpuaudit("audit", "--kubeconfig", str(config), "--format", "json", cwd=tmp_path)
    assert run.code == 2 and SECRET not in run.stdout + run.stderr
    assert "events is forbidden for token <redacted>" in run.stdout


# --- exec plugins -----------------------------------------------------------------------


def _plugin(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_an_exec_plugin_runs_as_kubectl_runs_it(api, tmp_path):
    """The kubeconfig is the user's: its plugin runs (kubectl runs it too),
    and what it returns authenticates. No repository file can name one."""
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": SECRET},
    }
    plugin = _plugin(tmp_path / "plugin.sh", f"touch {tmp_path}/ran\necho '{json.dumps(credential)}'\n")
    config = kubeconfig(
        tmp_path / "kc",
        api.url,
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin), "interactiveMode": "Never"}},
    )
    run = gpuaudit("audit", "--kubeconfig", str(config), "--format", "json", cwd=tmp_path)
    assert run.code == 1 and (tmp_path / "ran").exists(), run.stderr
    assert SECRET not in run.stdout + run.stderr


def test_a_failing_exec_plugin_is_one_clear_error_that_repeats_nothing_it_printed(api, tmp_path):
    """Before: the client printed the plugin's stderr (`ERROR:root:exec:
    process returned 1. <stderr>`, a token if the plugin printed one) and
    went on without credentials: every list failed with 401."""
    plugin = _plugin(tmp_path / "plugin.sh", f"echo 'refresh token {SECRET} expired' >&2\nexit 1\n")
    config = kubeconfig(
        tmp_path / "kc",
        api.url,
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin), "interactiveMode": "Never"}},
    )
    run = gpuaudit("audit", "--kubeconfig", str(config), "--format", "json", cwd=tmp_path)
    assert run.code == 2
    assert SECRET not in run.stdout + run.stderr
    assert "its exec plugin failed (exec: process returned 1)" in run.stderr
    assert "ERROR:root" not in run.stderr
    assert not api.requests  # nothing sent without the credentials it was meant to have


# --- HTTPS_PROXY and the API token ----------------------------------------------------------


class CapturingProxy:
    """An HTTP proxy on loopback that tunnels CONNECT, forwards plain requests,
    and keeps every byte it sees in the clear."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def __enter__(self) -> CapturingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        # shutdown wakes the blocked accept (close alone does not, on Linux);
        # then every thread ends: none may outlive the test (a live thread
        # keeps a later audit from forking its shard workers)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for thread in list(self._threads):
            thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            serving = threading.Thread(target=self._serve, args=(client,), daemon=True)
            self._threads.append(serving)
            serving.start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self.seen.append(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def _serve(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            data = client.recv(65536)
            if not data:
                return
            head += data
        self.seen.append(head)
        method, target = head.split(b"\r\n")[0].split()[:2]
        if method == b"CONNECT":
            host, port = target.decode().rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)))
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            url = urlsplit(target.decode())
            upstream = socket.create_connection((url.hostname, url.port))
            path = url.path + (f"?{url.query}" if url.query else "")
            upstream.sendall(head.replace(target, path.encode(), 1))
        piping = threading.Thread(target=self._pipe, args=(upstream, client), daemon=True)
        self._threads.append(piping)
        piping.start()
        self._pipe(client, upstream)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test server's certificate")
def test_through_https_proxy_the_api_token_stays_inside_tls(tmp_path):
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out", "cert.pem",
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        cwd=tmp_path, check=True, capture_output=True,
    )  # fmt: skip
    server = FakeApiServer(json.loads(SMALL_CLUSTER.read_text()), token=SECRET)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server._httpd.socket = context.wrap_socket(server._httpd.socket, server_side=True)
    with CapturingProxy() as proxy, server:
        url = server.url.replace("http://", "https://")
        authority = {"certificate-authority": str(tmp_path / "cert.pem")}
        config = kubeconfig(tmp_path / "kc", url, {"token": SECRET}, **authority)
        run = gpuaudit(
            "audit", "--kubeconfig", str(config), "--format", "json", cwd=tmp_path,
            env={"HTTPS_PROXY": proxy.url, "https_proxy": proxy.url, "NO_PROXY": "", "no_proxy": ""},
        )  # fmt: skip
    assert run.code == 1, run.stderr  # through the proxy, and judged
    clear = b"".join(proxy.seen)
    assert b"CONNECT 127.0.0.1:" in clear
    assert SECRET.encode() not in clear


# --- a snapshot of a million pods -------------------------------------------------------------

POD = (
    '{"metadata":{"name":"p-@","namespace":"ns-@","uid":"uid-@","labels":{"app":"a"}},'
    '"spec":{"nodeName":"gpu-a100-0","containers":[{"name":"c","image":"img:1",'
    '"resources":{"requests":{"cpu":"1","memory":"1Gi"},"limits":{"memory":"1Gi"}}}]},'
    '"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}'
)


def test_a_snapshot_larger_than_memory_allows_is_a_clear_error(tmp_path):
    """A million pods (588 MB of JSON) took 40 s and 4 GiB; with less memory
    the read ended in MemoryError and `lost sys.stderr`, exit 1 -- which a CI
    job reads as findings. Now: exit 2, one line saying why."""
    path = tmp_path / "big.json.gz"
    seed = dict(cluster_seed(), telemetry=None)
    head, _, tail = json.dumps(seed).partition('"pods": [')
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write(head + '"pods": [')
        out.write(",".join(POD.replace("@", str(i)) for i in range(400_000)))
        out.write("," + tail)
    run = gpuaudit("audit", "--snapshot", str(path), "--format", "json", cwd=tmp_path, memory=GIB, timeout=180)
    assert run.code == 2, run.stderr[-500:]
    assert "not enough memory to read its 131," in run.stderr  # its size, inflated

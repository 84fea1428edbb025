"""An API server that never stops talking: a `continue` token that comes back
forever, pages that never end with new tokens, an endless body, a length of
3 GB announced. Each ends in a partial audit (exit 2, the pod list named as
not read, nodes still judged) within a memory bound, never in a process out
of memory (issue 32, item 5: 3.3 GB in 34 s and 3.75 GB in 21 s before).

The hostile server answers the pod list itself and hands every other request
to the stand-in API server (tests/apiserver.py) serving the recorded small
cluster, so the rest of the collection is real.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from gpuaudit.sources.cluster import collect
from tests.apiserver import FakeApiServer, Request, write_kubeconfig
from tests.robustness.hostile import SMALL_CLUSTER

MIB = 2**20
GIB = 2**30
PODS = "/api/v1/pods"


def _gpu_pod(number: int) -> dict[str, Any]:
    """A GPU pod of the recorded cluster under a new name, padded to ~8 KiB:
    kept whole by the audit (a GPU pod's status is read), so an endless list
    of them grows memory as fast as anything can."""
    cluster = json.loads(SMALL_CLUSTER.read_text())
    pod = copy.deepcopy(next(p for p in cluster["pods"] if "nvidia.com/gpu" in json.dumps(p["spec"])))
    pod["metadata"]["name"] = f"endless-{number}"
    pod["metadata"]["uid"] = f"00000000-0000-0000-0000-{number:012d}"
    pod["metadata"].setdefault("annotations", {})["pad"] = "x" * 4096
    return pod


class HostileApi:
    """``mode``: what the pod list does.

    - ``same-token``: every page says ``continue: again``;
    - ``cycle``: the tokens go a, b, a, b...;
    - ``new-tokens``: a new token on every page, forever;
    - ``endless-body``: one answer, no length, items without end;
    - ``huge-length``: ``Content-Length: 3000000000``, then items without end.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.backend = FakeApiServer(json.loads(SMALL_CLUSTER.read_text()))
        self.sent = 0  # bytes of pod lists sent
        self.pages = 0
        template = json.dumps(_gpu_pod(0)).encode()
        self._item = template
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> HostileApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def items(self, count: int) -> bytes:
        start = self.pages * count
        return b",".join(self._item.replace(b"endless-0", f"endless-{start + i}".encode()) for i in range(count))

    def page(self, query: dict[str, str]) -> bytes:
        self.pages += 1
        token = {
            "same-token": "again",
            "cycle": "a" if query.get("continue") != "a" else "b",
            "new-tokens": f"page-{self.pages}",
        }[self.mode]
        head = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"continue": token}})
        return head[:-1].encode() + b',"items":[' + self.items(200) + b"]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                split = urlsplit(self.path)
                query = dict(parse_qsl(split.query, keep_blank_values=True))
                headers = {k.lower(): v for k, v in self.headers.items()}
                if split.path != PODS:
                    (status, reply_headers, body), _ = api.backend.handle(Request("GET", split.path, query, headers))
                    self._send(status, reply_headers, body)
                    return
                try:
                    if api.mode in ("endless-body", "huge-length"):
                        self._endless()
                    else:
                        body = api.page(query)
                        api.sent += len(body)
                        self._send(200, {"Content-Type": "application/json"}, body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _endless(self) -> None:
                self.close_connection = True
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if api.mode == "huge-length":
                    self.send_header("Content-Length", "3000000000")
                self.end_headers()
                self.wfile.write(b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[')
                chunk = api.items(100) + b","
                while api.sent < 16 * GIB:  # a client that never stops reading fails the test first
                    self.wfile.write(chunk)
                    api.sent += len(chunk)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


MODES = ["same-token", "cycle", "new-tokens", "endless-body", "huge-length"]
# What the pod list's error says, per mode.
SAYS = {
    "same-token": "continue token it had sent before",
    "cycle": "continue token it had sent before",
    "new-tokens": "(--max-list-bytes)",
    "endless-body": "(--max-response-bytes)",
    "huge-length": "answer of 3,000,000,000 bytes refused",
}


@pytest.mark.parametrize("mode", MODES)
def test_the_collector_gives_up_on_a_list_that_never_ends(tmp_path, mode):
    with HostileApi(mode) as api:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        started = time.monotonic()
        snapshot = collect(
            kubeconfig=str(kubeconfig),
            request_timeout=20,
            deadline=120,
            max_response_bytes=16 * MIB,
            max_list_bytes=64 * MIB,
        )
    assert time.monotonic() - started < 60
    errors = {e["resource"]: e["message"] for e in snapshot["errors"]}
    assert "pods" in errors, snapshot["errors"]
    assert SAYS[mode] in errors["pods"], errors["pods"]
    assert snapshot["objects"]["pods"] == []  # all or nothing: never a partial list
    assert snapshot["objects"]["nodes"]  # read before the pods
    assert api.sent < 100 * MIB  # the client stopped reading, the server noticed
    if mode == "new-tokens":
        # every list after the limit is named too, not requested at all
        assert "events" in errors and "not requested" in errors["events"]
    else:
        assert "events" not in errors  # one bad list costs only itself


def _audit_with_rss(args: list[str], cwd: Path, memory: int) -> tuple[int, str, str, int, float]:
    """`gpuaudit ARGS` under an address-space limit: exit code, stdout, stderr,
    its peak resident memory in bytes, seconds."""
    exe = str(Path(sys.executable).with_name("gpuaudit"))
    # A wrapper whose only child is gpuaudit: its RUSAGE_CHILDREN is gpuaudit's peak.
    wrapper = (
        "import resource, subprocess, sys\n"
        "limit = int(sys.argv[1])\n"
        "def cap(): resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
        "p = subprocess.run(sys.argv[2:], preexec_fn=cap)\n"
        "print('maxrss', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(p.returncode)\n"
    )
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, str(memory), exe, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=180,
    )
    seconds = time.monotonic() - started
    stderr, _, tail = proc.stderr.rpartition("maxrss ")
    return proc.returncode, proc.stdout, stderr, int(tail.split()[0]) * 1024, seconds


@pytest.mark.parametrize("mode", ["same-token", "new-tokens", "endless-body"])
def test_a_hostile_api_server_ends_in_a_partial_audit_under_a_memory_cap(tmp_path, mode):
    """Through `gpuaudit audit`, under a 1.5 GiB address-space limit: exit 2,
    the pods named as not read, everything else audited, peak memory far
    below the CronJob's 2 GiB."""
    with HostileApi(mode) as api:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        code, stdout, stderr, rss, seconds = _audit_with_rss(
            [
                "audit",
                "--kubeconfig",
                str(kubeconfig),
                "--format",
                "json",
                "--request-timeout",
                "20",
                "--deadline",
                "150",
                "--max-response-bytes",
                "32Mi",
                "--max-list-bytes",
                "256Mi",
            ],
            tmp_path,
            memory=int(1.5 * GIB),
        )
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr[-2000:]
    assert code == 2, stderr[-2000:]
    report = json.loads(stdout)
    pods = [e["message"] for e in report["errors"] if e["message"].startswith("could not read pods")]
    assert pods and "this audit is partial" in pods[0], report["errors"]
    assert report["summary"]["cluster"]["gpu_nodes"] > 0  # the nodes were still judged
    assert rss < 900 * MIB, f"peak {rss / MIB:.0f} MiB"
    assert seconds < 90

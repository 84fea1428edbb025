"""A Prometheus (or something in its place) that is out to hurt the client:
redirects that would carry the credentials to another origin, answers that
trickle a byte at a time, answers without end, JSON nested 100,000 deep
(issue 19, items 2, 6, 7, 12).

Each fault is served by a real ``http.server`` on 127.0.0.1 in a thread,
started and stopped by the test; every server loop is bounded (a byte count
and a stop event) so nothing outlives its test. Each fault must end as a
``TelemetryUnavailable`` or as that query's error in the aggregate, naming
the endpoint; through the CLI, as a labelled partial audit (exit 2).
"""

from __future__ import annotations

import contextlib
import copy
import http.server
import json
import shutil
import ssl
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.model.telemetry import TelemetryUnavailable
from gpuaudit.sources.prometheus import query_telemetry
from tests.robustness.hostile import cluster_seed

_METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")
_EMPTY = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
_ROW = {
    "metric": {
        "Hostname": "node-0",
        "gpu": "0",
        "UUID": "GPU-0",
        "namespace": "ml",
        "pod": "p-0",
        "container": "c",
        "modelName": "NVIDIA A100-SXM4-80GB",
    },
    "value": [0, "0.5"],
}
_ONE_ROW = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [_ROW]}}).encode()
_SECRETS = {"authorization", "x-scope-orgid", "x-api-key"}


def _probe_answer() -> bytes:
    result = [{"metric": {"__name__": m}, "value": [0, "4"]} for m in _METRICS]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def _is_probe(query: str) -> bool:
    return "count(last_over_time(" in query


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    query: str


@dataclass
class Server:
    """A threaded HTTP(S) server on 127.0.0.1; ``handle(server, handler,
    seen)`` writes the whole answer. ``stop`` ends every handler loop."""

    handle: Callable[[Server, http.server.BaseHTTPRequestHandler, Seen], None]
    tls: ssl.SSLContext | None = None
    seen: list[Seen] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    sent: int = 0  # bytes of answer bodies written, for the streaming servers

    def __enter__(self) -> Server:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def _serve(self, method: str) -> None:
                from urllib.parse import parse_qs, urlsplit

                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                split = urlsplit(self.path)
                form = parse_qs(body.decode() if method == "POST" else split.query)
                headers = {k.lower(): v for k, v in self.headers.items()}  # names are case-insensitive
                seen = Seen(method, split.path, headers, (form.get("query") or [""])[0])
                outer.seen.append(seen)
                self.close_connection = True
                with contextlib.suppress(BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    outer.handle(outer, self, seen)  # those: the client gave up, as it should

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        if self.tls is not None:
            self.httpd.socket = self.tls.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if self.tls else "http"
        self.port = self.httpd.server_address[1]
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def reply(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes = b"", **headers: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Connection", "close")
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


def prometheus(server: Server, handler: http.server.BaseHTTPRequestHandler, seen: Seen) -> None:
    """A well-behaved Prometheus with one GPU row for every field."""
    reply(handler, 200, _probe_answer() if _is_probe(seen.query) else _ONE_ROW)


def query(url: str, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("timeout", 5)
    kwargs.setdefault("deadline", 20)
    return query_telemetry(url, window_seconds=3600, **kwargs)


# --- item 2: credentials on redirect ---------------------------------------------------------

_CREDENTIALS = {
    "bearer": {"bearer_token": "s3cret", "headers": {"X-Scope-OrgID": "tenant-a", "X-Api-Key": "k"}},
    "basic": {"basic_auth": ("alice", "pw"), "headers": {"X-Api-Key": "k"}},
}


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("auth", sorted(_CREDENTIALS))
def test_a_redirect_to_another_origin_never_carries_the_credentials(status, auth):
    with Server(prometheus) as other:

        def redirect(server, handler, seen):
            reply(handler, status, Location=other.url + handler.path)

        with Server(redirect) as first, pytest.raises(TelemetryUnavailable) as exc:
            query(first.url, **_CREDENTIALS[auth])
    message = str(exc.value)
    assert first.url in message and other.url in message, message
    assert f"HTTP {status} redirect" in message and "another origin" in message
    assert other.seen == []  # not one request: neither the token, nor the headers, nor the query
    assert all(_SECRETS & set(s.headers) for s in first.seen)  # the first server did get them
    assert len(first.seen) == 1


@pytest.mark.parametrize(
    "location",
    [
        "https://127.0.0.1:{port}{path}",  # same host and port, another scheme
        "http://localhost:{port}{path}",  # another host name for the same server
        "//127.0.0.1:{other}{path}",  # scheme-relative, another port
        "http://user:pw@127.0.0.1:{other}{path}",
        "http://127.0.0.1:99999{path}",  # no valid port at all
    ],
)
def test_every_way_out_of_the_origin_is_refused(location):
    with Server(prometheus) as other:

        def redirect(server, handler, seen):
            target = location.format(port=server.port, other=other.port, path=handler.path)
            reply(handler, 302, Location=target)

        with Server(redirect) as first, pytest.raises(TelemetryUnavailable, match="another origin") as exc:
            query(first.url, bearer_token="s3cret", headers={"X-Api-Key": "k"})
    assert other.seen == [] and len(first.seen) == 1
    assert "user:pw" not in str(exc.value)  # user info in a Location is not repeated


def test_a_redirect_within_the_origin_keeps_the_credentials():
    """A proxy that serves Prometheus under /prometheus: the first query is
    redirected (the method and form kept), every later one goes there at once."""

    def proxied(server, handler, seen):
        if not seen.path.startswith("/prometheus/"):
            reply(handler, 301, Location="/prometheus" + handler.path)
        else:
            prometheus(server, handler, seen)

    with Server(proxied) as server:
        got = query(server.url, bearer_token="s3cret", headers={"X-Scope-OrgID": "tenant-a"})
    assert got["errors"] == [] and got["pods"], got
    assert got["endpoint"] == server.url
    assert [s.path for s in server.seen].count("/api/v1/query") == 1  # redirected once, then direct
    assert all(s.method == "POST" for s in server.seen)
    assert all(s.headers.get("authorization") == "Bearer s3cret" for s in server.seen)
    assert all(s.headers.get("x-scope-orgid") == "tenant-a" for s in server.seen)


def test_a_redirect_loop_ends():
    def loop(server, handler, seen):
        reply(handler, 307, Location=handler.path)

    with Server(loop) as server, pytest.raises(TelemetryUnavailable, match="more than 5 redirects"):
        query(server.url)
    assert len(server.seen) == 6


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_https_to_http_carries_no_credentials(tmp_path):
    cert, key = _self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with Server(prometheus) as plain:

        def downgrade(server, handler, seen):
            reply(handler, 308, Location=plain.url + handler.path)

        with Server(downgrade, tls=tls) as secure:
            with pytest.raises(TelemetryUnavailable) as exc:
                query(secure.url, ca_bundle=str(cert), bearer_token="s3cret", headers={"X-Api-Key": "k"})
            # the TLS server itself works: a same-origin redirect there is followed
            assert secure.seen and secure.seen[0].headers.get("authorization") == "Bearer s3cret"
    assert plain.url in str(exc.value) and secure.url in str(exc.value)
    assert plain.seen == []


# --- item 6: a server that trickles ------------------------------------------------------------


def _trickle(data: bytes, server: Server, handler: http.server.BaseHTTPRequestHandler, every: float = 0.1) -> None:
    """One byte every ``every`` seconds: never slow enough for a socket timeout."""
    for i in range(len(data)):
        if server.stop.is_set():
            return
        handler.wfile.write(data[i : i + 1])
        handler.wfile.flush()
        time.sleep(every)


def _trickled_body(server, handler, seen):
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    handler.wfile.flush()
    _trickle(b" " * 1000, server, handler)  # bounded: 100 s at most, stopped with the server


def _trickled_headers(server, handler, seen):
    _trickle(b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 1000 + b"\r\n\r\n", server, handler)


@pytest.mark.parametrize("serve", [_trickled_body, _trickled_headers], ids=["body", "headers"])
def test_a_trickling_answer_is_cut_at_the_request_timeout(serve):
    with Server(serve) as server:
        started = time.monotonic()
        with pytest.raises(TelemetryUnavailable) as exc:
            query(server.url, timeout=1.0, deadline=30)
        took = time.monotonic() - started
    assert took < 3, took  # the socket timeout alone would wait ~100 s
    assert str(exc.value).startswith(f"Prometheus at {server.url}: timed out after 1s"), exc.value


def test_the_whole_collection_ends_at_its_deadline():
    """Every query answers in 0.4 s: each within its timeout, together past the deadline."""

    def slow(server, handler, seen):
        if _is_probe(seen.query):
            reply(handler, 200, _probe_answer())
        else:
            server.stop.wait(0.4)
            prometheus(server, handler, seen)

    with Server(slow) as server:
        started = time.monotonic()
        got = query(server.url, timeout=5, deadline=1.5)
        took = time.monotonic() - started
    assert took < 3, took
    assert got["pods"]  # what was read before the deadline is kept
    last = got["errors"][-1]
    assert last["message"] == "not sent: the telemetry deadline of 1.5s passed", got["errors"]
    assert last["endpoint"] == server.url and "," in last["query"]  # names the fields not read


def test_a_trickle_cannot_outlast_the_collection_deadline():
    with Server(_trickled_body) as server:
        started = time.monotonic()
        with pytest.raises(TelemetryUnavailable, match=r"timed out after 1(\.\d+)?s"):
            query(server.url, timeout=30, deadline=1.5)
        assert time.monotonic() - started < 3


# --- item 7: an answer without end ---------------------------------------------------------------

_LIMIT = 1_000_000
_STREAM_CAP = 64 * 2**20  # the server stops by itself after this much


def _endless(server, handler, seen, *, announce: str | None = None):
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    if announce:
        handler.send_header("Content-Length", announce)
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(b'{"status": "success", "data": {"resultType": "vector", "result": [')
    row = json.dumps(_ROW).encode() + b","
    block = row * (65536 // len(row))
    while server.sent < _STREAM_CAP and not server.stop.is_set():
        handler.wfile.write(block)
        server.sent += len(block)


@pytest.mark.parametrize("announce", [None, "3000000000"], ids=["streamed", "announced"])
def test_an_endless_answer_is_cut_at_the_byte_limit(announce):
    def serve(server, handler, seen):
        _endless(server, handler, seen, announce=announce)

    with Server(serve) as server:
        tracemalloc.start()
        try:
            with pytest.raises(TelemetryUnavailable) as exc:
                query(server.url, params={"max_response_bytes": _LIMIT})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    message = str(exc.value)
    assert message.startswith(f"Prometheus at {server.url}: answer "), message
    assert "1,000,000 bytes" in message and "max_response_bytes" in message
    assert peak < 16 * 2**20, peak
    assert server.sent < _STREAM_CAP // 2  # the client hung up; it did not read on


def test_one_endless_field_is_that_querys_error():
    answered: list[str] = []

    def serve(server, handler, seen):
        if not _is_probe(seen.query) and not answered:
            answered.append(seen.query)
            _endless(server, handler, seen)
        else:
            prometheus(server, handler, seen)

    with Server(serve) as server:
        got = query(server.url, params={"max_response_bytes": _LIMIT})
    assert len(got["errors"]) == 1, got["errors"]
    assert got["errors"][0]["endpoint"] == server.url
    assert "answer larger than 1,000,000 bytes" in got["errors"][0]["message"]
    assert got["pods"]  # the other fields were read


def test_the_default_byte_limit_is_a_sane_one():
    from gpuaudit.sources import prometheus as source

    assert source.MAX_RESPONSE_BYTES == 256 * 2**20
    with Server(prometheus) as server, pytest.raises(TelemetryUnavailable, match="max_response_bytes must be"):
        query(server.url, params={"max_response_bytes": "lots"})


# --- item 12: JSON nested 100,000 deep -----------------------------------------------------------

_DEEP = 100_000


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


_DEEP_ANSWERS = {
    "bare": _nested(_DEEP),
    "in the result": b'{"status": "success", "data": {"resultType": "vector", "result": ' + _nested(_DEEP) + b"}}",
    "in a label": b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"pod": '
    + _nested(_DEEP)
    + b'}, "value": [0, "1"]}]}}',
    "below the recursion limit": b'{"status": "success", "warnings": ' + _nested(500) + b', "data": null}',
}


@pytest.mark.parametrize("body", list(_DEEP_ANSWERS.values()), ids=list(_DEEP_ANSWERS))
def test_a_deeply_nested_answer_is_an_invalid_answer(body):
    def serve(server, handler, seen):
        reply(handler, 200, body)

    with Server(serve) as server, pytest.raises(TelemetryUnavailable) as exc:
        query(server.url)
    assert str(exc.value) == (f"Prometheus at {server.url}: invalid answer: JSON nested more than 64 levels deep")


def test_a_deeply_nested_field_or_error_body_is_that_querys_error():
    bodies = iter([(200, _DEEP_ANSWERS["in the result"]), (500, b'{"error": ' + _nested(4000) + b"}")])

    def serve(server, handler, seen):
        if _is_probe(seen.query):
            reply(handler, 200, _probe_answer())
        else:
            status, body = next(bodies, (200, _ONE_ROW))
            reply(handler, status, body)

    with Server(serve) as server:
        got = query(server.url)
    messages = [e["message"] for e in got["errors"]]
    assert messages[0] == "invalid answer: JSON nested more than 64 levels deep", messages
    assert messages[1].startswith("HTTP 500"), messages
    assert len(messages) == 2 and got["pods"]


# --- answers HTTP itself refuses -------------------------------------------------------------------


def _short(server, handler, seen):
    handler.send_response(200)
    handler.send_header("Content-Length", "1000")
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(b'{"status"')


def _bad_chunk(server, handler, seen):
    handler.send_response(200)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(b'zz\r\n{"status"')


@pytest.mark.parametrize(
    ("serve", "expected"),
    [(_short, "answer cut short: 9 bytes, 991 more announced"), (_bad_chunk, "HTTP exchange failed: ")],
    ids=["shorter than its length", "broken chunks"],
)
def test_a_broken_http_answer_is_a_reason_not_a_traceback(serve, expected):
    with Server(serve) as server, pytest.raises(TelemetryUnavailable) as exc:
        query(server.url)
    assert str(exc.value).startswith(f"Prometheus at {server.url}: {expected}"), exc.value


# --- all of them through the CLI: a labelled partial audit ----------------------------------------


def _cli_faults() -> dict[str, Callable[[Server, Server], Callable]]:
    def redirect(other):
        return lambda server, handler, seen: reply(handler, 301, Location=other.url + handler.path)

    def endless(other):
        return _endless

    def deep(other):
        return lambda server, handler, seen: reply(handler, 200, _DEEP_ANSWERS["bare"])

    return {"redirect": redirect, "endless": endless, "deep": deep}


@pytest.mark.parametrize("fault", sorted(_cli_faults()))
def test_the_audit_goes_on_labelled_partial(run_cli, tmp_path, fault):
    snapshot = copy.deepcopy(cluster_seed())
    snapshot["telemetry"] = None
    (tmp_path / "snap.json").write_text(json.dumps(snapshot))
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "cfg.yaml").write_text(f"telemetry:\n  params:\n    max_response_bytes: {_LIMIT}\n")
    with Server(prometheus) as other, Server(_cli_faults()[fault](other)) as server:
        proc = run_cli(
            "audit",
            "--snapshot",
            str(tmp_path / "snap.json"),
            "--config",
            str(tmp_path / "cfg.yaml"),
            "--prometheus",
            server.url,
            "--prometheus-token-file",
            str(tmp_path / "token"),
            "--prometheus-header",
            "X-Scope-OrgID=tenant-a",
            "--format",
            "json",
        )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    report = json.loads(proc.stdout)
    problems = [e["message"] for e in report["errors"] if f"Prometheus at {server.url}" in e["message"]]
    assert problems, report["errors"]
    assert report["summary"]["cluster"]["gpu_nodes"] > 0  # the cluster is still judged
    assert other.seen == []

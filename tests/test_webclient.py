"""gpuaudit's one HTTP transport (webclient.py) against real HTTP servers on
127.0.0.1: a wall-clock deadline per request however slowly the answer
drips, an answer read only to its bound, no redirect followed but one within
the origin of an API's URL, credentials never sent to another origin, and
failures in words that name the endpoint without its secrets. No thread of a
request outlives it."""

from __future__ import annotations

import re
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from gpuaudit.model.telemetry import TelemetryUnavailable
from gpuaudit.sources.prometheus import query_telemetry
from gpuaudit.webclient import (
    AnswerRefused,
    OriginClient,
    RequestFailed,
    SendFailed,
    Unanswered,
    exchange,
    send,
)
from tests.http_capture import reply

Answer = Callable[[BaseHTTPRequestHandler], None]


@pytest.fixture(autouse=True)
def no_thread_outlives_its_request() -> Iterator[None]:
    """A live watchdog would keep a later audit from forking its shard workers."""
    yield
    timers = [t for t in threading.enumerate() if isinstance(t, threading.Timer)]
    assert timers == [], timers


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    """Ends every dripping answer when the test ends."""
    event = threading.Event()
    yield event
    event.set()


def drip(stop: threading.Event, *, headers_too: bool = False) -> Answer:
    """An answer that sends a byte every 0.1 s: never slow enough for a socket timeout."""

    def answer(handler: BaseHTTPRequestHandler) -> None:
        head = b"HTTP/1.0 200 OK\r\nContent-Length: 1000\r\n\r\n"
        if not headers_too:
            handler.wfile.write(head)
            head = b""
        for byte in head + b" " * 1000:
            if stop.wait(0.1):
                return
            try:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
            except OSError:  # the client hung up, as it should
                return

    return answer


def endless(stop: threading.Event, *, announce: str | None = None) -> Answer:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        if announce:
            handler.send_header("Content-Length", announce)
        handler.end_headers()
        for _ in range(1000):  # 64 MB at most
            if stop.is_set():
                return
            try:
                handler.wfile.write(b"x" * 65536)
            except OSError:
                return

    return answer


def request(url: str, method: str = "GET") -> urllib.request.Request:
    return urllib.request.Request(url, method=method)


def client(url: str, **kwargs: object) -> OriginClient:
    settings: dict[str, object] = {
        "what": "Example",
        "headers": {"Accept": "application/json"},
        "timeout": 5.0,
        "stop_at": time.monotonic() + 60,
        "too_late": "not sent: past the deadline",
        "max_bytes": 1_000,
        "limit_name": "the limit's name",
    }
    return OriginClient(url, **{**settings, **kwargs})  # type: ignore[arg-type]


# --- the wall-clock deadline ----------------------------------------------------------------


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_a_dripping_answer_ends_at_the_deadline(capture, stop, headers_too):
    server = capture(drip(stop, headers_too=headers_too))
    started = time.monotonic()
    with pytest.raises(Unanswered) as exc:
        exchange(request(server.url), timeout=1.0, context=ssl.create_default_context(), max_bytes=10_000)
    assert time.monotonic() - started < 3  # a socket timeout alone would wait ~100 s
    assert exc.value.cut and exc.value.timed_out

    with pytest.raises(RequestFailed) as failed:
        client(server.url, timeout=1.0).request("/api", {"q": "1"}, "POST")
    assert str(failed.value) == "timed out after 1s (no complete answer in that time)"
    assert failed.value.transport  # the server may be down: it counts towards giving up

    with pytest.raises(SendFailed) as sent:
        send(f"{server.url}/hook/secret", b"{}", what="webhook", content_type="application/json", timeout=1)
    assert str(sent.value) == f"webhook {server.url}/…: no answer within 1s"


def test_a_tls_handshake_that_never_ends_ends_at_the_deadline():
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never speaks TLS
        url = f"https://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(RequestFailed, match=r"^timed out after 1s"):
            client(url, timeout=1.0).request("/api", {}, "GET")
        assert time.monotonic() - started < 3


def test_no_request_starts_after_the_callers_deadline(capture):
    server = capture()
    late = client(server.url, stop_at=time.monotonic() - 1)
    with pytest.raises(RequestFailed, match=r"^not sent: past the deadline$") as exc:
        late.request("/api", {}, "POST")
    assert not exc.value.transport and late.sent == 0 and server.requests == []


# --- the bound on an answer ------------------------------------------------------------------


def test_an_answer_is_read_only_to_its_bound(capture, stop):
    server = capture(endless(stop))
    context = ssl.create_default_context()
    answer = exchange(request(server.url), timeout=5, context=context, max_bytes=4096)
    assert answer.status == 200 and answer.body == b"x" * 4096  # the rest left unread

    with pytest.raises(AnswerRefused, match=r"^answer larger than 4,096 bytes: not read further \(name\)$"):
        exchange(request(server.url), timeout=5, context=context, max_bytes=4096, refuse_larger=True,
                 limit_name="name")  # fmt: skip
    with pytest.raises(RequestFailed) as exc:
        client(server.url).request("/api", {}, "GET")
    assert str(exc.value) == "answer larger than 1,000 bytes: not read further (the limit's name)"
    assert not exc.value.transport


def test_an_announced_size_beyond_the_bound_is_refused_unread(capture, stop):
    server = capture(endless(stop, announce="3000000000"))
    with pytest.raises(RequestFailed) as exc:
        client(server.url).request("/api", {}, "GET")
    assert str(exc.value) == "answer of 3,000,000,000 bytes refused: the limit is 1,000 bytes (the limit's name)"


def test_of_an_error_answer_only_its_start_is_read(capture):
    server = capture(reply(500, b"e" * 100_000))
    answer = client(server.url, error_bytes=100).request("/api", {}, "GET")
    assert answer.status == 500 and answer.body == b"e" * 100  # the caller judges a 5xx


def test_an_answer_shorter_than_it_announced_is_a_transport_failure(capture):
    def short(handler: BaseHTTPRequestHandler) -> None:
        handler.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")

    server = capture(short)
    with pytest.raises(RequestFailed) as exc:
        client(server.url).request("/api", {}, "GET")
    assert str(exc.value) == "answer cut short: 10 bytes, 990 more announced" and exc.value.transport


# --- redirects and credentials ------------------------------------------------------------------


def test_send_follows_no_redirect_and_names_the_origin_only(capture):
    elsewhere = capture()
    server = capture(reply(307, b"", {"Location": f"{elsewhere.url}/collect"}))
    with pytest.raises(SendFailed) as exc:
        send(f"{server.url}/hook/s3cret?token=abc", b"{}", what="webhook", content_type="application/json")
    assert str(exc.value).startswith(f"webhook {server.url}/…: answered HTTP 307, a redirect, which is not followed")
    assert "s3cret" not in str(exc.value) and "token" not in str(exc.value)
    assert len(server.requests) == 1 and elsewhere.requests == []
    # the redirect itself comes back as it is to the caller of exchange()
    answer = exchange(request(server.url), timeout=5, context=ssl.create_default_context(), max_bytes=100)
    assert answer.status == 307 and answer.headers["Location"] == f"{elsewhere.url}/collect"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_credentials_never_go_to_another_origin(capture, status):
    other = capture()
    server = capture(reply(status, b"", {"Location": f"{other.url}/api"}))
    api = client(f"http://alice:pw@{server.url.removeprefix('http://')}/base", headers={"X-Api-Key": "k"})
    assert api.endpoint == f"{server.url}/base"  # user info never shown
    with pytest.raises(RequestFailed) as exc:
        api.request("/api", {"q": "1"}, "POST")
    message = str(exc.value)
    assert message.startswith(f"HTTP {status} redirect from {server.url}/base/api to {other.url}/api not followed")
    assert "of the Example URL" in message and "alice" not in message and "pw" not in message
    assert other.requests == []
    [sent] = server.requests
    assert sent["path"] == "/base/api"  # user info is never sent in the URL: as basic auth
    headers = {name.lower(): value for name, value in sent["headers"].items()}
    assert headers["authorization"] == "Basic YWxpY2U6cHc=" and headers["x-api-key"] == "k"


def test_a_redirect_within_the_origin_is_followed_and_kept(capture):
    def proxied(handler: BaseHTTPRequestHandler) -> None:
        if handler.path.startswith("/prefix/"):
            reply(200, b"{}")(handler)
        else:
            reply(308, b"", {"Location": "/prefix" + handler.path})(handler)

    server = capture(proxied)
    api = client(server.url, bearer_token="s3cret")
    assert api.request("/api", {"q": "a"}, "POST").status == 200
    assert api.request("/api", {"q": "b"}, "POST").status == 200  # straight to the prefix
    assert [(r["method"], r["path"]) for r in server.requests] == [
        ("POST", "/api"),
        ("POST", "/prefix/api"),
        ("POST", "/prefix/api"),
    ]
    assert all(r["headers"]["Authorization"] == "Bearer s3cret" for r in server.requests)
    assert [r["body"] for r in server.requests] == [b"q=a", b"q=a", b"q=b"]
    assert api.sent == 3 and api.endpoint == server.url  # the endpoint named stays the one given


def test_a_redirect_loop_ends(capture):
    server = capture(reply(302, b"", {"Location": "/again"}))
    with pytest.raises(RequestFailed, match=f"^more than 5 redirects from {server.url}/api$"):
        client(server.url).request("/api", {}, "GET")
    assert len(server.requests) == 6


def test_a_ca_bundle_that_cannot_be_used_is_named(tmp_path):
    (tmp_path / "ca.pem").write_text("not a certificate")
    with pytest.raises(RequestFailed, match=f"^cannot use the CA bundle {re.escape(str(tmp_path / 'ca.pem'))}: "):
        client("https://127.0.0.1:1", ca_bundle=str(tmp_path / "ca.pem"))


# --- failures in words that name the endpoint ----------------------------------------------------


def test_a_refused_connection(capture):
    with socket.create_server(("127.0.0.1", 0)) as probe:
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"  # closed below: nothing listens there
    with pytest.raises(RequestFailed, match=r"^cannot connect: .*Connection refused") as exc:
        client(url).request("/api", {}, "GET")
    assert exc.value.transport
    with pytest.raises(SendFailed, match=rf"^Pushgateway {url}/…: cannot send: Connection refused$"):
        send(f"{url}/metrics", b"", what="Pushgateway", content_type="text/plain", method="PUT")


@pytest.mark.parametrize(
    ("status", "body", "words"),
    [
        (403, b"forbidden: no token", "HTTP 403 Forbidden: forbidden: no token"),
        (
            500,
            b'{"status":"error","errorType":"internal","error":"boom"}',
            "HTTP 500 Internal Server Error: internal: boom",  # Prometheus' error, read by its source
        ),
    ],
)
def test_an_error_status_names_the_endpoint(capture, status, body, words):
    server = capture(reply(status, body))
    with pytest.raises(SendFailed) as sent:
        send(f"{server.url}/hook/s3cret", b"{}", what="webhook", content_type="application/json")
    assert str(sent.value).startswith(f"webhook {server.url}/…: answered HTTP {status}: ")
    with pytest.raises(TelemetryUnavailable) as read:
        query_telemetry(f"http://u:pw@{server.url.removeprefix('http://')}", window_seconds=3600, timeout=5)
    assert str(read.value) == f"Prometheus at {server.url}: {words}"


def test_a_timeout_names_the_endpoint(capture, stop):
    server = capture(drip(stop))
    with pytest.raises(TelemetryUnavailable) as read:
        query_telemetry(server.url, window_seconds=3600, timeout=1, deadline=10)
    assert str(read.value) == f"Prometheus at {server.url}: timed out after 1s (no complete answer in that time)"

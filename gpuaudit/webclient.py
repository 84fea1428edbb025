"""HTTP under the rules every outbound request of gpuaudit keeps: a wall-clock
deadline per request, however slowly the other end trickles its bytes, no
redirect followed behind the caller's back, an answer read only up to a bound.

Two users: the Prometheus client (``sources/prometheus.py``), which follows a
redirect itself when it stays within the origin, and :func:`send`, which
writes what a run publishes (a Pushgateway's metrics, a webhook's message)
and follows none. A webhook's URL is a secret (Slack's carries its token in
the path): what :func:`send` says about a failure names only the origin
(:func:`shown_url`), never the path or query.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec

# Bytes of an answer read at most: a Pushgateway or a webhook answers "ok" or a
# short error; more is not read.
MAX_ANSWER_BYTES = 64 * 1024
# Characters of the other end's answer quoted in a failure.
_QUOTED_CHARS = 200
DEFAULT_TIMEOUT_S = 15.0


# --- a wall-clock deadline per request -----------------------------------------------


def _shut(sock: socket.socket) -> None:
    # the plain socket's shutdown, also for an SSLSocket: it wakes a blocked read
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class Watchdog:
    """Ends one request at its wall-clock deadline. A socket timeout restarts
    with every byte received, so a server that trickles one byte at a time
    would hold a request forever; at the deadline this shuts down the
    request's sockets, which ends a blocked connect, handshake or read at once."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.fired = False
        self._done = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        # Wait for the timer's thread to end: a live thread would keep a later
        # audit from forking its shard workers (pipelines/shards.py).
        self._timer.join()
        with self._lock:
            self._done = True
            self._sockets.clear()

    def attach(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            if not self._done:
                self._sockets.append(sock)
            fired = self.fired
        if fired:
            _shut(sock)
        return sock

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


class _GuardedContext:
    """An SSLContext whose sockets the watchdog can end during the handshake too."""

    def __init__(self, context: ssl.SSLContext, watchdog: Watchdog):
        self._context = context
        self._watchdog = watchdog

    def wrap_socket(self, sock: socket.socket, **kwargs: Any) -> ssl.SSLSocket:
        kwargs["do_handshake_on_connect"] = False
        wrapped = self._context.wrap_socket(sock, **kwargs)
        self._watchdog.attach(wrapped)
        wrapped.do_handshake()
        return wrapped

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def _guarded(cls: type[http.client.HTTPConnection], watchdog: Watchdog) -> Callable[..., http.client.HTTPConnection]:
    def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
        conn = cls(host, **kwargs)
        create = conn._create_connection  # socket.create_connection, also for a proxy tunnel
        conn._create_connection = lambda *a, **k: watchdog.attach(create(*a, **k))  # type: ignore[method-assign]
        return conn

    return make


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, watchdog: Watchdog):
        super().__init__()
        self._watchdog = watchdog

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_guarded(http.client.HTTPConnection, self._watchdog), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, watchdog: Watchdog, context: ssl.SSLContext):
        super().__init__(context=_GuardedContext(context, watchdog))  # type: ignore[arg-type]
        self._watchdog = watchdog

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_guarded(http.client.HTTPSConnection, self._watchdog), req, context=self._context)


def guarded_opener(watchdog: Watchdog, context: ssl.SSLContext) -> urllib.request.OpenerDirector:
    """An opener whose connections ``watchdog`` ends at its deadline. It has no
    redirect or error handler: every answer, a 3xx or a 5xx too, comes back
    as it is, for the caller to judge."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        _HTTPHandler(watchdog),
        _HTTPSHandler(watchdog, context),
        urllib.request.UnknownHandler(),
    ):
        opener.add_handler(handler)
    return opener


# --- sending what a run publishes ----------------------------------------------------


class SendFailed(Exception):
    """Why a request did not succeed, in words that never carry its URL's
    path, query or credentials."""


class Answer(msgspec.Struct, frozen=True):
    status: int
    body: bytes  # at most the bound it was read to


def shown_url(url: str) -> str:
    """``scheme://host[:port]/…``: a URL as a message may name it. A webhook's
    path or query is its secret, and user:password@ is one too."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an invalid URL)"
    if ":" in host:
        host = f"[{host}]"
    hidden = "/…" if parts.path.strip("/") or parts.query or parts.fragment else ""
    return f"{parts.scheme}://{host}{port}{hidden}"


def check_url(url: str, what: str) -> None:
    """A usage error, before anything is sent, for a URL that is no http(s) URL."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # a bad port raises here
    except ValueError as exc:
        raise SendFailed(f"{what} {shown_url(url)}: not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SendFailed(f"{what} {shown_url(url)}: not an http:// or https:// URL")


def _quote(raw: bytes, url: str) -> str:
    """The start of an error answer, printable, with the URL's secret parts
    (path, query) cut out should the other end echo them."""
    text = raw[:_QUOTED_CHARS].decode("utf-8", "replace")
    parts = urlsplit(url)
    for secret in (parts.query, parts.path if parts.path.strip("/") else ""):
        if secret:
            text = text.replace(secret, "…")
    text = "".join(c if c.isprintable() else " " for c in text).strip()
    return f": {text}" if text else ""


def send(
    url: str,
    body: bytes,
    *,
    what: str,
    content_type: str,
    method: str = "POST",
    timeout: float = DEFAULT_TIMEOUT_S,
    max_answer_bytes: int = MAX_ANSWER_BYTES,
    context: ssl.SSLContext | None = None,
) -> Answer:
    """Send ``body`` to ``url`` once and return the 2xx answer (read to at most
    ``max_answer_bytes``; the rest is left unread). Raises :class:`SendFailed`
    naming ``what`` and the URL's origin only: on a redirect (never followed:
    it would carry the body, maybe to another host), a non-2xx status, a
    connection error, or no answer within ``timeout`` seconds of wall time."""
    check_url(url, what)
    where = f"{what} {shown_url(url)}"
    headers: Mapping[str, str] = {"Content-Type": content_type, "User-Agent": "gpuaudit"}
    request = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
    context = context or ssl.create_default_context()
    timed_out = f"{where}: no answer within {timeout:g}s"
    with Watchdog(timeout) as watchdog:
        try:
            with guarded_opener(watchdog, context).open(request, timeout=timeout) as resp:
                status = resp.status
                answer = resp.read(max_answer_bytes) if status not in (204, 304) else b""
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if watchdog.fired:
                raise SendFailed(timed_out) from None
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if isinstance(reason, TimeoutError):
                raise SendFailed(timed_out) from None
            # the exception's text may quote the URL: only its type is named
            detail = reason.strerror if isinstance(reason, OSError) and reason.strerror else type(reason).__name__
            raise SendFailed(f"{where}: cannot send: {detail}") from None
        if watchdog.fired:
            raise SendFailed(timed_out)
    if 300 <= status < 400:
        raise SendFailed(
            f"{where}: answered HTTP {status}, a redirect, which is not followed (it would take the body "
            "elsewhere); give the URL it leads to"
        )
    if not 200 <= status < 300:
        raise SendFailed(f"{where}: answered HTTP {status}{_quote(answer, url)}")
    return Answer(status, answer)

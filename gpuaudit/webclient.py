"""HTTP under the rules every outbound request of gpuaudit keeps: a wall-clock
deadline per request, however slowly the other end trickles its bytes, no
redirect followed behind the caller's back, an answer read only up to a bound,
and a URL named in messages without its secrets. It is gpuaudit's one way to
do HTTP: every request goes through :func:`exchange`.

Two users:

- :func:`send` writes what a run publishes (a Pushgateway's metrics, a
  webhook's message) and follows no redirect. A webhook's URL is a secret
  (Slack's carries its token in the path): what it says about a failure
  names only the origin (:func:`shown_url`), never the path or query.
- :class:`OriginClient` reads an HTTP API at one URL with credentials (the
  Prometheus source, ``sources/prometheus.py``): a bearer token, basic auth
  (also given as ``user:password@`` in the URL, which is then never sent in
  it) or extra headers, and a CA bundle. They go to the origin (scheme, host,
  port) of that URL and nowhere else: a redirect within it (a proxy's path
  prefix) is followed, one to another origin (https -> http included) is
  refused and named. Its messages name the URL without ``user:password@``.

Proxies are those of the environment (``http_proxy``, ``https_proxy``,
``no_proxy``), as urllib reads them.

Why the standard library and not a client library: urllib3 and requests
bound each socket operation, not the request ("if a server streams one byte
every fifteen seconds, a timeout of 20 seconds will not trigger", urllib3's
``Timeout`` documentation; psf/requests#1928), and httpx has no total timeout
either (encode/httpx#1450, open); each would need this module's watchdog all
the same, and the size bound, the redirect rule and the wording of failures
are ours in any case. urllib3 is installed only with the Kubernetes client,
and httpx would be a new dependency with four of its own; the standard
library gives one transport with no dependency.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from email.message import Message
from typing import Any
from urllib.parse import unquote, urlencode, urljoin, urlsplit, urlunsplit

import msgspec

# Bytes of an answer read at most: a Pushgateway or a webhook answers "ok" or a
# short error; more is not read.
MAX_ANSWER_BYTES = 64 * 1024
DEFAULT_TIMEOUT_S = 15.0
# Characters of the other end's answer quoted in a failure of send().
_QUOTED_CHARS = 200
# Characters of other text (an exception's, a Location) kept in a message.
_TEXT_CHARS = 300
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Bytes of an error answer an OriginClient reads: enough for its message.
ERROR_BYTES = 4096
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5


def _clip(value: Any, limit: int = _TEXT_CHARS) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit] + "…"


# --- where a URL leads, and how a message names it -----------------------------------


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port): where credentials may go. Raises ValueError on a bad port."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme)


def is_http_url(url: str) -> bool:
    """An http:// or https:// URL with a host and a valid port."""
    try:
        scheme, host, _ = origin(url)
    except ValueError:
        return False
    return scheme in _DEFAULT_PORTS and bool(host)


def without_userinfo(url: str) -> str:
    """The URL without user:password@."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


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
        create = conn._create_connection  # type: ignore[attr-defined]  # socket.create_connection, also for a proxy tunnel
        conn._create_connection = lambda *a, **k: watchdog.attach(create(*a, **k))  # type: ignore[attr-defined]
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
        self._guarded_context = _GuardedContext(context, watchdog)
        super().__init__(context=self._guarded_context)  # type: ignore[arg-type]
        self._watchdog = watchdog

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = _guarded(http.client.HTTPSConnection, self._watchdog)
        return self.do_open(connection, req, context=self._guarded_context)


def _opener(watchdog: Watchdog, context: ssl.SSLContext) -> urllib.request.OpenerDirector:
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


# --- one request -------------------------------------------------------------------------


class Response(msgspec.Struct, frozen=True):
    status: int
    reason: str
    headers: Message
    body: bytearray  # at most the bound it was read to; a redirect's is not read


class Unanswered(Exception):
    """No complete answer: ``cut`` when the wall-clock deadline ended the
    request, else ``cause`` says why (its text may quote the URL)."""

    def __init__(self, cause: BaseException | None = None, *, cut: bool = False):
        super().__init__(type(cause).__name__ if cause else "cut at the deadline")
        self.cause = cause
        self.cut = cut

    @property
    def reason(self) -> BaseException | None:
        """The cause, or what urllib wrapped in it."""
        cause = self.cause
        return cause.reason if isinstance(cause, urllib.error.URLError) else cause  # type: ignore[return-value]

    @property
    def timed_out(self) -> bool:
        return self.cut or isinstance(self.reason, TimeoutError)


class AnswerRefused(Exception):
    """An answer beyond its bound, or shorter than it announced (``transport``)."""

    def __init__(self, message: str, *, transport: bool = False):
        super().__init__(message)
        self.transport = transport


def _read(resp: http.client.HTTPResponse, limit: int, *, refuse: bool, limit_name: str) -> bytearray:
    """At most ``limit`` bytes: more is cut off, or refused when ``refuse``."""
    named = f" ({limit_name})" if limit_name else ""
    length = resp.headers.get("Content-Length", "").strip()
    if refuse and length.isdigit() and int(length) > limit:
        raise AnswerRefused(f"answer of {int(length):,} bytes refused: the limit is {limit:,} bytes{named}")
    body = bytearray()
    while len(body) <= limit:
        chunk = resp.read(min(2**20, limit + 1 - len(body)))
        if not chunk:
            missing = getattr(resp, "length", None)  # of a Content-Length, still unread
            if missing and refuse:
                raise AnswerRefused(
                    f"answer cut short: {len(body):,} bytes, {missing:,} more announced", transport=True
                )
            return body  # json.loads takes a bytearray: no copy of a large answer
        body += chunk
    if not refuse:
        return body[:limit]
    raise AnswerRefused(f"answer larger than {limit:,} bytes: not read further{named}")


def exchange(
    request: urllib.request.Request,
    *,
    timeout: float,
    context: ssl.SSLContext,
    max_bytes: int,
    error_bytes: int | None = None,
    refuse_larger: bool = False,
    limit_name: str = "",
) -> Response:
    """Send ``request`` and return the answer, whatever its status: a redirect
    is not followed (its body is not read), a 2xx body is read to at most
    ``max_bytes`` (a larger one cut there, or refused with
    :class:`AnswerRefused` naming ``limit_name`` when ``refuse_larger``), any
    other to at most ``error_bytes`` (default ``max_bytes``). Raises
    :class:`Unanswered` when no complete answer came within ``timeout``
    seconds of wall time, or the connection or the exchange failed."""
    with Watchdog(timeout) as watchdog:
        try:
            with _opener(watchdog, context).open(request, timeout=timeout) as resp:
                status, reason, headers = resp.status, resp.reason, resp.headers
                body = bytearray()
                if 200 <= status < 300:
                    body = _read(resp, max_bytes, refuse=refuse_larger, limit_name=limit_name)
                elif status not in REDIRECTS:
                    body = _read(resp, error_bytes or max_bytes, refuse=False, limit_name=limit_name)
        except (AnswerRefused, OSError, http.client.HTTPException, ValueError) as exc:
            if watchdog.fired:  # whatever the cut made of the answer
                raise Unanswered(cut=True) from None
            if isinstance(exc, AnswerRefused):
                raise
            raise Unanswered(exc) from None
        if watchdog.fired:  # a close-delimited body cut short by the watchdog
            raise Unanswered(cut=True)
    return Response(status, reason, headers, body)


# --- sending what a run publishes ----------------------------------------------------


class SendFailed(Exception):
    """Why a request did not succeed, in words that never carry its URL's
    path, query or credentials."""


def check_url(url: str, what: str) -> None:
    """A usage error, before anything is sent, for a URL that is no http(s) URL."""
    try:
        _ = urlsplit(url).port  # a bad port raises here
    except ValueError as exc:
        raise SendFailed(f"{what} {shown_url(url)}: not a valid URL ({exc})") from None
    if not is_http_url(url):
        raise SendFailed(f"{what} {shown_url(url)}: not an http:// or https:// URL")


def _quote(raw: bytes | bytearray, url: str) -> str:
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
) -> Response:
    """Send ``body`` to ``url`` once and return the 2xx answer (read to at most
    ``max_answer_bytes``; the rest is left unread). Raises :class:`SendFailed`
    naming ``what`` and the URL's origin only: on a redirect (never followed:
    it would carry the body, maybe to another host), a non-2xx status, a
    connection error, or no answer within ``timeout`` seconds of wall time."""
    check_url(url, what)
    where = f"{what} {shown_url(url)}"
    headers = {"Content-Type": content_type, "User-Agent": "gpuaudit"}
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        answer = exchange(
            request, timeout=timeout, context=context or ssl.create_default_context(), max_bytes=max_answer_bytes
        )
    except Unanswered as exc:
        if exc.timed_out:
            raise SendFailed(f"{where}: no answer within {timeout:g}s") from None
        reason = exc.reason
        # the exception's text may quote the URL: only its type is named
        detail = reason.strerror if isinstance(reason, OSError) and reason.strerror else type(reason).__name__
        raise SendFailed(f"{where}: cannot send: {detail}") from None
    if 300 <= answer.status < 400:
        raise SendFailed(
            f"{where}: answered HTTP {answer.status}, a redirect, which is not followed (it would take the body "
            "elsewhere); give the URL it leads to"
        )
    if not 200 <= answer.status < 300:
        raise SendFailed(f"{where}: answered HTTP {answer.status}{_quote(answer.body, url)}")
    return answer


# --- an HTTP API at one origin, with credentials ----------------------------------------


class RequestFailed(Exception):
    """Why a request of an :class:`OriginClient` got no answer, in words
    without the URL's credentials. ``transport``: the connection or the
    exchange failed, or the request timed out (the server may be down)."""

    def __init__(self, message: str, *, transport: bool = False):
        super().__init__(message)
        self.transport = transport


def _seconds(value: float) -> str:
    return f"{value:.3g}"


def _split_userinfo(url: str, basic_auth: tuple[str, str] | None) -> tuple[str, tuple[str, str] | None]:
    """``http://user:pw@host`` -> the URL without them, and them as basic auth
    (unless other credentials are given): user info is never sent in the URL."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, basic_auth
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=host)), basic_auth or (unquote(user), unquote(password))


def _auth_headers(
    headers: Mapping[str, str], bearer_token: str | None, basic_auth: tuple[str, str] | None
) -> dict[str, str]:
    out = dict(headers)
    if bearer_token:
        out["Authorization"] = f"Bearer {bearer_token}"
    elif basic_auth:
        user, password = basic_auth
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        out["Authorization"] = f"Basic {token}"
    return out


def _unanswered_message(exc: Unanswered, timed_out: str) -> str:
    if exc.cut:
        return f"{timed_out} (no complete answer in that time)"
    reason = exc.reason
    if isinstance(reason, TimeoutError):
        return timed_out
    if isinstance(exc.cause, urllib.error.URLError):
        return f"cannot connect: {_clip(reason)}"
    if isinstance(exc.cause, (http.client.HTTPException, ValueError)):
        return f"HTTP exchange failed: {type(exc.cause).__name__}: {_clip(exc.cause)}"
    return f"connection failed: {_clip(exc.cause)}"


class OriginClient:
    """Form-encoded requests to paths under ``url``, with its credentials,
    answered whatever their status (the caller judges a 4xx or 5xx). Follows
    redirects within the origin of ``url`` only; each request ends within
    ``timeout`` seconds of wall clock, and none starts after ``stop_at``
    (``time.monotonic()``): then :class:`RequestFailed` says ``too_late``.
    A 2xx answer may take ``max_bytes`` (more is refused, naming
    ``limit_name``); of any other only the start is read. ``what`` names the
    URL in messages ("the Prometheus URL"). Raises :class:`RequestFailed`
    when ``ca_bundle`` cannot be used."""

    def __init__(
        self,
        url: str,
        *,
        what: str,
        headers: Mapping[str, str],
        bearer_token: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        ca_bundle: str | None = None,
        timeout: float,
        stop_at: float,
        too_late: str,
        max_bytes: int,
        limit_name: str = "",
        error_bytes: int = ERROR_BYTES,
    ):
        url, basic_auth = _split_userinfo(url, basic_auth)
        self.base = url.rstrip("/")
        self.endpoint = without_userinfo(self.base)
        self.origin = origin(self.base)
        self.what = what
        self.headers = _auth_headers(headers, bearer_token, basic_auth)
        try:
            self.context = ssl.create_default_context(cafile=ca_bundle)
        except OSError as exc:  # ssl.SSLError is one
            raise RequestFailed(f"cannot use the CA bundle {ca_bundle}: {_clip(exc)}") from None
        self.timeout = timeout
        self.stop_at = stop_at
        self.too_late = too_late
        self.max_bytes = max_bytes
        self.limit_name = limit_name
        self.error_bytes = error_bytes
        self.sent = 0  # requests, each redirect's too

    def request(self, path: str, form: Mapping[str, str], method: str) -> Response:
        """``form`` POSTed to ``path`` (or in the query of a GET), through the
        redirects within the origin."""
        encoded = urlencode(form)
        url = self.base + path
        if method == "GET":
            url = f"{url}?{encoded}"
        for _ in range(MAX_REDIRECTS + 1):
            answer = self._exchange(url, method, encoded)
            if answer.status not in REDIRECTS:
                return answer
            url, method = self._follow(url, path, answer.status, answer.headers.get("Location"), method, encoded)
        raise RequestFailed(f"more than {MAX_REDIRECTS} redirects from {without_userinfo(self.base + path)}")

    def _budget(self) -> float:
        """Seconds the next request may take: ``timeout``, less near ``stop_at``."""
        left = self.stop_at - time.monotonic()
        if left <= 0:
            raise RequestFailed(self.too_late)
        return min(self.timeout, left)

    def _follow(
        self, url: str, path: str, status: int, location: str | None, method: str, encoded: str
    ) -> tuple[str, str]:
        """Where a redirect leads, if it stays within the origin: a redirect to
        another scheme, host or port would take the credentials with it."""
        if not location:
            raise RequestFailed(f"HTTP {status} redirect without a Location")
        target = urljoin(url, location.strip())
        shown = _clip(without_userinfo(target), 200)
        try:
            same = origin(target) == self.origin
        except ValueError:
            same = False
        if not same:
            raise RequestFailed(
                f"HTTP {status} redirect from {without_userinfo(url.split('?')[0])} to {shown} not "
                f"followed: it leaves the origin (scheme, host, port) of the {self.what} URL, "
                "and credentials and headers are never sent to another origin; if that is "
                f"the right server, give its address as the {self.what} URL"
            )
        parts = urlsplit(target)
        if parts.path.endswith(path):
            # a path prefix (a proxy): send every later request there directly
            prefix = parts.path[: len(parts.path) - len(path)]
            self.base = urlunsplit((parts.scheme, parts.netloc, prefix, "", "")).rstrip("/")
        if status == 303:
            method = "GET"
        if method == "GET" and not parts.query:
            target = urlunsplit(parts._replace(query=encoded, fragment=""))
        return target, method

    def _exchange(self, url: str, method: str, encoded: str) -> Response:
        budget = self._budget()
        headers = dict(self.headers)
        body = None
        if method == "POST":
            body = encoded.encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        request = urllib.request.Request(url, data=body, headers=headers, method=method)
        self.sent += 1
        try:
            return exchange(
                request,
                timeout=budget,
                context=self.context,
                max_bytes=self.max_bytes,
                error_bytes=self.error_bytes,
                refuse_larger=True,
                limit_name=self.limit_name,
            )
        except Unanswered as exc:
            message = _unanswered_message(exc, f"timed out after {_seconds(budget)}s")
            raise RequestFailed(message, transport=True) from None
        except AnswerRefused as exc:
            raise RequestFailed(str(exc), transport=exc.transport) from None

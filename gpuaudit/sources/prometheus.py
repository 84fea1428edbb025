"""Read GPU telemetry aggregates from a Prometheus-compatible HTTP API (Prometheus,
Thanos, Mimir, VictoriaMetrics) holding dcgm-exporter series.

Everything is aggregated in PromQL over the window (see gpuaudit/data/promql.yaml):
one probe query finds which metrics exist, then one instant query per field
covers every pod at once. The number of queries therefore does not depend on
the number of pods; it grows only when

- a subquery would hold more points than ``max_points_per_query`` (split by
  GPU UUID, at most 16 parts), or
- a ``pods`` filter needs its names split into chunks (at most ``max_chunks``;
  beyond that everything is read and filtered here).

Failures never raise, they land in ``errors``; only when nothing at all could
be read does :class:`TelemetryUnavailable` carry the reason to the caller.

The server is not trusted:

- credentials (bearer token, basic auth, extra headers) go to the origin
  (scheme, host, port) of the URL given and nowhere else: a redirect within it
  (a proxy's path prefix) is followed, one to another origin (https -> http
  included) is refused and named;
- every request ends within ``timeout`` seconds of wall-clock time, however
  slowly the server trickles its bytes, and the whole collection within
  ``deadline`` seconds;
- an answer may take at most ``max_response_bytes`` (a telemetry param,
  default :data:`MAX_RESPONSE_BYTES`) and nest at most
  :data:`MAX_JSON_DEPTH` levels; beyond either it is that query's error.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from email.message import Message
from typing import Any
from urllib.parse import unquote, urlencode, urljoin, urlsplit, urlunsplit

from gpuaudit.model import telemetry
from gpuaudit.model.telemetry import TelemetryUnavailable
from gpuaudit.sources import promql
from gpuaudit.sources.promql import Candidate, Field, QuerySpec
from gpuaudit.webclient import Watchdog as _Watchdog
from gpuaudit.webclient import guarded_opener

__all__ = ["DEFAULT_DEADLINE_S", "MAX_JSON_DEPTH", "MAX_RESPONSE_BYTES", "TelemetryUnavailable",
           "query_telemetry"]

_MERGE_TO_COMBINE = {"avg": "mean", "max": "max", "min": "min", "sum": "sum"}
_TOO_LARGE = {413, 414, 431}
_REDIRECTS = {301, 302, 303, 307, 308}
_MAX_REDIRECTS = 5
_DEFAULT_PORTS = {"http": 80, "https": 443}
# After this many transport failures (timeouts, refused connections) in a row the
# server is down or drowning; stop sending it more work.
_MAX_TRANSPORT_FAILURES = 2
# Bytes one answer may take (telemetry param ``max_response_bytes`` overrides it).
# A week of 5,000 pods is a few MB per query; far more is not a Prometheus answer.
MAX_RESPONSE_BYTES = 256 * 2**20
# Seconds the whole collection may take when the caller gives no ``deadline``.
DEFAULT_DEADLINE_S = 600.0
# A Prometheus answer nests 5 levels ({data: {result: [{metric: {}, value: []}]}}).
MAX_JSON_DEPTH = 64
# Bytes of an error answer kept for its message; characters of server text kept.
_ERROR_BODY_BYTES = 4096
_TEXT_CHARS = 300
_MAX_WARNINGS = 10


class _QueryFailed(Exception):
    def __init__(self, message: str, *, too_large: bool = False, transport: bool = False,
                 status: int | None = None):
        super().__init__(message)
        self.too_large = too_large
        self.transport = transport
        self.status = status


def _redact(url: str) -> str:
    """The URL without user:password@."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _clip(value: Any, limit: int = _TEXT_CHARS) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _seconds(value: float) -> str:
    return f"{value:.3g}"


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port): where credentials may go. Raises ValueError on a bad port."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme)


# --- reading an answer ------------------------------------------------------------------


def _read_body(resp: http.client.HTTPResponse, limit: int, *, truncate: bool = False) -> bytearray:
    """At most ``limit`` bytes; more is an error unless ``truncate``."""
    length = resp.headers.get("Content-Length", "").strip()
    if not truncate and length.isdigit() and int(length) > limit:
        raise _QueryFailed(f"answer of {int(length):,} bytes refused: the limit is {limit:,} "
                           "bytes (telemetry param max_response_bytes)")
    body = bytearray()
    while len(body) <= limit:
        chunk = resp.read(min(2**20, limit + 1 - len(body)))
        if not chunk:
            missing = getattr(resp, "length", None)  # of a Content-Length, still unread
            if missing and not truncate:
                raise _QueryFailed(f"answer cut short: {len(body):,} bytes, {missing:,} more "
                                   "announced", transport=True)
            return body  # json.loads takes a bytearray: no copy of a large answer
        body += chunk
    if truncate:
        return body[:limit]
    raise _QueryFailed(f"answer larger than {limit:,} bytes: not read further "
                       "(telemetry param max_response_bytes)")


def _too_deep(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def _parse_json(raw: bytes) -> Any:
    """The JSON value; an invalid or absurdly nested one is a failed query."""
    deep = _QueryFailed(f"invalid answer: JSON nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        value = json.loads(raw)
    except RecursionError:
        raise deep from None
    except ValueError:
        raise _QueryFailed("response is not JSON") from None
    if isinstance(value, (dict, list)) and _too_deep(value, MAX_JSON_DEPTH):
        raise deep
    return value


class _Client:
    """POSTs form-encoded queries (no URL length limits); falls back to GET
    once a server or proxy answers 405. Follows redirects within the origin
    of ``url`` only; each request ends within ``timeout`` seconds of wall
    clock, and none starts after ``stop_at`` (``time.monotonic()``)."""

    def __init__(self, url: str, *, headers: Mapping[str, str], context: ssl.SSLContext,
                 timeout: float, stop_at: float, deadline: float, max_response_bytes: int):
        self.base = url.rstrip("/")
        self.endpoint = _redact(self.base)
        self.origin = _origin(self.base)
        self.headers = dict(headers)
        self.context = context
        self.timeout = timeout
        self.stop_at = stop_at
        self.deadline = deadline
        self.max_response_bytes = max_response_bytes
        self.method = "POST"
        self.sent = 0
        self.warnings: list[str] = []  # of the last successful call

    def out_of_time(self) -> bool:
        return time.monotonic() >= self.stop_at

    def _budget(self) -> float:
        """Seconds the next request may take: ``timeout``, less near the deadline."""
        left = self.stop_at - time.monotonic()
        if left <= 0:
            raise _QueryFailed(f"not sent: the telemetry deadline of {_seconds(self.deadline)}s passed")
        return min(self.timeout, left)

    def instant(self, query: str, at: float) -> list[dict[str, Any]]:
        # Prometheus durations take no fractions: milliseconds
        budget = min(self.timeout, max(0.0, self.stop_at - time.monotonic()))
        form = {"query": query, "time": f"{at:.3f}",
                "timeout": f"{max(1, round(budget * 1000))}ms"}
        data = self._call("/api/v1/query", form)
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
            raise _QueryFailed(f"unexpected result type {_clip(kind)}")
        result = data.get("result")
        if not isinstance(result, list):
            raise _QueryFailed("malformed response: no result list")
        return [_series(item) for item in result if isinstance(item, dict)]

    def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        form = {"match[]": match, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        data = self._call(f"/api/v1/label/{label}/values", form, method="GET")
        if not isinstance(data, list):
            raise _QueryFailed("malformed response: label values are not a list")
        return [x for x in data if isinstance(x, str)]

    def max_bytes(self, params: Mapping[str, Any]) -> int:
        """Bytes a query text may take: the method's limit less room for the
        other form fields (time, timeout) and the URL path."""
        limit = params["max_post_bytes"] if self.method == "POST" else params["max_get_bytes"]
        return int(limit) - 256

    def _call(self, path: str, form: Mapping[str, str], method: str | None = None) -> Any:
        method = method or self.method
        try:
            return self._send(path, form, method)
        except _QueryFailed as exc:
            if exc.status == 405 and method == "POST":
                # a proxy in front of Prometheus that only allows GET
                self.method = "GET"
                return self._send(path, form, "GET")
            raise

    def _send(self, path: str, form: Mapping[str, str], method: str) -> Any:
        encoded = urlencode(form)
        url = self.base + path
        if method == "GET":
            url = f"{url}?{encoded}"
        for _ in range(_MAX_REDIRECTS + 1):
            status, reason, headers, raw = self._exchange(url, method, encoded)
            if status in _REDIRECTS:
                url, method = self._follow(url, path, status, headers.get("Location"), method,
                                           encoded)
                continue
            if not 200 <= status < 300:
                raise _QueryFailed(_http_message(status, reason, raw), status=status,
                                   too_large=status in _TOO_LARGE)
            return self._payload(raw)
        raise _QueryFailed(f"more than {_MAX_REDIRECTS} redirects from {_redact(self.base + path)}")

    def _follow(self, url: str, path: str, status: int, location: str | None, method: str,
                encoded: str) -> tuple[str, str]:
        """Where a redirect leads, if it stays within the origin: a redirect to
        another scheme, host or port would take the credentials with it."""
        if not location:
            raise _QueryFailed(f"HTTP {status} redirect without a Location")
        target = urljoin(url, location.strip())
        shown = _clip(_redact(target), 200)
        try:
            same = _origin(target) == self.origin
        except ValueError:
            same = False
        if not same:
            raise _QueryFailed(
                f"HTTP {status} redirect from {_redact(url.split('?')[0])} to {shown} not "
                "followed: it leaves the origin (scheme, host, port) of the Prometheus URL, "
                "and credentials and headers are never sent to another origin; if that is "
                "the right server, give its address as the Prometheus URL")
        parts = urlsplit(target)
        if parts.path.endswith(path):
            # a path prefix (a proxy): send every later query there directly
            prefix = parts.path[: len(parts.path) - len(path)]
            self.base = urlunsplit((parts.scheme, parts.netloc, prefix, "", "")).rstrip("/")
        if status == 303:
            method = "GET"
        if method == "GET" and not parts.query:
            target = urlunsplit(parts._replace(query=encoded, fragment=""))
        return target, method

    def _exchange(self, url: str, method: str, encoded: str) -> tuple[int, str, Message, bytes]:
        """One HTTP request: the status, reason, headers and body (the body of
        a redirect is not read, that of an error only its start)."""
        budget = self._budget()
        headers = {"Accept": "application/json", **self.headers}
        body = None
        if method == "POST":
            body = encoded.encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        request = urllib.request.Request(url, data=body, headers=headers, method=method)
        timed_out = f"timed out after {_seconds(budget)}s"
        self.sent += 1
        with _Watchdog(budget) as watchdog:
            opener = guarded_opener(watchdog, self.context)
            try:
                with opener.open(request, timeout=budget) as resp:
                    status, reason, head = resp.status, resp.reason, resp.headers
                    raw = b""
                    if 200 <= status < 300:
                        raw = _read_body(resp, self.max_response_bytes)
                    elif status not in _REDIRECTS:
                        raw = _read_body(resp, _ERROR_BODY_BYTES, truncate=True)
            except (_QueryFailed, OSError, http.client.HTTPException, ValueError) as exc:
                if watchdog.fired:  # whatever the cut made of the answer
                    raise _QueryFailed(f"{timed_out} (no complete answer in that time)",
                                       transport=True) from None
                if isinstance(exc, _QueryFailed):
                    raise
                raise _QueryFailed(_transport_message(exc, timed_out), transport=True) from None
            if watchdog.fired:  # a close-delimited body cut short by the watchdog
                raise _QueryFailed(f"{timed_out} (no complete answer in that time)",
                                   transport=True)
        return status, reason, head, raw

    def _payload(self, raw: bytes) -> Any:
        payload = _parse_json(raw)
        if not isinstance(payload, dict):
            raise _QueryFailed("response is not a JSON object")
        if payload.get("status") != "success":
            raise _QueryFailed(_prometheus_message(payload))
        # e.g. Thanos/Mimir partial responses: the data is usable but incomplete
        warnings = payload.get("warnings")
        warnings = warnings if isinstance(warnings, list) else []
        self.warnings = [_clip(w) for w in warnings[:_MAX_WARNINGS]]
        if len(warnings) > _MAX_WARNINGS:
            self.warnings.append(f"{len(warnings) - _MAX_WARNINGS:,} more warnings not shown")
        return payload.get("data")


def _transport_message(exc: OSError | http.client.HTTPException | ValueError, timed_out: str) -> str:
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError):
        return timed_out
    if isinstance(exc, urllib.error.URLError):
        return f"cannot connect: {_clip(reason)}"
    if isinstance(exc, (http.client.HTTPException, ValueError)):
        return f"HTTP exchange failed: {type(exc).__name__}: {_clip(exc)}"
    return f"connection failed: {_clip(exc)}"


def _series(item: Mapping[str, Any]) -> dict[str, Any]:
    """One series of a vector as the rows expect it: labels as text, the value
    a [time, sample] pair or None. A Prometheus-compatible server (or a proxy
    in front of one) may answer anything; a wrong shape is missing data."""
    metric = item.get("metric")
    labels = (
        {str(k): v for k, v in metric.items() if isinstance(v, str)}
        if isinstance(metric, dict)
        else {}
    )
    value = item.get("value")
    return {"metric": labels, "value": value if isinstance(value, list) and len(value) == 2 else None}


def _prometheus_message(payload: Mapping[str, Any]) -> str:
    kind = payload.get("errorType") or "error"
    return f"{_clip(kind, 60)}: {_clip(payload.get('error') or 'query failed')}"


def _http_message(status: int, reason: str, raw: bytes) -> str:
    detail = raw.decode("utf-8", "replace").strip()[:200]
    try:
        payload = _parse_json(raw)
    except _QueryFailed:
        payload = None
    if isinstance(payload, dict) and payload.get("error"):
        detail = _prometheus_message(payload)
    return f"HTTP {status} {_clip(reason, 60)}" + (f": {detail}" if detail else "")


def _auth_headers(headers: Mapping[str, str] | None, bearer_token: str | None,
                  basic_auth: tuple[str, str] | None) -> dict[str, str]:
    out = dict(headers or {})
    if bearer_token:
        out["Authorization"] = f"Bearer {bearer_token}"
    elif basic_auth:
        user, password = basic_auth
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        out["Authorization"] = f"Basic {token}"
    return out


def _split_userinfo(url: str, basic_auth: tuple[str, str] | None
                    ) -> tuple[str, tuple[str, str] | None]:
    """``http://user:pw@host`` -> the URL without them, and them as basic auth
    (unless other credentials are given): user info is never sent in the URL."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, basic_auth
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return (urlunsplit(parts._replace(netloc=host)),
            basic_auth or (unquote(user), unquote(password)))


def _positive_int(params: Mapping[str, Any], name: str, default: int, endpoint: str) -> int:
    value = params.get(name, default)
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 1:
        raise TelemetryUnavailable(f"Prometheus at {endpoint}: telemetry param {name} must be a "
                                   f"positive number, not {_clip(repr(value), 60)}")
    return int(number)


def _expected_steps(end: datetime, window_seconds: int, step_seconds: int) -> int:
    """Subquery steps in [end - window, end]: Prometheus evaluates a subquery at
    the multiples of its step (since the epoch) inside the range, both ends included."""
    end_ms = round(end.timestamp() * 1000)
    step_ms = step_seconds * 1000
    first = -(-(end_ms - window_seconds * 1000) // step_ms)
    last = end_ms // step_ms
    return max(1, last - first + 1)


def _shard_count(points: int, budget: int) -> int:
    if budget <= 0 or points <= budget:
        return 1
    parts = 1
    while parts < 16 and parts * budget < points:
        parts *= 2
    return parts


def _pod_chunks(spec: QuerySpec, fields: Sequence[Field], chosen: Mapping[str, Candidate | None],
                pods: Sequence[tuple[str, str]], render_kw: Mapping[str, Any],
                limit: int, shard_hint: str) -> list[list[tuple[str, str]]]:
    """Split the pods so that every field's query stays under ``limit`` bytes.

    The query length is linear in the two regexes, so it is measured once per
    field with marker regexes and then extrapolated."""
    shapes = []  # per field: (length without the regexes, times each regex occurs)
    for field in fields:
        forms = promql.filter_forms(spec, "\x01", "\x02")
        sets = [f"{f},{shard_hint}" if shard_hint else f for f in forms]
        text = promql.render_field(spec, field, chosen=chosen, matcher_sets=sets, **render_kw)
        base = promql.encoded_length(text.replace("\x01", "").replace("\x02", ""))
        shapes.append((base, text.count("\x01"), text.count("\x02")))

    def cost(pod_len: int, ns_len: int) -> int:
        return max((b + kp * pod_len + kn * ns_len for b, kp, kn in shapes), default=0)

    sep = promql.encoded_length("|")
    chunks: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    pod_len = ns_len = 0
    namespaces: set[str] = set()
    for ns, pod in sorted(set(pods)):
        add_pod = promql.encoded_length(promql.regex_escape(pod)) + sep
        add_ns = 0 if ns in namespaces else promql.encoded_length(promql.regex_escape(ns)) + sep
        if current and cost(pod_len + add_pod, ns_len + add_ns) > limit:
            chunks.append(current)
            current, pod_len, ns_len, namespaces = [], 0, 0, set()
            add_ns = promql.encoded_length(promql.regex_escape(ns)) + sep
        current.append((ns, pod))
        pod_len += add_pod
        ns_len += add_ns
        namespaces.add(ns)
    if current:
        chunks.append(current)
    return chunks


def _chunk_forms(spec: QuerySpec, chunk: Sequence[tuple[str, str]]) -> list[str]:
    pod_re = "|".join(sorted({promql.regex_escape(p) for _, p in chunk}))
    ns_re = "|".join(sorted({promql.regex_escape(n) for n, _ in chunk}))
    return promql.filter_forms(spec, pod_re, ns_re)


class _Rows:
    """GPU rows keyed by identity; values of duplicate series merged per field."""

    def __init__(self, spec: QuerySpec, exporter_pod: str | None):
        self.spec = spec
        self.exporter_pod = re.compile(exporter_pod) if exporter_pod else None
        self.rows: dict[tuple[Any, ...], dict[str, Any]] = {}

    def add(self, field: Field, series: Sequence[Mapping[str, Any]]) -> None:
        op = _MERGE_TO_COMBINE[field.merge]
        for item in series:
            labels = item.get("metric") or {}
            value = item.get("value")
            number = telemetry.clean(value[1] if isinstance(value, list) and len(value) == 2
                                     else None)
            identity = {key: (labels.get(names[-1]) or None)
                        for key, names in self.spec.keys.items()}
            if (identity["pod"] and self.exporter_pod is not None
                    and self.exporter_pod.search(identity["pod"])):
                identity.update(namespace=None, pod=None, container=None)
            key = tuple(identity[k] for k in ("node", "gpu", "uuid", "mig_id", "namespace",
                                              "pod", "container"))
            row = self.rows.setdefault(key, {"identity": identity, "values": {}})
            for attr in ("model", "mig_profile"):  # not part of the key; keep the first seen
                row["identity"][attr] = row["identity"][attr] or identity[attr]
            old = row["values"].get(field.name)
            row["values"][field.name] = (number if field.name not in row["values"]
                                         else telemetry.combine(op, (old, number)))


def query_telemetry(url: str, *, window_seconds: int, end: datetime | None = None,
                    step_seconds: int = 60, params: Mapping[str, Any] | None = None,
                    queries: Mapping[str, Any] | None = None, bearer_token: str | None = None,
                    basic_auth: tuple[str, str] | None = None, ca_bundle: str | None = None,
                    headers: Mapping[str, str] | None = None, timeout: float = 30.0,
                    pods: Sequence[tuple[str, str]] | None = None,
                    deadline: float | None = None) -> dict[str, Any]:
    """Per-pod and per-GPU aggregates over ``[end - window_seconds, end]``.

    ``queries``: a site override merged over gpuaudit/data/promql.yaml;
    ``params``: values over its ``params`` (resident_fb_mib, idle_compute...,
    and ``max_response_bytes``, the most one answer may take);
    ``pods``: (namespace, name) pairs to restrict the result to;
    ``timeout``: wall-clock seconds per request; ``deadline``: wall-clock
    seconds for the whole collection (default :data:`DEFAULT_DEADLINE_S`),
    queries not sent by then are errors.
    Raises TelemetryUnavailable only when nothing could be read.
    """
    if window_seconds <= 0 or step_seconds <= 0:
        raise ValueError("window_seconds and step_seconds must be positive")
    deadline = DEFAULT_DEADLINE_S if deadline is None else float(deadline)
    if not timeout > 0 or not deadline > 0:
        raise ValueError("timeout and deadline must be positive")
    stop_at = time.monotonic() + deadline
    url, basic_auth = _split_userinfo(url, basic_auth)
    endpoint = _redact(url.rstrip("/"))
    try:
        _origin(url)
        valid = urlsplit(url).scheme.lower() in _DEFAULT_PORTS and bool(urlsplit(url).hostname)
    except ValueError:
        valid = False
    if not valid:
        raise TelemetryUnavailable(f"Prometheus at {_clip(endpoint, 200)}: not an http:// or "
                                   "https:// URL with a host and a valid port")
    spec = promql.load_queries(queries)
    merged_params = {**spec.params, **(params or {})}
    max_response = _positive_int(merged_params, "max_response_bytes", MAX_RESPONSE_BYTES,
                                 endpoint)
    end = (end or datetime.now(timezone.utc)).replace(microsecond=0)
    if end.tzinfo is None:
        end = end.replace(tzinfo=timezone.utc)
    start = end - timedelta(seconds=window_seconds)
    try:
        context = ssl.create_default_context(cafile=ca_bundle)
    except OSError as exc:  # ssl.SSLError is one
        raise TelemetryUnavailable(f"Prometheus at {endpoint}: cannot use the CA bundle "
                                   f"{ca_bundle}: {_clip(exc)}") from None
    client = _Client(url, headers=_auth_headers(headers, bearer_token, basic_auth),
                     context=context, timeout=timeout, stop_at=stop_at, deadline=deadline,
                     max_response_bytes=max_response)
    errors: list[dict[str, str]] = []

    def record(query: str, message: str) -> None:
        errors.append({"endpoint": client.endpoint, "query": query, "message": message})

    # 1. Which metrics exist (and how many series each has) over the window.
    try:
        counts = _probe(client, spec, start, end)
    except _QueryFailed as exc:
        raise TelemetryUnavailable(f"Prometheus at {client.endpoint}: {exc}") from None
    chosen = spec.choose(counts)
    if not any(chosen.values()):
        raise TelemetryUnavailable(
            f"Prometheus at {client.endpoint} has none of the GPU metrics "
            f"({', '.join(spec.probe_metrics())}) between {telemetry.iso(start)} "
            f"and {telemetry.iso(end)}")

    fields = [f for f in spec.fields if all(chosen.get(s) for s in f.requires)]
    wanted = {(ns, pod) for ns, pod in pods} if pods is not None else None
    if wanted is not None and not wanted:
        fields = []  # an empty filter: nothing to ask for
    expected = _expected_steps(end, window_seconds, step_seconds)
    render_kw = {"range_s": window_seconds, "step_s": step_seconds, "expected_steps": expected,
                 "params": merged_params}
    budget = int(merged_params.get("max_points_per_query", 0) or 0)

    def shards_for(field: Field) -> list[str]:
        if "${step}" not in field.promql:  # only subqueries hold series x steps points
            return [""]
        series = max((counts.get(c.metric, 0) for s in field.requires
                      if (c := chosen.get(s)) is not None), default=0)
        return promql.shard_matchers(spec.shard_label, _shard_count(series * expected, budget))

    # 2. Server-side pod filter chunks, unless that takes too many queries.
    chunks: list[list[tuple[str, str]] | None] = [None]
    if wanted:
        longest_shard = max((m for f in fields for m in shards_for(f)), key=len, default="")
        chunks = list(_pod_chunks(spec, fields, chosen, sorted(wanted), render_kw,
                                  client.max_bytes(merged_params), longest_shard))
        if len(chunks) > int(merged_params.get("max_chunks", 8)):
            chunks = [None]  # read everything once; filtered below

    rows = _Rows(spec, str(merged_params.get("exporter_pod_regex") or "") or None)
    at = end.timestamp()
    succeeded = 0
    transport_failures = 0
    aborted: str | None = None

    out_of_time = f"not sent: the telemetry deadline of {_seconds(deadline)}s passed"

    def run(field: Field, chunk: list[tuple[str, str]] | None, shard: str) -> None:
        nonlocal succeeded, transport_failures, aborted
        if aborted:
            return
        if client.out_of_time():  # between the chunks or shards of one field
            aborted = out_of_time
            record(field.name, aborted)
            return
        forms = _chunk_forms(spec, chunk) if chunk else [""]
        sets = [",".join(x for x in (form, shard) if x) for form in forms]
        query = promql.render_field(spec, field, chosen=chosen, matcher_sets=sets, **render_kw)
        try:
            series = client.instant(query, at)
        except _QueryFailed as exc:
            if exc.too_large and chunk and len(chunk) > 1:
                half = len(chunk) // 2
                run(field, chunk[:half], shard)
                run(field, chunk[half:], shard)
                return
            record(field.name, str(exc))
            transport_failures = transport_failures + 1 if exc.transport else 0
            if client.out_of_time():
                aborted = out_of_time
            elif transport_failures >= _MAX_TRANSPORT_FAILURES:
                aborted = f"not sent after {_MAX_TRANSPORT_FAILURES} failures in a row: {exc}"
            return
        transport_failures = 0
        succeeded += 1
        for warning in client.warnings:
            record(field.name, f"warning: {warning}")
        rows.add(field, series)

    for i, field in enumerate(fields):
        if not aborted and client.out_of_time():
            aborted = out_of_time
        if aborted:  # after failures in a row, or past the deadline: the rest is not sent
            record(",".join(f.name for f in fields[i:]), aborted)
            break
        for chunk in chunks:
            for shard in shards_for(field):
                run(field, chunk, shard)
    if fields and not succeeded:
        reason = errors[0]["message"] if errors else "no query succeeded"
        raise TelemetryUnavailable(f"Prometheus at {client.endpoint}: {reason}")

    gpu_rows, pod_only = _build_rows(rows, fields, wanted, start=start.timestamp(),
                                     step=step_seconds)
    extra_rollup = {f.name: f.rollup for f in fields if not promql.field_output_is_standard(f)}
    return telemetry.result(
        source="prometheus", endpoint=client.endpoint,
        window=telemetry.window(start, end, step_seconds),
        signals={name: (c.metric if c else None) for name, c in chosen.items()},
        params=merged_params, queries=client.sent, gpu_rows=gpu_rows, pod_only_rows=pod_only,
        errors=errors, extra_rollup=extra_rollup)


def _probe(client: _Client, spec: QuerySpec, start: datetime, end: datetime) -> dict[str, int]:
    """Series per candidate metric with samples anywhere in the window (not
    only at its end: a signal whose last sample is minutes before the end is
    present); when the answer names none, which of them the label index has."""
    counts: dict[str, int] = {}
    range_s = max(1, round((end - start).total_seconds()))
    for item in client.instant(promql.probe_query(spec, range_s), end.timestamp()):
        labels = item.get("metric") or {}
        name = labels.get("metric") or labels.get("__name__")
        number = telemetry.clean((item.get("value") or [None, None])[1])
        if name:
            counts[name] = int(number or 0)
    if not counts:
        match = "{__name__=~" + promql.string_literal(
            "|".join(promql.regex_escape(m) for m in spec.probe_metrics())) + "}"
        for name in client.label_values("__name__", match, start.timestamp(), end.timestamp()):
            counts[name] = 0  # present, count unknown: no sharding
    return counts


def _life_coverage(values: dict[str, Any], start: float, step: float) -> None:
    """Coverage over the row's own life in the window: steps with a real
    sample / steps from its first to its last sample. A sample at time ``ts``
    counts at the step ``ceil(ts / step) * step``, so the span has
    ``ceil(last / step) - ceil(first / step) + 1`` steps."""
    first, last, samples = values.get("first_seen"), values.get("last_seen"), values.get("samples")
    if first is None or last is None or samples is None or last < first:
        return
    first = max(first, start)  # the lookback may reach a sample before the window
    values["first_seen"] = first
    steps = math.ceil(last / step - 1e-9) - math.ceil(first / step - 1e-9) + 1
    if steps >= 1:
        values["coverage"] = samples / steps


def _build_rows(rows: _Rows, fields: Sequence[Field], wanted: set[tuple[str, str]] | None,
                *, start: float, step: float) -> tuple[list[dict], list[dict]]:
    """GPU rows, and rows that name a pod but no device (a site query that
    aggregated the GPU labels away): those only feed the pod rollup."""
    gpu_rows, pod_only = [], []
    for row in rows.rows.values():
        ident = row["identity"]
        if wanted is not None and (ident["namespace"] or "", ident["pod"]) not in wanted:
            continue
        values = row["values"]
        _life_coverage(values, start, step)
        if values.get("coverage") is not None:
            values["coverage"] = min(1.0, max(0.0, values["coverage"]))
        metrics = {f.name: values.get(f.name) for f in fields
                   if promql.field_output_is_standard(f)}
        if "coverage" in values:  # derived above, not a field of its own
            metrics["coverage"] = values["coverage"]
        extra = {f.name: values.get(f.name) for f in fields
                 if not promql.field_output_is_standard(f)}
        out = telemetry.gpu_row(ident, metrics, extra)
        if ident["uuid"] is None and ident["gpu"] is None:
            if ident["pod"] is not None:
                pod_only.append(out)
            continue
        gpu_rows.append(out)
    return gpu_rows, pod_only

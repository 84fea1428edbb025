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
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from gpuaudit.model import telemetry
from gpuaudit.model.telemetry import TelemetryUnavailable
from gpuaudit.sources import promql
from gpuaudit.sources.promql import Candidate, Field, QuerySpec

__all__ = ["TelemetryUnavailable", "query_telemetry"]

_MERGE_TO_COMBINE = {"avg": "mean", "max": "max", "min": "min", "sum": "sum"}
_TOO_LARGE = {413, 414, 431}
# After this many transport failures (timeouts, refused connections) in a row the
# server is down or drowning; stop sending it more work.
_MAX_TRANSPORT_FAILURES = 2


class _QueryFailed(Exception):
    def __init__(self, message: str, *, too_large: bool = False, transport: bool = False):
        super().__init__(message)
        self.too_large = too_large
        self.transport = transport


def _redact(url: str) -> str:
    """The URL without user:password@."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


class _Client:
    """POSTs form-encoded queries (no URL length limits); falls back to GET
    once a server or proxy answers 405."""

    def __init__(self, url: str, *, headers: Mapping[str, str], context: ssl.SSLContext | None,
                 timeout: float):
        self.base = url.rstrip("/")
        self.endpoint = _redact(self.base)
        self.headers = dict(headers)
        self.context = context
        self.timeout = timeout
        self.method = "POST"
        self.sent = 0
        self.warnings: list[str] = []  # of the last successful call

    def instant(self, query: str, at: float) -> list[dict[str, Any]]:
        # Prometheus durations take no fractions: milliseconds
        form = {"query": query, "time": f"{at:.3f}",
                "timeout": f"{max(1, round(self.timeout * 1000))}ms"}
        data = self._call("/api/v1/query", form)
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
            raise _QueryFailed(f"unexpected result type {kind}")
        result = data.get("result")
        if not isinstance(result, list):
            raise _QueryFailed("malformed response: no result list")
        return [_series(item) for item in result if isinstance(item, dict)]

    def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        form = {"match[]": match, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        data = self._call(f"/api/v1/label/{label}/values", form, method="GET")
        if not isinstance(data, list):
            raise _QueryFailed("malformed response: label values are not a list")
        return [str(x) for x in data]

    def max_bytes(self, params: Mapping[str, Any]) -> int:
        """Bytes a query text may take: the method's limit less room for the
        other form fields (time, timeout) and the URL path."""
        limit = params["max_post_bytes"] if self.method == "POST" else params["max_get_bytes"]
        return int(limit) - 256

    def _call(self, path: str, form: Mapping[str, str], method: str | None = None) -> Any:
        method = method or self.method
        try:
            return self._send(path, form, method)
        except urllib.error.HTTPError as exc:
            if exc.code == 405 and method == "POST":
                # a proxy in front of Prometheus that only allows GET
                self.method = "GET"
                return self._call(path, form, "GET")
            raise _QueryFailed(_http_message(exc), too_large=exc.code in _TOO_LARGE) from None
        except TimeoutError:
            raise _QueryFailed(f"timed out after {self.timeout:g}s", transport=True) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                raise _QueryFailed(f"timed out after {self.timeout:g}s", transport=True) from None
            raise _QueryFailed(f"cannot connect: {reason}", transport=True) from None
        except (ConnectionError, OSError) as exc:
            raise _QueryFailed(f"connection failed: {exc}", transport=True) from None

    def _send(self, path: str, form: Mapping[str, str], method: str) -> Any:
        encoded = urlencode(form)
        headers = {"Accept": "application/json", **self.headers}
        url = self.base + path
        body = None
        if method == "POST":
            body = encoded.encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        else:
            url = f"{url}?{encoded}"
        request = urllib.request.Request(url, data=body, headers=headers, method=method)
        self.sent += 1
        with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as resp:
            raw = resp.read()
        try:
            payload = json.loads(raw)
        except ValueError:
            raise _QueryFailed("response is not JSON") from None
        if not isinstance(payload, dict):
            raise _QueryFailed("response is not a JSON object")
        if payload.get("status") != "success":
            raise _QueryFailed(_prometheus_message(payload))
        # e.g. Thanos/Mimir partial responses: the data is usable but incomplete
        warnings = payload.get("warnings")
        self.warnings = [str(w) for w in warnings] if isinstance(warnings, list) else []
        return payload.get("data")


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
    return f"{kind}: {payload.get('error') or 'query failed'}"


def _http_message(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read(4096)
    except OSError:  # the body only improves the message; the status says enough
        raw = b""
    detail = raw.decode("utf-8", "replace").strip()[:200]
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = None
    if isinstance(payload, dict) and payload.get("error"):
        detail = _prometheus_message(payload)
    return f"HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else "")


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
                    pods: Sequence[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Per-pod and per-GPU aggregates over ``[end - window_seconds, end]``.

    ``queries``: a site override merged over gpuaudit/data/promql.yaml;
    ``params``: values over its ``params`` (resident_fb_mib, idle_compute...);
    ``pods``: (namespace, name) pairs to restrict the result to.
    Raises TelemetryUnavailable only when nothing could be read.
    """
    if window_seconds <= 0 or step_seconds <= 0:
        raise ValueError("window_seconds and step_seconds must be positive")
    spec = promql.load_queries(queries)
    merged_params = {**spec.params, **(params or {})}
    end = (end or datetime.now(timezone.utc)).replace(microsecond=0)
    if end.tzinfo is None:
        end = end.replace(tzinfo=timezone.utc)
    start = end - timedelta(seconds=window_seconds)
    context = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else None
    client = _Client(url, headers=_auth_headers(headers, bearer_token, basic_auth),
                     context=context, timeout=timeout)
    errors: list[dict[str, str]] = []

    def record(query: str, message: str) -> None:
        errors.append({"endpoint": client.endpoint, "query": query, "message": message})

    # 1. Which metrics exist (and how many series each has, at the end of the window).
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

    def run(field: Field, chunk: list[tuple[str, str]] | None, shard: str) -> None:
        nonlocal succeeded, transport_failures, aborted
        if aborted:
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
            if transport_failures >= _MAX_TRANSPORT_FAILURES:
                aborted = str(exc)
            return
        transport_failures = 0
        succeeded += 1
        for warning in client.warnings:
            record(field.name, f"warning: {warning}")
        rows.add(field, series)

    for field in fields:
        for chunk in chunks:
            for shard in shards_for(field):
                run(field, chunk, shard)
        if aborted:
            remaining = [f.name for f in fields[fields.index(field) + 1:]]
            if remaining:
                record(",".join(remaining),
                       f"not sent after {_MAX_TRANSPORT_FAILURES} failures in a row: {aborted}")
            break
    if fields and not succeeded:
        reason = errors[0]["message"] if errors else "no query succeeded"
        raise TelemetryUnavailable(f"Prometheus at {client.endpoint}: {reason}")

    gpu_rows, pod_only = _build_rows(rows, fields, wanted)
    extra_rollup = {f.name: f.rollup for f in fields if not promql.field_output_is_standard(f)}
    return telemetry.result(
        source="prometheus", endpoint=client.endpoint,
        window=telemetry.window(start, end, step_seconds),
        signals={name: (c.metric if c else None) for name, c in chosen.items()},
        params=merged_params, queries=client.sent, gpu_rows=gpu_rows, pod_only_rows=pod_only,
        errors=errors, extra_rollup=extra_rollup)


def _probe(client: _Client, spec: QuerySpec, start: datetime, end: datetime) -> dict[str, int]:
    """Series per candidate metric at the end of the window; when none of them
    is there (an exporter that stopped), which of them exist anywhere in it."""
    counts: dict[str, int] = {}
    for item in client.instant(promql.probe_query(spec), end.timestamp()):
        name = (item.get("metric") or {}).get("__name__")
        number = telemetry.clean((item.get("value") or [None, None])[1])
        if name:
            counts[name] = int(number or 0)
    if not counts:
        match = "{__name__=~" + promql.string_literal(
            "|".join(promql.regex_escape(m) for m in spec.probe_metrics())) + "}"
        for name in client.label_values("__name__", match, start.timestamp(), end.timestamp()):
            counts[name] = 0  # present, count unknown: no sharding
    return counts


def _build_rows(rows: _Rows, fields: Sequence[Field],
                wanted: set[tuple[str, str]] | None) -> tuple[list[dict], list[dict]]:
    """GPU rows, and rows that name a pod but no device (a site query that
    aggregated the GPU labels away): those only feed the pod rollup."""
    gpu_rows, pod_only = [], []
    for row in rows.rows.values():
        ident = row["identity"]
        if wanted is not None and (ident["namespace"] or "", ident["pod"]) not in wanted:
            continue
        values = row["values"]
        if values.get("coverage") is not None:
            values["coverage"] = min(1.0, max(0.0, values["coverage"]))
        metrics = {f.name: values.get(f.name) for f in fields
                   if promql.field_output_is_standard(f)}
        extra = {f.name: values.get(f.name) for f in fields
                 if not promql.field_output_is_standard(f)}
        out = telemetry.gpu_row(ident, metrics, extra)
        if ident["uuid"] is None and ident["gpu"] is None:
            if ident["pod"] is not None:
                pod_only.append(out)
            continue
        gpu_rows.append(out)
    return gpu_rows, pod_only

"""Read GPU telemetry aggregates from a Prometheus-compatible HTTP API (Prometheus,
Thanos, Mimir, VictoriaMetrics) holding dcgm-exporter series.

Everything is aggregated in PromQL over the window (see gpuaudit/data/promql.yaml):
one probe query finds which metrics exist, then one instant query per field
covers every pod at once. The number of queries therefore does not depend on
the number of pods; it grows only when

- a subquery would hold more points than ``max_points_per_query`` (split by
  GPU UUID, at most 16 parts), or
- a ``pods`` filter needs its names split into chunks (at most ``max_chunks``;
  beyond that everything is read and filtered here);
- the window is longer than ``max_subquery_seconds`` (a day): each subquery
  is read in day parts that hold samples (one cheap count per part finds
  them), combined exactly (sums and counts add, first/last are min/max).

When gpuaudit's recording rules (`gpuaudit monitoring rules`) cover the
window with the same step and params, the subquery fields read their
recorded per-interval values instead (a plain range each).

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

The HTTP of it (credentials, redirects, the deadline, the bound) is
``webclient.OriginClient``'s; this module asks Prometheus' API and reads its
answers.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import msgspec

from gpuaudit.model import telemetry
from gpuaudit.model.telemetry import TelemetryUnavailable
from gpuaudit.sources import promql
from gpuaudit.sources.promql import Candidate, Field, QuerySpec
from gpuaudit.webclient import OriginClient, RequestFailed, is_http_url, without_userinfo

__all__ = ["DEFAULT_DEADLINE_S", "MAX_JSON_DEPTH", "MAX_RESPONSE_BYTES", "TelemetryUnavailable", "query_telemetry"]

_MERGE_TO_COMBINE = {"avg": "mean", "max": "max", "min": "min", "sum": "sum"}
_TOO_LARGE = {413, 414, 431}
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
# Characters of server text kept in a message.
_TEXT_CHARS = 300
_MAX_WARNINGS = 10


class _QueryFailed(Exception):
    def __init__(self, message: str, *, too_large: bool = False, transport: bool = False, status: int | None = None):
        super().__init__(message)
        self.too_large = too_large
        self.transport = transport
        self.status = status


def _clip(value: Any, limit: int = _TEXT_CHARS) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _seconds(value: float) -> str:
    return f"{value:.3g}"


# --- reading an answer ------------------------------------------------------------------


def _too_deep(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def _parse_json(raw: bytes | bytearray) -> Any:
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
    """Prometheus' HTTP API at one URL: POSTs form-encoded queries (no URL
    length limits); falls back to GET once a server or proxy answers 405.
    ``http`` carries them, by its rules (credentials, redirects, deadlines)."""

    def __init__(self, http: OriginClient):
        self.http = http
        self.endpoint = http.endpoint
        self.method = "POST"
        self.warnings: list[str] = []  # of the last successful call

    @property
    def sent(self) -> int:
        return self.http.sent

    def out_of_time(self) -> bool:
        return time.monotonic() >= self.http.stop_at

    def instant(self, query: str, at: float) -> list[dict[str, Any]]:
        # Prometheus durations take no fractions: milliseconds
        budget = min(self.http.timeout, max(0.0, self.http.stop_at - time.monotonic()))
        form = {"query": query, "time": f"{at:.3f}", "timeout": f"{max(1, round(budget * 1000))}ms"}
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
        try:
            answer = self.http.request(path, form, method)
        except RequestFailed as exc:
            raise _QueryFailed(str(exc), transport=exc.transport) from None
        if not 200 <= answer.status < 300:
            raise _QueryFailed(
                _http_message(answer.status, answer.reason, answer.body),
                status=answer.status,
                too_large=answer.status in _TOO_LARGE,
            )
        return self._payload(answer.body)

    def _payload(self, raw: bytes | bytearray) -> Any:
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


def _series(item: Mapping[str, Any]) -> dict[str, Any]:
    """One series of a vector as the rows expect it: labels as text, the value
    a [time, sample] pair or None. A Prometheus-compatible server (or a proxy
    in front of one) may answer anything; a wrong shape is missing data."""
    metric = item.get("metric")
    labels = {str(k): v for k, v in metric.items() if isinstance(v, str)} if isinstance(metric, dict) else {}
    value = item.get("value")
    return {"metric": labels, "value": value if isinstance(value, list) and len(value) == 2 else None}


def _prometheus_message(payload: Mapping[str, Any]) -> str:
    kind = payload.get("errorType") or "error"
    return f"{_clip(kind, 60)}: {_clip(payload.get('error') or 'query failed')}"


def _http_message(status: int, reason: str, raw: bytes | bytearray) -> str:
    detail = raw.decode("utf-8", "replace").strip()[:200]
    try:
        payload = _parse_json(raw)
    except _QueryFailed:
        payload = None
    if isinstance(payload, dict) and payload.get("error"):
        detail = _prometheus_message(payload)
    return f"HTTP {status} {_clip(reason, 60)}" + (f": {detail}" if detail else "")


def _positive_int(params: Mapping[str, Any], name: str, default: int, endpoint: str) -> int:
    value = params.get(name, default)
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 1:
        raise TelemetryUnavailable(
            f"Prometheus at {endpoint}: telemetry param {name} must be a positive number, not {_clip(repr(value), 60)}"
        )
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


def _pod_chunks(
    spec: QuerySpec,
    fields: Sequence[Field],
    chosen: Mapping[str, Candidate | None],
    pods: Sequence[tuple[str, str]],
    render_kw: Mapping[str, Any],
    limit: int,
    shard_hint: str,
) -> list[list[tuple[str, str]]]:
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
            number = telemetry.clean(value[1] if isinstance(value, list) and len(value) == 2 else None)
            identity = {key: (labels.get(names[-1]) or None) for key, names in self.spec.keys.items()}
            if identity["pod"] and self.exporter_pod is not None and self.exporter_pod.search(identity["pod"]):
                identity.update(namespace=None, pod=None, container=None)
            key = tuple(identity[k] for k in ("node", "gpu", "uuid", "mig_id", "namespace", "pod", "container"))
            row = self.rows.setdefault(key, {"identity": identity, "values": {}})
            for attr in ("model", "mig_profile"):  # not part of the key; keep the first seen
                row["identity"][attr] = row["identity"][attr] or identity[attr]
            old = row["values"].get(field.name)
            row["values"][field.name] = (
                number if field.name not in row["values"] else telemetry.combine(op, (old, number))
            )

    def finish_split(self, field: Field, failed: set[str]) -> None:
        """An average read in parts: its sums over its counts, per row. A
        field one of whose parts failed is missing, never a thinner value."""
        sums, counts = f"{field.name}{_PART_OF}sum", f"{field.name}{_PART_OF}count"
        for row in self.rows.values():
            values = row["values"]
            total, count = values.pop(sums, None), values.pop(counts, None)
            if field.name in failed:
                values.pop(field.name, None)
            elif field.promql.startswith("avg_over_time(") and count:
                values[field.name] = (total or 0.0) / count


def query_telemetry(
    url: str,
    *,
    window_seconds: int,
    end: datetime | None = None,
    step_seconds: int = 60,
    params: Mapping[str, Any] | None = None,
    queries: Mapping[str, Any] | None = None,
    bearer_token: str | None = None,
    basic_auth: tuple[str, str] | None = None,
    ca_bundle: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    pods: Sequence[tuple[str, str]] | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
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
    endpoint = without_userinfo(url.rstrip("/"))
    if not is_http_url(url):
        raise TelemetryUnavailable(
            f"Prometheus at {_clip(endpoint, 200)}: not an http:// or https:// URL with a host and a valid port"
        )
    spec = promql.load_queries(queries)
    merged_params = {**spec.params, **(params or {})}
    max_response = _positive_int(merged_params, "max_response_bytes", MAX_RESPONSE_BYTES, endpoint)
    end = (end or datetime.now(timezone.utc)).replace(microsecond=0)
    if end.tzinfo is None:
        end = end.replace(tzinfo=timezone.utc)
    start = end - timedelta(seconds=window_seconds)
    out_of_time = f"not sent: the telemetry deadline of {_seconds(deadline)}s passed"
    try:
        http = OriginClient(
            url,
            what="Prometheus",
            headers={"Accept": "application/json", **(headers or {})},
            bearer_token=bearer_token,
            basic_auth=basic_auth,
            ca_bundle=ca_bundle,
            timeout=timeout,
            stop_at=stop_at,
            too_late=out_of_time,
            max_bytes=max_response,
            limit_name="telemetry param max_response_bytes",
        )
    except RequestFailed as exc:  # the CA bundle
        raise TelemetryUnavailable(f"Prometheus at {endpoint}: {exc}") from None
    client = _Client(http)
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
            f"and {telemetry.iso(end)}"
        )

    fields = [f for f in spec.fields if all(chosen.get(s) for s in f.requires)]
    expected = _expected_steps(end, window_seconds, step_seconds)
    # gpuaudit's recording rules, when installed and alike: a cheap range over
    # their per-interval values in place of each subquery
    recorded, why_not = (
        _recorded(client, chosen, merged_params, start, end, step_seconds, expected)
        if counts.get(RULES_INFO) and merged_params.get("recorded_series", 1)
        else (False, None)
    )
    if why_not:
        record("recorded series", f"warning: gpuaudit's recorded series not used: {why_not}")
    wanted = {(ns, pod) for ns, pod in pods} if pods is not None else None
    if wanted is not None and not wanted:
        fields = []  # an empty filter: nothing to ask for
    render_kw = {"range_s": window_seconds, "step_s": step_seconds, "expected_steps": expected, "params": merged_params}
    budget = int(merged_params.get("max_points_per_query", 0) or 0)

    def shards_for(field: Field, steps: int = expected) -> list[str]:
        if "${step}" not in field.promql:  # only subqueries hold series x steps points
            return [""]
        series = max((counts.get(c.metric, 0) for s in field.requires if (c := chosen.get(s)) is not None), default=0)
        return promql.shard_matchers(spec.shard_label, _shard_count(series * steps, budget))

    part_seconds = int(merged_params.get("max_subquery_seconds", 0) or 0)
    parts = _window_parts(end.timestamp(), window_seconds, part_seconds, step_seconds)
    split = len(parts) > 1 and not recorded and any("${step}" in f.promql for f in fields)
    cut = len(parts)
    if split:  # a part without a sample of the subqueries' metrics is not asked
        subquery_metrics = sorted(
            {c.metric for f in fields if "${step}" in f.promql for s in f.requires if (c := chosen.get(s)) is not None}
        )
        parts = [p for p in parts if _part_has_samples(client, subquery_metrics, p)]

    # 2. Server-side pod filter chunks, unless that takes too many queries.
    chunks: list[list[tuple[str, str]] | None] = [None]
    if wanted:
        longest_shard = max((m for f in fields for m in shards_for(f)), key=len, default="")
        chunks = list(
            _pod_chunks(spec, fields, chosen, sorted(wanted), render_kw, client.max_bytes(merged_params), longest_shard)
        )
        if len(chunks) > int(merged_params.get("max_chunks", 8)):
            chunks = [None]  # read everything once; filtered below

    rows = _Rows(spec, str(merged_params.get("exporter_pod_regex") or "") or None)
    at = end.timestamp()
    succeeded = 0
    transport_failures = 0
    aborted: str | None = None
    failed: set[str] = set()

    def run(
        field: Field,
        chunk: list[tuple[str, str]] | None,
        shard: str,
        part: _Part | None = None,
        use_recorded: bool = False,
    ) -> None:
        nonlocal succeeded, transport_failures, aborted
        if aborted:
            return
        if client.out_of_time():  # between the chunks, shards or parts of one field
            aborted = out_of_time
            record(field.name, aborted)
            return
        forms = _chunk_forms(spec, chunk) if chunk else [""]
        sets = [",".join(x for x in (form, shard) if x) for form in forms]
        kw = dict(render_kw)
        if part is not None:
            kw.update(range_s=part.range_s, expected_steps=part.steps)
        query = promql.render_field(
            spec,
            field,
            chosen=chosen,
            matcher_sets=sets,
            recorded=use_recorded,
            template=part.template if part else None,
            **kw,
        )
        try:
            series = client.instant(query, part.at if part else at)
        except _QueryFailed as exc:
            if exc.too_large and chunk and len(chunk) > 1:
                half = len(chunk) // 2
                run(field, chunk[:half], shard, part, use_recorded)
                run(field, chunk[half:], shard, part, use_recorded)
                return
            name = field.name.split(_PART_OF)[0]
            failed.add(name)
            record(name + (f" ({part.label})" if part else ""), str(exc))
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
        use_recorded = recorded and field.recorded is not None
        forms = None if use_recorded or not split else _split_forms(field, parts)
        for chunk in chunks:
            if forms is None:
                for shard in [""] if use_recorded else shards_for(field):
                    run(field, chunk, shard, use_recorded=use_recorded)
                continue
            for form, part in forms:
                for shard in shards_for(field, part.steps):
                    run(form, chunk, shard, part)
        if forms is not None:
            rows.finish_split(field, failed)
    if fields and not succeeded:
        reason = errors[0]["message"] if errors else "no query succeeded"
        raise TelemetryUnavailable(f"Prometheus at {client.endpoint}: {reason}")

    gpu_rows, pod_only = _build_rows(rows, fields, wanted, start=start.timestamp(), step=step_seconds)
    extra_rollup = {f.name: f.rollup for f in fields if not promql.field_output_is_standard(f)}
    out = telemetry.result(
        source="prometheus",
        endpoint=client.endpoint,
        window=telemetry.window(start, end, step_seconds),
        signals={name: (c.metric if c else None) for name, c in chosen.items()},
        params=merged_params,
        queries=client.sent,
        gpu_rows=gpu_rows,
        pod_only_rows=pod_only,
        errors=errors,
        extra_rollup=extra_rollup,
    )
    # how the subqueries were read: gpuaudit's recorded series, the window in
    # parts, or each in one query
    out["subqueries"] = "recorded" if recorded else (f"{len(parts)} of {cut} parts" if split else "whole")
    return out


# --- the recorded series of `gpuaudit monitoring rules` -------------------------------

# Named as gpuaudit/report/monitoring_rules.py records them (sources may not import report).
RULES_INFO = "gpuaudit:gpu_rules:info"
RECORDED_COMPUTE = "gpuaudit:gpu_compute:ratio"
# Share of the window's steps the rules must have been evaluated at.
RECORDED_MIN_SHARE = 0.95


def _recorded(
    client: _Client,
    chosen: Mapping[str, Candidate | None],
    params: Mapping[str, Any],
    start: datetime,
    end: datetime,
    step_seconds: int,
    expected: int,
) -> tuple[bool, str | None]:
    """Whether gpuaudit's recorded series can stand in for the subqueries:
    installed over the whole window, evaluated every ``step_seconds``, made
    with the same telemetry params and from the compute metric chosen here.
    (False, why) when they exist but differ; (False, None) when absent."""
    range_s = max(1, round((end - start).total_seconds()))
    try:
        info = client.instant(f"count_over_time({RULES_INFO}[{range_s}s])", end.timestamp())
    except _QueryFailed as exc:
        return False, f"cannot read {RULES_INFO}: {exc}"
    if not info:
        return False, None
    if len(info) > 1:
        return False, f"{len(info)} different sets of gpuaudit rules are installed"
    labels = info[0].get("metric") or {}
    evaluations = telemetry.clean((info[0].get("value") or [None, None])[1]) or 0

    def differs(name: str, ours: Any) -> bool:
        try:
            return not math.isclose(float(labels.get(name, "nan")), float(ours))
        except (TypeError, ValueError):
            return True

    if differs("interval_seconds", step_seconds):
        return False, (
            f"the rules are evaluated every {_clip(labels.get('interval_seconds'), 20)}s, "
            f"the audit's --step is {step_seconds}s"
        )
    for name in ("resident_fb_mib", "idle_compute"):
        if differs(name, params.get(name)):
            return False, (
                f"the rules were made with {name} {_clip(labels.get(name), 20)}, the audit uses {params.get(name)}"
            )
    # Prometheus evaluates a group at its own offset and may miss a beat;
    # rules installed after the window began cover only its end.
    if evaluations < expected * RECORDED_MIN_SHARE:
        return False, (
            f"they cover {int(evaluations):,} of the window's {expected:,} steps (installed after the window began)"
        )
    compute = chosen.get("compute")
    try:
        signals = {
            (item.get("metric") or {}).get("signal")
            for item in client.instant(
                f"count by (signal) (last_over_time({RECORDED_COMPUTE}[{range_s}s]))", end.timestamp()
            )
        }
    except _QueryFailed as exc:
        return False, f"cannot read {RECORDED_COMPUTE}: {exc}"
    if compute is None or signals - {compute.metric}:
        return False, (
            f"they record {', '.join(sorted(str(x) for x in signals))} where the audit reads "
            f"{compute.metric if compute else 'no compute signal'}"
        )
    return True, None


# --- a long window in parts ---------------------------------------------------------------

# Separates a field's name from its part form's suffix (never in a field name).
_PART_OF = "#"
_SPLITTABLE = {"count_over_time(": "sum", "sum_over_time(": "sum", "min_over_time(": "min", "max_over_time(": "max"}


class _Part:
    """One part of the window: evaluated at ``at``, over ``range_s`` seconds
    holding ``steps`` subquery steps; ``template``: the field's form for it."""

    def __init__(self, at: float, range_s: float, steps: int, label: str, template: str | None = None):
        self.at, self.range_s, self.steps, self.label, self.template = at, range_s, steps, label, template

    def with_template(self, template: str) -> _Part:
        return _Part(self.at, self.range_s, self.steps, self.label, template)


def _window_parts(end: float, window_seconds: int, part_seconds: int, step_seconds: int) -> list[_Part]:
    """The window cut into consecutive parts of at most ``part_seconds``
    (whole steps), newest last. A range takes both ends, so every part but
    the oldest ends 1 ms after its predecessor ends: each subquery step
    belongs to exactly one part."""
    if part_seconds <= 0 or window_seconds <= part_seconds:
        return [_Part(end, window_seconds, 0, "whole")]
    part_seconds = max(step_seconds, part_seconds - part_seconds % step_seconds)
    start = end - window_seconds
    bounds = [end]
    while bounds[-1] - part_seconds > start:
        bounds.append(bounds[-1] - part_seconds)
    bounds.append(start)
    bounds.reverse()
    parts = []
    for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        range_s = hi - lo if i == 0 else hi - lo - 0.001
        steps = math.floor(hi / step_seconds) - math.ceil((hi - range_s) / step_seconds) + 1
        until = telemetry.iso(datetime.fromtimestamp(hi, timezone.utc))
        parts.append(_Part(hi, range_s, max(steps, 0), f"part {i + 1}/{len(bounds) - 1} to {until}"))
    return parts


def _part_has_samples(client: _Client, metrics: Sequence[str], part: _Part) -> bool:
    """Whether any of ``metrics`` has a sample in ``part`` (a plain range
    count, cheap); when that cannot be read, the part is asked anyway."""
    if not metrics:
        return True
    names = "|".join(promql.regex_escape(m) for m in metrics)
    query = f"count(count_over_time({{__name__=~{promql.string_literal(names)}}}[{promql.range_text(part.range_s)}]))"
    try:
        return bool(client.instant(query, part.at))
    except _QueryFailed:
        return True


def _split_forms(field: Field, parts: Sequence[_Part]) -> list[tuple[Field, _Part]] | None:
    """The queries of ``field`` over ``parts`` whose answers combine exactly
    into the whole window's: counts and sums add, minima and maxima take
    theirs, an average is its parts' sums over their counts. None: one query
    (a plain range, or a form that does not combine)."""
    if "${step}" not in field.promql:
        return None
    text = field.promql
    if text.startswith("avg_over_time("):
        body = text[len("avg_over_time(") :]
        forms = []
        for op in ("sum", "count"):
            form = msgspec.structs.replace(
                field, name=f"{field.name}{_PART_OF}{op}", merge="sum", promql=f"{op}_over_time({body}"
            )
            forms += [(form, part.with_template(form.promql)) for part in parts]
        return forms
    for prefix, merge in _SPLITTABLE.items():
        if text.startswith(prefix) and field.merge == merge:
            return [(field, part.with_template(text)) for part in parts]
    return None


def _probe(client: _Client, spec: QuerySpec, start: datetime, end: datetime) -> dict[str, int]:
    """Series per candidate metric with samples anywhere in the window (not
    only at its end: a signal whose last sample is minutes before the end is
    present); when the answer names none, which of them the label index has."""
    counts: dict[str, int] = {}
    range_s = max(1, round((end - start).total_seconds()))
    for item in client.instant(promql.probe_query(spec, range_s, [RULES_INFO]), end.timestamp()):
        labels = item.get("metric") or {}
        name = labels.get("metric") or labels.get("__name__")
        number = telemetry.clean((item.get("value") or [None, None])[1])
        if name:
            counts[name] = int(number or 0)
    if not set(counts) - {RULES_INFO}:
        match = (
            "{__name__=~" + promql.string_literal("|".join(promql.regex_escape(m) for m in spec.probe_metrics())) + "}"
        )
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


def _build_rows(
    rows: _Rows, fields: Sequence[Field], wanted: set[tuple[str, str]] | None, *, start: float, step: float
) -> tuple[list[dict], list[dict]]:
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
        metrics = {f.name: values.get(f.name) for f in fields if promql.field_output_is_standard(f)}
        if "coverage" in values:  # derived above, not a field of its own
            metrics["coverage"] = values["coverage"]
        extra = {f.name: values.get(f.name) for f in fields if not promql.field_output_is_standard(f)}
        out = telemetry.gpu_row(ident, metrics, extra)
        if ident["uuid"] is None and ident["gpu"] is None:
            if ident["pod"] is not None:
                pod_only.append(out)
            continue
        gpu_rows.append(out)
    return gpu_rows, pod_only

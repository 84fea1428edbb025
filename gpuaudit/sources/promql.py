"""Telemetry queries as data: load ``gpuaudit/data/promql.yaml``, merge a site's
override over it, validate, and render PromQL text. Pure: no IO beyond reading
the packaged YAML.

A site override is a mapping of the same shape (from config), e.g. to add a
signal its applications export::

    signals:
      launch_wait:
        candidates: [{metric: app_kernel_launch_wait_seconds_bucket}]
        fields:
          launch_wait_p95_s:
            promql: >-
              histogram_quantile(0.95, sum by (le, namespace, pod)
              (rate(${launch_wait}[${range}])))
            merge: max
            rollup: max

Fields that are not one of the standard telemetry keys land in each row's
``extra``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any
from urllib.parse import quote_plus

import msgspec

from gpuaudit.bundled import data_yaml
from gpuaudit.kube.overrides import merge_override
from gpuaudit.model.telemetry import METRIC_KEYS

_TOP_KEYS = {"version", "params", "keys", "shard_label", "signals"}
_REQUIRED_KEYS = ("namespace", "pod", "container", "node", "gpu", "uuid", "model", "mig_profile", "mig_id")
_MERGE_OPS = {"avg", "max", "min", "sum"}
_ROLLUP_OPS = {"mean", "max", "min", "sum"}
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_METRIC = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*$")
_BUILTIN_PLACEHOLDERS = {"sel", "range", "step", "step_seconds", "expected_steps"}
_HEX = "0123456789abcdef"


class QueryConfigError(ValueError):
    """The query definitions (built-in or a site's override) are invalid."""


class Candidate(msgspec.Struct, frozen=True):
    metric: str
    divisor: float = 1.0


class Field(msgspec.Struct, frozen=True):
    name: str
    signal: str
    promql: str
    merge: str  # PromQL aggregator over duplicate series of one GPU row
    rollup: str  # how a pod's GPU rows combine (site fields; standard keys use ROLLUP)
    requires: frozenset[str]  # signals the template names
    # The same field read from gpuaudit's recording rules (`gpuaudit
    # monitoring rules`), a plain range over per-interval values, when they
    # are installed; None: the field is always read from the raw series.
    recorded: str | None = None


class Signal(msgspec.Struct, frozen=True):
    name: str
    candidates: tuple[Candidate, ...]
    fields: tuple[Field, ...]


class QuerySpec(msgspec.Struct, frozen=True):
    params: Mapping[str, Any]
    keys: Mapping[str, tuple[str, ...]]
    shard_label: str
    signals: Mapping[str, Signal]

    @property
    def fields(self) -> list[Field]:
        return [f for s in self.signals.values() for f in s.fields]

    def probe_metrics(self) -> list[str]:
        """Every candidate metric, for the one query that finds which exist."""
        seen: dict[str, None] = {}
        for signal in self.signals.values():
            for cand in signal.candidates:
                seen.setdefault(cand.metric)
        return list(seen)

    def choose(self, present: Collection[str]) -> dict[str, Candidate | None]:
        """Per signal, the first candidate whose metric is present."""
        return {name: next((c for c in s.candidates if c.metric in present), None) for name, s in self.signals.items()}


def builtin_queries() -> dict[str, Any]:
    return data_yaml("promql.yaml")


def load_queries(override: Mapping[str, Any] | None = None) -> QuerySpec:
    """The built-in queries with ``override`` merged over them, validated."""
    raw = builtin_queries()
    if override:
        if not isinstance(override, Mapping):
            raise QueryConfigError("telemetry query override must be a mapping")
        raw = merge_override(raw, override)
    return _parse(raw)


def _fail(where: str, message: str) -> QueryConfigError:
    return QueryConfigError(f"promql queries: {where}: {message}")


def _parse(raw: Mapping[str, Any]) -> QuerySpec:
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise _fail("top level", f"unknown keys {sorted(unknown)}")
    params = raw.get("params") or {}
    if not isinstance(params, Mapping):
        raise _fail("params", "must be a mapping")
    for name, value in params.items():
        if not _NAME.match(str(name)):
            raise _fail(f"params.{name}", "not a valid name")
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise _fail(f"params.{name}", "must be a number or a string")

    keys_raw = raw.get("keys") or {}
    keys: dict[str, tuple[str, ...]] = {}
    for key in _REQUIRED_KEYS:
        labels = keys_raw.get(key)
        if not isinstance(labels, list) or not labels or not all(isinstance(x, str) and _NAME.match(x) for x in labels):
            raise _fail(f"keys.{key}", "must be a non-empty list of label names")
        keys[key] = tuple(labels)
    if set(keys_raw) - set(_REQUIRED_KEYS):
        raise _fail("keys", f"unknown keys {sorted(set(keys_raw) - set(_REQUIRED_KEYS))}")
    if len(keys["pod"]) != len(keys["namespace"]):
        # the pods filter pairs them by position (exported_pod with exported_namespace...)
        raise _fail("keys", "pod and namespace must list the same number of labels")
    shard_label = raw.get("shard_label", "UUID")
    if not isinstance(shard_label, str) or not _NAME.match(shard_label):
        raise _fail("shard_label", "must be a label name")

    signals_raw = raw.get("signals") or {}
    if not isinstance(signals_raw, Mapping) or not signals_raw:
        raise _fail("signals", "must be a non-empty mapping")
    names = set(signals_raw)
    clash = names & (set(params) | _BUILTIN_PLACEHOLDERS)
    if clash:
        raise _fail("signals", f"names {sorted(clash)} clash with params or placeholders")
    known = set(params) | _BUILTIN_PLACEHOLDERS | names | {f"{n}_divisor" for n in names}
    signals: dict[str, Signal] = {}
    seen_fields: set[str] = set()
    for sname, sraw in signals_raw.items():
        where = f"signals.{sname}"
        if not _NAME.match(str(sname)):
            raise _fail(where, "not a valid name")
        if not isinstance(sraw, Mapping) or set(sraw) - {"candidates", "fields"}:
            raise _fail(where, "must be a mapping with 'candidates' and 'fields'")
        cands = []
        for i, craw in enumerate(sraw.get("candidates") or []):
            if not isinstance(craw, Mapping) or set(craw) - {"metric", "divisor"}:
                raise _fail(f"{where}.candidates[{i}]", "must be {metric, divisor}")
            metric = craw.get("metric")
            divisor = craw.get("divisor", 1)
            if not isinstance(metric, str) or not _METRIC.match(metric):
                raise _fail(f"{where}.candidates[{i}].metric", "not a metric name")
            if (
                isinstance(divisor, bool)
                or not isinstance(divisor, (int, float))
                or not divisor > 0
                or not math.isfinite(divisor)
            ):
                raise _fail(f"{where}.candidates[{i}].divisor", "must be a positive number")
            cands.append(Candidate(metric, float(divisor)))
        if not cands:
            raise _fail(where, "needs at least one candidate metric")
        fields = []
        for fname, fraw in (sraw.get("fields") or {}).items():
            fwhere = f"{where}.fields.{fname}"
            if not _NAME.match(str(fname)):
                raise _fail(fwhere, "not a valid name")
            if fname in seen_fields:
                raise _fail(fwhere, "defined by two signals")
            seen_fields.add(fname)
            if isinstance(fraw, str):
                fraw = {"promql": fraw}
            if not isinstance(fraw, Mapping) or set(fraw) - {"promql", "merge", "rollup", "recorded"}:
                raise _fail(fwhere, "must be a PromQL string or {promql, merge, rollup, recorded}")
            recorded = fraw.get("recorded")
            if recorded is not None and (not isinstance(recorded, str) or not recorded.strip()):
                raise _fail(fwhere, "recorded must be a non-empty string")
            if recorded is not None and set(_PLACEHOLDER.findall(recorded)) - (_BUILTIN_PLACEHOLDERS | set(params)):
                raise _fail(fwhere, "recorded names only ${sel}, ${range} and params")
            promql = fraw.get("promql")
            if not isinstance(promql, str) or not promql.strip():
                raise _fail(fwhere, "promql must be a non-empty string")
            used = set(_PLACEHOLDER.findall(promql))
            if used - known:
                raise _fail(fwhere, f"unknown placeholders {sorted(used - known)}")
            merge = fraw.get("merge", "avg")
            rollup = fraw.get("rollup", "mean")
            if merge not in _MERGE_OPS:
                raise _fail(fwhere, f"merge must be one of {sorted(_MERGE_OPS)}")
            if rollup not in _ROLLUP_OPS:
                raise _fail(fwhere, f"rollup must be one of {sorted(_ROLLUP_OPS)}")
            requires = {p.removesuffix("_divisor") for p in used} & names
            fields.append(
                Field(
                    str(fname),
                    str(sname),
                    " ".join(promql.split()),
                    merge,
                    rollup,
                    frozenset(requires | {sname}),
                    " ".join(recorded.split()) if recorded else None,
                )
            )
        signals[str(sname)] = Signal(str(sname), tuple(cands), tuple(fields))
    return QuerySpec(dict(params), keys, shard_label, signals)


# --- rendering ---------------------------------------------------------------


def regex_escape(text: str) -> str:
    """Escape ``text`` for a literal match inside an RE2 regex in PromQL."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", text)


def string_literal(text: str) -> str:
    """A double-quoted PromQL string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def probe_query(spec: QuerySpec, range_s: int, extra: Sequence[str] = ()) -> str:
    """Which candidate metrics have samples anywhere in the window, and how
    many series each: one ``count(last_over_time(m[range]))`` per metric,
    named by a ``metric`` label. A series whose last sample is a few minutes
    before the window's end is still present (an instant probe at the end
    would call the whole signal absent)."""
    parts = [
        f'label_replace(count(last_over_time({m}[{range_s}s])), "metric", {string_literal(m)}, "", "")'
        for m in [*spec.probe_metrics(), *extra]
    ]
    return " or ".join(parts)


def shard_matchers(label: str, parts: int) -> list[str]:
    """Matchers that split series into ``parts`` disjoint groups by the first hex
    digit of ``label`` (after an optional GPU-/MIG- prefix). The last group is
    the complement of the others, so series without the label are not lost."""
    if parts <= 1:
        return [""]
    parts = min(parts, len(_HEX))
    size = math.ceil(len(_HEX) / parts)
    groups = [_HEX[i : i + size] for i in range(0, len(_HEX), size)]
    head = [f'{label}=~"(GPU-|MIG-)?[{g}].*"' for g in groups[:-1]]
    covered = "".join(groups[:-1])
    return [*head, f'{label}!~"(GPU-|MIG-)?[{covered}].*"']


def filter_forms(spec: QuerySpec, pod_regex: str, namespace_regex: str) -> list[str]:
    """Matcher sets selecting the given pods under each label variant, pairwise
    disjoint: form i matches on the i-th pod label and requires every label of
    higher precedence to be empty."""
    forms = []
    pods, namespaces = spec.keys["pod"], spec.keys["namespace"]
    for i, (pod_label, ns_label) in enumerate(zip(pods, namespaces, strict=True)):
        matchers = [f'{higher}=""' for higher in pods[:i]]
        matchers.append(f"{pod_label}=~{string_literal(pod_regex)}")
        matchers.append(f"{ns_label}=~{string_literal(namespace_regex)}")
        forms.append(",".join(matchers))
    return forms


def _substitute(template: str, values: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def render_field(
    spec: QuerySpec,
    field: Field,
    *,
    chosen: Mapping[str, Candidate | None],
    matcher_sets: Sequence[str],
    range_s: float,
    step_s: int,
    expected_steps: int,
    params: Mapping[str, Any],
    recorded: bool = False,
    template: str | None = None,
) -> str:
    """The complete PromQL for one field: the template rendered once per matcher
    set (joined with ``or``), canonicalised and aggregated per GPU row.
    ``recorded``: its ``recorded`` form, over series whose labels are the
    canonical keys themselves (gpuaudit's recording rules); ``template``: a
    form of the field's own template (a part of a split window)."""
    if recorded and field.recorded is None:
        raise ValueError(f"field {field.name} has no recorded form")
    text = template or (field.recorded if recorded else field.promql)
    values: dict[str, str] = {k: _number(v) for k, v in params.items()}
    values.update(
        range=range_text(range_s), step=f"{step_s}s", step_seconds=str(step_s), expected_steps=str(expected_steps)
    )
    parts = []
    for matchers in matcher_sets:
        sel = f"{{{matchers}}}" if matchers else ""
        values["sel"] = sel
        for name, cand in chosen.items():
            if cand is not None:
                values[name] = cand.metric + sel
                values[f"{name}_divisor"] = _number(cand.divisor)
        part = _substitute(text, values)
        parts.append(_from_recorded(spec, part) if recorded else part)
    inner = parts[0] if len(parts) == 1 else " or ".join(f"({p})" for p in parts)
    return canonicalise(spec, inner, field.merge)


def range_text(seconds: float) -> str:
    """A PromQL duration: whole seconds, else milliseconds (PromQL takes no fractions)."""
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


def _from_recorded(spec: QuerySpec, expr: str) -> str:
    """Recorded series carry each key under its own name (node, uuid, model...);
    copy it to the label canonicalise keeps (the last of the key's list)."""
    for key, labels in spec.keys.items():
        if labels[-1] != key:
            expr = f'label_replace({expr}, "{labels[-1]}", "$1", "{key}", "(.+)")'
    return expr


def canonicalise(spec: QuerySpec, expr: str, merge: str) -> str:
    """``merge by (canonical labels) (label_replace(...expr...))``: each output
    key ends up in the last label of its list, taken from the first non-empty
    label of the list."""
    for labels in spec.keys.values():
        target = labels[-1]
        for source in reversed(labels[:-1]):  # lowest precedence first, so the highest wins
            expr = f'label_replace({expr}, "{target}", "$1", "{source}", "(.+)")'
    group = ", ".join(labels[-1] for labels in spec.keys.values())
    return f"{merge} by ({group}) ({expr})"


def encoded_length(query: str) -> int:
    """Bytes the query takes in a form body or URL."""
    return len(quote_plus(query))


def field_output_is_standard(field: Field) -> bool:
    return field.name in METRIC_KEYS

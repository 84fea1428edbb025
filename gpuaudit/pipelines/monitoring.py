"""`gpuaudit monitoring`: the Prometheus rules and the Grafana dashboard made
from the loaded policy pack, the site's config and the telemetry queries
(gpuaudit/data/promql.yaml with the site's override), written as files."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpuaudit.engine.rules import Rule
from gpuaudit.files import write_atomic
from gpuaudit.report import monitoring_dashboard, monitoring_rules
from gpuaudit.report.monitoring_rules import Candidate, Inputs
from gpuaudit.sources import promql
from gpuaudit.sources.user_config import Config

RULES_FILE = "gpuaudit-rules.yaml"  # plain Prometheus rule_files
PROMETHEUS_RULE_FILE = "gpuaudit-prometheusrule.yaml"  # prometheus-operator
DASHBOARD_FILE = "gpuaudit-dashboard.json"


def inputs(config: Config, rules: Sequence[Rule], *, window_s: int, interval_s: int, class_interval_s: int) -> Inputs:
    """What the rules are made from: the rules' params (site overrides
    applied by the loader), the telemetry params and label keys."""
    spec = promql.load_queries(config.telemetry.get("queries"))
    params = {**spec.params, **(config.telemetry.get("params") or {})}
    compute = spec.signals.get("compute")
    if compute is None:
        raise ValueError("telemetry.queries has no compute signal: no rules can be made")
    return Inputs(
        keys={k: tuple(v) for k, v in spec.keys.items()},
        compute=tuple(Candidate(c.metric, c.divisor) for c in compute.candidates),
        telemetry=params,
        rules={r.id: {"severity": r.severity, "params": dict(r.params), "docs": r.docs} for r in rules},
        window_s=window_s,
        interval_s=interval_s,
        class_interval_s=class_interval_s,
    )


class _Block(yaml.SafeDumper):
    """Multi-line strings (PromQL) as YAML block scalars."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Block.add_representer(str, _str)


def dump_yaml(value: Any) -> str:
    return yaml.dump(value, Dumper=_Block, sort_keys=False, width=1000, allow_unicode=True)


def write_rules(
    folder: Path, data: Inputs, *, labels: Mapping[str, str] | None = None, namespace: str | None = None
) -> list[Path]:
    groups = monitoring_rules.rule_groups(data)
    plain = folder / RULES_FILE
    operator = folder / PROMETHEUS_RULE_FILE
    write_atomic(plain, dump_yaml({"groups": groups}))
    write_atomic(operator, dump_yaml(monitoring_rules.prometheus_rule(groups, namespace=namespace, labels=labels)))
    return [plain, operator]


def write_dashboard(folder: Path, data: Inputs) -> list[Path]:
    model = monitoring_dashboard.dashboard(window=monitoring_rules.duration(data.window_s))
    path = folder / DASHBOARD_FILE
    write_atomic(path, json.dumps(model, indent=2) + "\n")
    return [path]

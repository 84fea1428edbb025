"""`gpuaudit monitoring`: Prometheus rules and a Grafana dashboard from the
policy pack, for the days between reviews."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import msgspec

from gpuaudit.cli.groups import SuggestingGroup
from gpuaudit.cli.options import OptionGroup, input_errors_code, policy_options, read_config, seconds_option, stop
from gpuaudit.files import WriteError
from gpuaudit.pipelines import monitoring as pipeline
from gpuaudit.pipelines.policy import PolicyOptions
from gpuaudit.sources.promql import QueryConfigError


class Shape(msgspec.Struct, frozen=True):
    """Where the files go and the windows and intervals their rules use (durations as written)."""

    output_dir: Path
    window: str
    interval: str
    class_interval: str


shape_options = OptionGroup(
    "shape",
    Shape,
    click.option(
        "--out",
        "output_dir",
        type=click.Path(file_okay=False, path_type=Path),
        required=True,
        help="Folder to write the files into.",
    ),
    click.option(
        "--window", default="24h", show_default=True, help="Window each pod is judged over (as `audit --window`)."
    ),
    click.option(
        "--interval",
        default="60s",
        show_default=True,
        help="Evaluation interval of the per-GPU recording rules (as `audit --step`).",
    ),
    click.option(
        "--class-interval",
        default="5m",
        show_default=True,
        help="Evaluation interval of the availability rules and alerts.",
    ),
)


@click.group(cls=SuggestingGroup)
def monitoring() -> None:
    """Prometheus recording/alerting rules and a Grafana dashboard, with the
    thresholds of the rules that judge the same thing."""


def _run(write: Callable[..., list[Path]], shape: Shape, policy: PolicyOptions, **extra: Any) -> int:
    config = read_config(policy.config_path)
    rules, errors = policy.load(config)
    for e in errors:
        click.echo(f"gpuaudit: {e.file}{':' + str(e.line) if e.line else ''}: {e.message}", err=True)
    try:
        data = pipeline.inputs(
            config,
            rules,
            window_s=seconds_option(shape.window, "--window"),
            interval_s=seconds_option(shape.interval, "--interval"),
            class_interval_s=seconds_option(shape.class_interval, "--class-interval"),
        )
        written = write(shape.output_dir, data, **extra)
    except (QueryConfigError, ValueError) as exc:
        stop(f"telemetry.queries in config: {exc}")
    except WriteError as exc:
        stop(str(exc))
    for path in written:
        click.echo(str(path))
    return input_errors_code(errors)


@monitoring.command("rules")
@shape_options
@policy_options
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="A label on the PrometheusRule object (e.g. release=prometheus; repeatable).",
)
@click.option("--namespace", help="The PrometheusRule object's namespace (default: none, kubectl's).")
def rules_command(labels: tuple[str, ...], namespace: str | None, shape: Shape, policy: PolicyOptions) -> int:
    """Write gpuaudit-rules.yaml (Prometheus rule_files) and
    gpuaudit-prometheusrule.yaml (prometheus-operator)."""
    pairs = dict(label.split("=", 1) for label in labels if "=" in label)
    if len(pairs) != len(labels):
        raise click.BadParameter("labels are KEY=VALUE", param_hint="--label")
    return _run(pipeline.write_rules, shape, policy, labels=pairs, namespace=namespace)


@monitoring.command("dashboard")
@shape_options
@policy_options
def dashboard_command(shape: Shape, policy: PolicyOptions) -> int:
    """Write gpuaudit-dashboard.json (Grafana): availability and activity rows."""
    return _run(pipeline.write_dashboard, shape, policy)

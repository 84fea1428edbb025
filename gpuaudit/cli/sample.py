"""`gpuaudit sample`: NVML sampling on a GPU node without a DCGM exporter."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path

import click

from gpuaudit.cli.options import stop
from gpuaudit.durations import parse_duration
from gpuaudit.jsontext import indented
from gpuaudit.model.telemetry import TelemetryUnavailable
from gpuaudit.sources import nvml
from gpuaudit.sources.samples import aggregate_samples, load_pods_json


@click.command()
@click.option("--interval", default="10s", show_default=True, help="Time between samples (500ms, 5s, 1m).")
@click.option("--duration", default="10m", show_default=True, help="How long to sample (60s, 1h).")
@click.option(
    "--output-file",
    "output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON-lines file (default: stdout).",
)
# Before --output-file (-o is a format in check and audit, as in kubectl):
# still read, no longer shown.
@click.option("-o", "--output", "legacy_output", type=click.Path(dir_okay=False, path_type=Path), hidden=True)
@click.option(
    "--pods",
    "pods_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Pods JSON (kubelet /pods, a PodList, or uid -> ns/name) to name pod UIDs.",
)
@click.option(
    "--proc-root",
    default="/proc",
    show_default=True,
    help="The host's /proc (a DaemonSet mounts it; needs hostPID to see GPU processes).",
)
@click.option("--node", help="Node name to record (default: the hostname).")
@click.option(
    "--aggregate",
    "aggregate_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Instead of sampling, print the telemetry aggregate of these sample files.",
)
def sample(
    interval: str,
    duration: str,
    output: Path | None,
    legacy_output: Path | None,
    pods_file: Path | None,
    proc_root: str,
    node: str | None,
    aggregate_files: tuple[Path, ...],
) -> int:
    """Sample GPU utilisation, memory, PCIe and processes with NVML into JSON lines;
    `gpuaudit audit --samples FILE` uses them like Prometheus aggregates."""
    output = output or legacy_output

    try:
        pods = load_pods_json(pods_file) if pods_file else None
        if aggregate_files:
            result = aggregate_samples(list(aggregate_files), pods_by_uid=pods)
            click.echo(indented(result, allow_nan=False))
            return 0
        seconds, every = parse_duration(duration), parse_duration(interval)
        if not _has_pynvml():
            stop("`gpuaudit sample` needs nvidia-ml-py, which is not installed: pip install 'gpuaudit[nvml]'")
        target = output.open("w", encoding="utf-8") if output else contextlib.nullcontext(sys.stdout)
        with target as out:
            ticks = nvml.sample(
                interval=every, duration=seconds, out=out, proc_root=proc_root, node=node, pods_by_uid=pods
            )
    except (ValueError, OSError, TelemetryUnavailable, nvml.NvmlUnavailable) as exc:
        stop(str(exc))
    click.echo(f"{ticks} samples written to {output or 'stdout'}", err=True)
    return 0


def _has_pynvml() -> bool:
    """Whether nvidia-ml-py (module pynvml) is installed: the [nvml] extra."""
    if sys.modules.get("pynvml") is not None:
        return True
    try:
        return importlib.util.find_spec("pynvml") is not None
    except (ImportError, ValueError):
        return False

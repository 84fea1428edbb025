"""`gpuaudit check`: audit manifests, kustomize packages and Helm charts.

Run by pre-commit on every commit, so its import path stays short: no
Kubernetes client, Jinja2 or NVML."""

from __future__ import annotations

import gc
from pathlib import Path

import click
import msgspec

from gpuaudit.cli.options import (
    OptionGroup,
    OutputSpec,
    emit,
    exit_code,
    input_errors_code,
    manifest_options,
    output_options,
    output_targets,
    policy_options,
    read_config,
    require_input,
    stop,
)
from gpuaudit.engine.baseline import BaselineError
from gpuaudit.pipelines.check import Baselines, CheckOptions, run_check
from gpuaudit.pipelines.policy import PolicyOptions
from gpuaudit.sources.inputs import ManifestOptions
from gpuaudit.sources.user_config import ConfigError

check_input_options = manifest_options.extended(
    click.option(
        "--changed-files",
        is_flag=True,
        help="PATHS are changed files (as pre-commit passes them): each is audited as part of the units "
        "it belongs to in its repository (a base: every kustomize root that uses it; a template or values "
        "file: its chart; a plain manifest: its folder's unit), only those units rendered.",
    ),
)
baseline_options = OptionGroup(
    "baselines",
    Baselines,
    click.option(
        "--baseline",
        "apply",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Hide the findings recorded in this baseline; report the rest.",
    ),
    click.option(
        "--write-baseline",
        "write",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Record the current findings in this file (exit 0 unless input errors).",
    ),
)


@click.command()
@click.argument("paths", nargs=-1)
@policy_options
@output_options
@check_input_options
@baseline_options
def check(
    paths: tuple[str, ...],
    policy: PolicyOptions,
    output: OutputSpec,
    manifests: ManifestOptions,
    baselines: Baselines,
) -> int:
    """Audit manifests (files, directories, '-' for stdin; directories with a
    kustomization are rendered) and Helm charts (--helm-chart)."""
    require_input(paths, manifests)
    output_targets(output.formats, output.output_file)  # usage errors before the run
    config = read_config(policy.config_path)
    try:
        run = run_check(CheckOptions(paths, policy, manifests, baselines), config, say=_say)
    except (ConfigError, BaselineError) as exc:
        stop(str(exc))
    threshold = output.fail_on or config.fail_on or "high"
    emit(run.result, msgspec.structs.replace(output, fail_on=threshold))
    # On its way out the interpreter collects once more, walking every object
    # still alive (about 3% of a pre-commit run): none of them is garbage.
    gc.freeze()
    if run.baseline_unwritten:
        return 2
    if baselines.write is not None:
        return input_errors_code(run.result.errors)
    return exit_code(run.result, threshold)


def _say(message: str) -> None:
    click.echo(f"gpuaudit: {message}", err=True)

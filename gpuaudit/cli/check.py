"""`gpuaudit check`: audit manifests, kustomize packages and Helm charts.

Run by pre-commit on every commit, so its import path stays short: no
Kubernetes client, Jinja2 or NVML."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import click

from gpuaudit.cli.options import (
    OutputSpec,
    emit,
    exit_code,
    input_errors_code,
    input_options,
    manifest_options,
    option_group,
    output_options,
    output_targets,
    policy_options,
    read_config,
    require_input,
    split_names,
    stop,
)
from gpuaudit.files import write_atomic
from gpuaudit.pipelines.check import check_manifests
from gpuaudit.pipelines.policy import load_policy

check_input_options = option_group(
    manifest_options,
    click.option(
        "--changed-files",
        is_flag=True,
        help="PATHS are changed files (as pre-commit passes them): each is audited as part of the units "
        "it belongs to in its repository (a base: every kustomize root that uses it; a template or values "
        "file: its chart; a plain manifest: its folder's unit), only those units rendered.",
    ),
    click.option(
        "--baseline",
        "baseline_path",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Hide the findings recorded in this baseline; report the rest.",
    ),
    click.option(
        "--write-baseline",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Record the current findings in this file (exit 0 unless input errors).",
    ),
)


@click.command()
@click.argument("paths", nargs=-1)
@policy_options
@output_options
@check_input_options
def check(
    paths: tuple[str, ...],
    config_path: Path | None,
    policy_dirs: tuple[Path, ...],
    include: str,
    exclude: str,
    output_formats: tuple[str, ...],
    formats: tuple[str, ...],
    output_file: Path | None,
    fail_on: str | None,
    color: str,
    quiet: bool,
    changed_files: bool,
    baseline_path: Path | None,
    write_baseline: Path | None,
    **manifest: Any,
) -> int:
    """Audit manifests (files, directories, '-' for stdin; directories with a
    kustomization are rendered) and Helm charts (--helm-chart)."""
    require_input(paths, manifest["helm_charts"], manifest["helm_values"])
    output_targets([*output_formats, *formats] or ["text"], output_file)  # usage errors before the run
    config = read_config(config_path)
    options = input_options(config, changed_files=changed_files, **manifest)
    rules, rule_errors = load_policy(config, policy_dirs, split_names(include), split_names(exclude))
    result = check_manifests(
        paths,
        config,
        rules,
        options=options,
        keep_subjects=False,  # no output needs them: lets a large input use all cores
    )
    result.errors[:0] = rule_errors
    unwritten = False  # the baseline could not be written: the output still goes out, then exit 2
    if write_baseline is not None or baseline_path is not None:
        from gpuaudit.engine import baseline

        if write_baseline is not None:
            try:
                write_atomic(write_baseline, baseline.dumps(baseline.build(result.findings)))
            except OSError as exc:  # files.WriteError names the file
                click.echo(f"gpuaudit: {exc}", err=True)
                unwritten = True
            else:
                click.echo(
                    f"gpuaudit: recorded {len(result.findings)} finding(s) in {write_baseline}",
                    err=True,
                )
        if baseline_path is not None:
            try:
                baseline.apply_to_result(result, baseline_path)
            except baseline.BaselineError as exc:
                stop(str(exc))
    threshold = fail_on or config.fail_on or "high"
    emit(result, OutputSpec.from_options(output_formats, formats, output_file, threshold, color, quiet))
    # On its way out the interpreter collects once more, walking every object
    # still alive (about 3% of a pre-commit run): none of them is garbage.
    gc.freeze()
    if unwritten:
        return 2
    if write_baseline is not None:
        return input_errors_code(result.errors)
    return exit_code(result, threshold)

"""`gpuaudit fix`: turn findings into a Kustomize overlay a reviewer can read,
build and merge (one patch per change, REVIEW.md), or print the rendered
before/after with --diff (the work is in pipelines/fix.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import yaml

from gpuaudit.cli.options import (
    input_errors_code,
    kustomize_restrictor_option,
    policy_options,
    read_config,
    split_names,
    stop,
)
from gpuaudit.cli.source_options import load_snapshot, load_telemetry, telemetry_options
from gpuaudit.files import UnsafePathError
from gpuaudit.model import InputError
from gpuaudit.model.cluster_builder import kept_for_audit
from gpuaudit.pipelines.fix import DiffError, OverlayCheck, plan_fix, rendered_diff, verify_overlay, write_overlay
from gpuaudit.pipelines.policy import load_policy
from gpuaudit.remediate import overlay, review


def parse_settings(values: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in values:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{item!r}: expected NAME=VALUE", param_hint="--set")
        try:
            out[name.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            out[name.strip()] = raw
    return out


@click.command()
@click.argument("paths", nargs=-1)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the overlay (created; must be empty unless --force).",
)
@click.option("--force", is_flag=True, help="Write into a folder that is not empty.")
@click.option("--diff", "show_diff", is_flag=True, help="Print the rendered before/after; write nothing.")
@click.option(
    "--verify",
    "check_build",
    is_flag=True,
    help="Build the written overlay with kustomize and audit the result: exit 1 unless every "
    "targeted finding is gone, none is new and nothing else changed.",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="[REMEDIATION.]NAME=VALUE",
    help="Set a remediation parameter (remediations/<id>/params.yaml), e.g. --set size_limit=32Gi.",
)
@click.option(
    "--snapshot",
    "snapshot_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A snapshot (gpuaudit snapshot): with PATHS, its pods' GPU memory and GPU models size "
    "the patches; alone, the workloads that own its GPU pods and its GPU configs are fixed, "
    "with the objects as read for a base.",
)
@kustomize_restrictor_option
@telemetry_options
@policy_options
def fix(
    paths: tuple[str, ...],
    out_dir: Path | None,
    force: bool,
    show_diff: bool,
    check_build: bool,
    settings: tuple[str, ...],
    snapshot_path: Path | None,
    kustomize_load_restrictor: str,
    config_path: Path | None,
    policy_dirs: tuple[Path, ...],
    include: str,
    exclude: str,
    **telemetry: Any,
) -> int:
    """Write a Kustomize overlay that fixes the findings in PATHS (manifest
    files, folders, or kustomize directories), with REVIEW.md."""
    if not paths and snapshot_path is None:
        raise click.UsageError("give manifest files, folders or kustomize directories to fix, or --snapshot FILE")
    if "-" in paths:
        raise click.UsageError("fix needs files it can reference from the overlay, not stdin")
    if out_dir is None and not show_diff:
        raise click.UsageError("--out DIR is required (or --diff to print the changes)")
    if snapshot_path is None and (telemetry.get("prometheus_url") or telemetry.get("sample_files")):
        raise click.UsageError("--prometheus and --samples size patches from --snapshot FILE's pods")
    config = read_config(config_path)
    rules, rule_errors = load_policy(config, policy_dirs, split_names(include), split_names(exclude))
    overrides = parse_settings(settings)
    errors = list(rule_errors)
    snapshot: dict[str, Any] | None = None
    problem: str | None = None
    if snapshot_path is not None:
        snapshot = load_snapshot(
            snapshot_path=snapshot_path,
            kubeconfig=None,
            context=None,
            in_cluster=False,
            request_timeout=30.0,
            deadline=300.0,
            each=kept_for_audit,
        )
        problem = load_telemetry(snapshot, config, **telemetry)
        if problem:
            errors.append(InputError("telemetry", None, problem))
    plan, inputs = plan_fix(
        paths,
        snapshot,
        str(snapshot_path),
        problem,
        config,
        rules,
        overrides,
        kustomize_load_anywhere=kustomize_load_restrictor == "none",
    )
    errors += inputs.errors
    for e in errors:
        where = f"{e.file}:{e.line}" if e.line else e.file
        click.echo(f"gpuaudit: {where}: {e.message}", err=True)
    code = input_errors_code(errors)

    if show_diff:
        try:
            diff, how = rendered_diff(plan)
        except DiffError as exc:
            stop(str(exc))
        click.echo(f"# {len(plan.changes)} change(s); after = {how}", err=True)
        click.echo(diff, nl=False)
        return code

    assert out_dir is not None
    if out_dir.exists() and not out_dir.is_dir():
        stop(f"{out_dir} is not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        stop(f"{out_dir} is not empty (use --force to write into it)")
    layout = overlay.layout(plan, out_dir)
    read = paths or (str(snapshot_path),)
    layout.files["REVIEW.md"] = review.render(plan, layout, str(out_dir), read, inputs.labels)
    try:
        write_overlay(out_dir, layout, inputs.files)
    except (UnsafePathError, OSError) as exc:
        stop(str(exc))
    skipped = len(plan.skipped)
    click.echo(
        f"wrote {out_dir}: {len(plan.changes)} patch(es) fixing {len(plan.fixed_findings)} "
        f"finding(s); {skipped} finding(s) without a patch (see REVIEW.md)"
    )
    click.echo(f"build it: {overlay.build_command(plan, str(out_dir))}")
    if check_build and not _report_verification(verify_overlay(out_dir, plan, inputs, config, rules)):
        return 1
    return code


def _report_verification(check: OverlayCheck) -> bool:
    if check.problem is not None or check.result is None:
        click.echo(f"verify: the overlay does not build: {check.problem}", err=True)
        return False
    result = check.result
    click.echo(
        f"verify: built {check.built} object(s); {len(result.fixed)} targeted finding(s) gone, "
        f"{len(result.remaining)} still there, {len(result.new)} new; "
        f"{len(result.differences)} unplanned difference(s)"
    )
    if check.live_only:
        click.echo(
            f"verify: {', '.join(check.live_only)} judged on live state only: the built objects cannot show "
            "them, the next audit of the cluster will"
        )
    for f in result.remaining:
        click.echo(f"  still there: {f.rule} {f.resource.kind}/{f.resource.name}", err=True)
    for f in result.new:
        click.echo(f"  new: {f.rule} {f.resource.kind}/{f.resource.name}: {f.message}", err=True)
    for line in result.differences:
        click.echo(f"  differs: {line}", err=True)
    return result.ok

"""`gpuaudit fix`: turn findings into a Kustomize overlay a reviewer can read,
build and merge (one patch per change, REVIEW.md), or print the rendered
before/after with --diff (the work is in pipelines/fix.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml

from gpuaudit.cli.options import input_errors_code, kustomize_restrictor_option, policy_options, read_config, stop
from gpuaudit.cli.source_options import reading, telemetry_options
from gpuaudit.files import UnsafePathError, write_atomic
from gpuaudit.model import InputError
from gpuaudit.model.cluster_builder import kept_for_audit
from gpuaudit.pipelines.fix import (
    DiffError,
    FixOptions,
    OverlayCheck,
    plan_fix,
    rendered_diff,
    verify_overlay,
    write_overlay,
)
from gpuaudit.remediate import overlay, review, volume
from gpuaudit.sources.cluster_read import load_snapshot
from gpuaudit.sources.telemetry import load_telemetry

if TYPE_CHECKING:
    from gpuaudit.pipelines.policy import PolicyOptions
    from gpuaudit.sources.telemetry import TelemetryRequest


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
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=volume.DEFAULT_TOP,
    show_default=True,
    help="Hold at most N patches in one overlay, those that free the most GPUs first (whole objects; "
    "0: all). REVIEW.md says what is held back.",
)
@click.option(
    "--split-by",
    type=click.Choice(["namespace", "team"]),
    help="Write one overlay per namespace (or team: the config's report.team_label, else the namespace) "
    "in a folder of its own under --out, each with its own REVIEW.md and --top.",
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
    top: int,
    split_by: str | None,
    kustomize_load_restrictor: str,
    telemetry: TelemetryRequest,
    policy: PolicyOptions,
) -> int:
    """Write a Kustomize overlay that fixes the findings in PATHS (manifest
    files, folders, or kustomize directories), with REVIEW.md."""
    if not paths and snapshot_path is None:
        raise click.UsageError("give manifest files, folders or kustomize directories to fix, or --snapshot FILE")
    if "-" in paths:
        raise click.UsageError("fix needs files it can reference from the overlay, not stdin")
    if out_dir is None and not show_diff:
        raise click.UsageError("--out DIR is required (or --diff to print the changes)")
    if snapshot_path is None and telemetry.given:
        raise click.UsageError("--prometheus and --samples size patches from --snapshot FILE's pods")
    config = read_config(policy.config_path)
    rules, rule_errors = policy.load(config)
    options = FixOptions(
        paths,
        str(snapshot_path),
        parse_settings(settings),
        kustomize_load_anywhere=kustomize_load_restrictor == "none",
    )
    errors = list(rule_errors)
    snapshot: dict[str, Any] | None = None
    problem: str | None = None
    if snapshot_path is not None:
        with reading():
            snapshot = load_snapshot(snapshot_path, each=kept_for_audit)
            problem = load_telemetry(snapshot, config, telemetry)
        if problem:
            errors.append(InputError("telemetry", None, problem))
    plan, inputs = plan_fix(options, snapshot, problem, config, rules)
    errors += inputs.errors
    for e in errors:
        where = f"{e.file}:{e.line}" if e.line else e.file
        click.echo(f"gpuaudit: {where}: {e.message}", err=True)
    code = input_errors_code(errors)

    if split_by is not None:
        key = volume.group_key(split_by, config.report.get("team_label"))
        parts = {name: volume.select(part, top) for name, part in volume.split(plan, key).items()}
    else:
        parts = {"": volume.select(plan, top)}

    if show_diff:
        for name, part in parts.items():
            try:
                diff, how = rendered_diff(part.plan)
            except DiffError as exc:
                stop(str(exc))
            where = f" in {name}" if name else ""
            click.echo(f"# {len(part.plan.changes)} change(s){where}; after = {how}", err=True)
            click.echo(diff, nl=False)
        return code

    assert out_dir is not None
    if out_dir.exists() and not out_dir.is_dir():
        stop(f"{out_dir} is not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        stop(f"{out_dir} is not empty (use --force to write into it)")
    read = paths or (str(snapshot_path),)
    folders = volume.folder_names(parts)
    sharing_part = next((n for n, p in parts.items() if n and volume.holds_sharing_config(p.plan)), None)
    sharing = folders[sharing_part] if sharing_part is not None else None
    # What the sharing config's overlay adds or changes: applied first, so the others are checked against it.
    applied_first = volume.results(parts[sharing_part].plan) if sharing_part is not None else []
    ok = True
    for name, part in parts.items():
        directory = out_dir / folders[name] if name else out_dir
        layout = overlay.layout(part.plan, directory)
        first = sharing if name and sharing and sharing != folders[name] else None
        layout.files["REVIEW.md"] = review.render(
            part.plan, layout, str(directory), read, inputs.labels, held=part.held, top=top, apply_first=first
        )
        if len(part.plan.skipped) > review.NOT_REMEDIATED_ROWS:
            layout.files["NOT-REMEDIATED.md"] = review.render_not_remediated(part.plan.skipped, inputs.labels)
        try:
            write_overlay(directory, layout, inputs.files)
        except (UnsafePathError, OSError) as exc:
            stop(str(exc))
        click.echo(
            f"wrote {directory}: {len(part.plan.changes)} patch(es) fixing {len(part.plan.fixed_findings)} "
            f"finding(s), freeing about {part.frees:,.1f} GPU(s)"
            + (f"; {sum(len(g.changes) for g in part.held)} more held back (--top {top})" if part.held else "")
        )
        click.echo(f"build it: {overlay.build_command(part.plan, str(directory))}")
        context = applied_first if first else []
        check = verify_overlay(directory, part.plan, inputs, config, rules, context) if check_build else None
        if check is not None and not _report_verification(check):
            ok = False
    if split_by is not None:
        index = review.render_index(plan, {folders[n]: p for n, p in parts.items()}, str(out_dir), read, split_by)
        try:
            write_atomic(out_dir / "REVIEW.md", index)
            if len(plan.skipped) > review.NOT_REMEDIATED_ROWS:
                write_atomic(out_dir / "NOT-REMEDIATED.md", review.render_not_remediated(plan.skipped, inputs.labels))
        except OSError as exc:
            stop(str(exc))
    click.echo(f"{len(plan.skipped)} finding(s) without a patch (see REVIEW.md)")
    if not ok:
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
        + (f"; {len(result.further)} further saving(s) once it applies" if result.further else "")
    )
    if check.live_only:
        click.echo(
            f"verify: {', '.join(check.live_only)} judged on live state only: the built objects cannot show "
            "them, the next audit of the cluster will"
        )
    for f in result.remaining:
        click.echo(f"  still there: {f.rule} {f.resource.kind}/{f.resource.name}", err=True)
    for f in result.further:
        click.echo(f"  further: {f.rule} {f.resource.kind}/{f.resource.name}: {f.message}")
    for f in result.new:
        click.echo(f"  new: {f.rule} {f.resource.kind}/{f.resource.name}: {f.message}", err=True)
    for line in result.differences:
        click.echo(f"  differs: {line}", err=True)
    return result.ok

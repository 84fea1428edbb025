"""`gpuaudit fix`: turn findings into a Kustomize overlay a reviewer can read,
build and merge (one patch per change, REVIEW.md), or print the rendered
before/after with --diff. Never edits its inputs; writes only inside --out."""

from __future__ import annotations

import difflib
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import yaml

from gpuaudit.audit import audit_cluster, check_manifests, load_policy, locators_for, manifest_subjects
from gpuaudit.cli import load_config_or_exit, policy_options, split_names
from gpuaudit.commands.sources import load_snapshot, load_telemetry, telemetry_options
from gpuaudit.config import Config
from gpuaudit.engine.evaluate import evaluate, site_inputs
from gpuaudit.engine.rules import Rule
from gpuaudit.facts.context import Site, build_context
from gpuaudit.model import Document, Finding, InputError
from gpuaudit.output.files import UnsafePathError, inside, write_atomic
from gpuaudit.remediate import live, overlay, review, verify
from gpuaudit.remediate.plan import (
    ObjectId,
    Plan,
    Settings,
    Source,
    describe_manifests,
    object_id,
    plan_fixes,
)
from gpuaudit.remediate.planners import RunState
from gpuaudit.remediate.planners.sharing import sharing_configs
from gpuaudit.sources import kustomize
from gpuaudit.sources.manifests import read_paths
from gpuaudit.workloads import build_workloads


@dataclass
class Inputs:
    """What the fix run read: findings with their source, every object as
    read (for --verify and --diff), and problems with the input."""

    items: list[tuple[Finding, Source]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    originals: dict[ObjectId, dict[str, Any]] = field(default_factory=dict)
    errors: list[InputError] = field(default_factory=list)
    files: set[Path] = field(default_factory=set)  # every input file, resolved
    labels: dict[int, str] = field(default_factory=dict)  # id(document) -> display name
    documents: list[Document] = field(default_factory=list)  # every object read
    bare: list[Document] = field(default_factory=list)  # non-Kubernetes YAML (bare configs)

    live: bool = False  # read from a snapshot: the base is the cluster's objects

    def shared_names(self, config: Config) -> frozenset[str] | None:
        """The `.shared` names the input's device-plugin configs (or the site) advertise."""
        site = Site.from_config(config.site)
        return build_context(site, self.documents, [], self.bare).shared_names


def read_fix_inputs(paths: Sequence[str], config: Config, rules: Sequence[Rule]) -> Inputs:
    inputs = Inputs()
    plain: list[str] = []
    for path in paths:
        p = Path(path)
        if kustomize.is_package(p):
            _read_package(p, config, rules, inputs)
        else:
            plain.append(path)
    if plain:
        read = read_paths(plain)
        inputs.documents.extend(read.documents)
        inputs.bare.extend(read.bare)
        result = check_manifests(plain, config, rules)
        inputs.errors.extend(result.errors)
        sources: dict[str, Source] = {}
        for finding in result.findings:
            doc = finding.subject.document if finding.subject is not None else None
            file = doc.file if doc is not None else finding.location.file
            if file not in sources:
                sources[file] = _file_source(Path(file))
            inputs.items.append((finding, sources[file]))
            inputs.findings.append(finding)
        for doc in read.documents:
            source = sources.get(doc.file)
            if source is not None and source.problem is None:
                inputs.originals[object_id(doc.obj)] = dict(doc.obj)
        for path in plain:
            p = Path(path)
            if p.is_file():
                inputs.files.add(p.resolve())
            elif p.is_dir():
                inputs.files.update(f.resolve() for f in p.rglob("*") if f.is_file())
    return inputs


def read_live(
    snapshot: dict[str, Any], label: str, config: Config, rules: Sequence[Rule], problem: str | None
) -> Inputs:
    """A cluster audit of the snapshot, with the cluster's own objects as the base."""
    inputs = Inputs(live=True)
    result = audit_cluster(snapshot, config, rules, telemetry_problem=problem)
    inputs.errors.extend(e for e in result.errors if e.level == "error" and e.file != "telemetry")
    inputs.items = live.live_items(
        result.findings, snapshot, label, rules, locators_for(config), Site.from_config(config.site)
    )
    inputs.findings = [f for f, _ in inputs.items]
    for finding, source in inputs.items:
        if source.content is not None:
            doc = finding.subject.document
            inputs.originals[object_id(doc.obj)] = dict(doc.obj)
            inputs.documents.append(doc)
    return inputs


def _file_source(path: Path) -> Source:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        return Source(str(path), path, "file", (), f"cannot read it ({exc})")
    ids, problem = describe_manifests(text)
    return Source(str(path), path, "file", ids, problem)


def _read_package(path: Path, config: Config, rules: Sequence[Rule], inputs: Inputs) -> None:
    label = f"{path} (kustomize build)"
    try:
        text, unrestricted = kustomize.build_package(path)
    except kustomize.KustomizeError as exc:
        inputs.errors.append(InputError(str(path), None, f"kustomize build failed: {exc}"))
        return
    ids, problem = describe_manifests(text)
    source = Source(label, path, "kustomize", ids, problem, unrestricted)
    result = check_manifests(["-"], config, rules, stdin_text=text)
    inputs.errors.extend(InputError(label, e.line, e.message, e.level) for e in result.errors if e.level == "error")
    for finding in result.findings:
        inputs.items.append((finding, source))
        inputs.findings.append(finding)
        if finding.subject is not None and finding.subject.document is not None:
            inputs.labels[id(finding.subject.document)] = label
    read = read_paths(["-"], stdin_text=text)
    inputs.documents.extend(read.documents)
    inputs.bare.extend(read.bare)
    for doc in read.documents:
        inputs.originals[object_id(doc.obj)] = dict(doc.obj)
    inputs.files.update(path.resolve() / n for n in kustomize.KUSTOMIZATION_FILES)


def rechecker(config: Config, rules: Sequence[Rule], inputs: Inputs):
    """Whether a finding's rule still reports it on an object as patched so
    far, judged with what the rest of the input says (facts.context)."""
    by_id = {r.id: r for r in rules}
    locators = locators_for(config)
    workloads, _ = build_workloads(inputs.documents, locators)
    context = build_context(Site.from_config(config.site), inputs.documents, workloads, inputs.bare)
    have = {"manifest", *site_inputs(config.site)}

    def still_found(finding: Finding, obj: Mapping[str, Any]) -> bool:
        rule = by_id.get(finding.rule)
        if rule is None:
            return True
        doc = Document(dict(obj), "", 1)
        patched, _ = build_workloads([doc], locators)
        subjects = manifest_subjects([doc], patched, context)
        found = evaluate([rule], subjects, inputs=have, exemptions=config.exemptions)
        return verify.finding_key(finding) in {verify.finding_key(f) for f in found.findings}

    return still_found


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
    help="Set a remediation parameter (remediations/params.yaml), e.g. --set size_limit=32Gi.",
)
@click.option(
    "--snapshot",
    "snapshot_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A snapshot (gpuaudit snapshot): with PATHS, its pods' GPU memory and GPU models size "
    "the patches; alone, the workloads that own its GPU pods and its GPU configs are fixed, "
    "with the objects as read for a base.",
)
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
    config_path: Path | None,
    policy_dirs: tuple[Path, ...],
    include: str,
    exclude: str,
    **telemetry: Any,
) -> None:
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
    config = load_config_or_exit(config_path)
    rules, rule_errors = load_policy(config, policy_dirs, split_names(include), split_names(exclude))
    run = RunState()
    errors = [*config.warnings, *rule_errors]
    snapshot: dict[str, Any] = {}
    problem: str | None = None
    if snapshot_path is not None:
        snapshot = load_snapshot(
            snapshot_path=snapshot_path,
            kubeconfig=None,
            context=None,
            in_cluster=False,
            request_timeout=30.0,
            deadline=300.0,
        )
        problem = load_telemetry(snapshot, config, **telemetry)
        if problem:
            errors.append(InputError("telemetry", None, problem))
        run.evidence = live.evidence(snapshot)
        run.evidence_source = str(snapshot_path)
    if paths:
        inputs = read_fix_inputs(paths, config, rules)
    else:
        inputs = read_live(snapshot, str(snapshot_path), config, rules, problem)
    run.shared_names = inputs.shared_names(config)
    run.sharing_configs = sharing_configs(inputs.documents)
    errors += inputs.errors
    for e in errors:
        where = f"{e.file}:{e.line}" if e.line else e.file
        click.echo(f"gpuaudit: {where}: {e.message}", err=True)
    failed = any(e.level == "error" for e in errors)

    plan = plan_fixes(
        inputs.items,
        locators_for(config),
        Settings(site=dict(config.site), overrides=parse_settings(settings)),
        run,
        None if inputs.live else rechecker(config, rules, inputs),
    )
    if show_diff:
        _print_diff(plan, inputs)
        sys.exit(2 if failed else 0)

    assert out_dir is not None
    if out_dir.exists() and not out_dir.is_dir():
        click.echo(f"gpuaudit: {out_dir} is not a folder", err=True)
        sys.exit(2)
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        click.echo(f"gpuaudit: {out_dir} is not empty (use --force to write into it)", err=True)
        sys.exit(2)
    layout = overlay.layout(plan, out_dir)
    read = paths or (str(snapshot_path),)
    layout.files["REVIEW.md"] = review.render(plan, layout, str(out_dir), read, inputs.labels)
    try:
        _write(out_dir, layout, inputs.files)
    except (UnsafePathError, OSError) as exc:
        click.echo(f"gpuaudit: {exc}", err=True)
        sys.exit(2)
    skipped = len(plan.skipped)
    click.echo(
        f"wrote {out_dir}: {len(plan.changes)} patch(es) fixing {len(plan.fixed_findings)} "
        f"finding(s); {skipped} finding(s) without a patch (see REVIEW.md)"
    )
    click.echo(f"build it: {overlay.build_command(plan, str(out_dir))}")
    if check_build:
        ok = _verify(out_dir, plan, inputs, config, rules)
        if not ok:
            sys.exit(1)
    sys.exit(2 if failed else 0)


def _write(out_dir: Path, layout: overlay.Overlay, input_files: set[Path]) -> None:
    targets = {rel: inside(out_dir, rel) for rel in [*layout.files, *layout.copies]}
    clobbered = sorted(str(t) for t in targets.values() if t in input_files)
    if clobbered:
        raise UnsafePathError(f"refusing to overwrite input file(s): {', '.join(clobbered)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for rel, text in layout.files.items():
        write_atomic(targets[rel], text)
    for rel, source in layout.copies.items():
        write_atomic(targets[rel], source.read_bytes())


def _built_objects(directory: Path, plan: Plan) -> tuple[str, list[dict[str, Any]]]:
    text = kustomize.build(directory, load_restrictor_none=plan.load_restrictor_none)
    return text, [dict(d.obj) for d in read_paths(["-"], stdin_text=text).documents]


def _verify(out_dir: Path, plan: Plan, inputs: Inputs, config: Config, rules: list[Rule]) -> bool:
    try:
        text, built = _built_objects(out_dir, plan)
    except kustomize.KustomizeError as exc:
        click.echo(f"verify: the overlay does not build: {exc}", err=True)
        return False
    before = inputs.findings
    if inputs.live:  # judge the base as manifests too, so both sides ran the same rules
        base = "---\n".join(overlay.dump(o) for o in inputs.originals.values())
        before = check_manifests(["-"], config, rules, stdin_text=base).findings
    result = verify.verify(
        built,
        plan,
        inputs.originals,
        before,
        lambda: check_manifests(["-"], config, rules, stdin_text=text).findings,
    )
    click.echo(
        f"verify: built {len(built)} object(s); {len(result.fixed)} targeted finding(s) gone, "
        f"{len(result.remaining)} still there, {len(result.new)} new; "
        f"{len(result.differences)} unplanned difference(s)"
    )
    if inputs.live:  # rules judged on live state only: no manifest audit can show them
        scopes = {r.id: r.scope for r in rules}
        live_only = sorted({f.rule for f in result.fixed if "manifest" not in scopes.get(f.rule, ())})
        if live_only:
            click.echo(
                f"verify: {', '.join(live_only)} judged on live state only: the built objects cannot show "
                "them, the next audit of the cluster will"
            )
    for f in result.remaining:
        click.echo(f"  still there: {f.rule} {f.resource.kind}/{f.resource.name}", err=True)
    for f in result.new:
        click.echo(f"  new: {f.rule} {f.resource.kind}/{f.resource.name}: {f.message}", err=True)
    for line in result.differences:
        click.echo(f"  differs: {line}", err=True)
    return result.ok


def _print_diff(plan: Plan, inputs: Inputs) -> None:
    """Unified diffs of every patched object, as kustomize builds the overlay
    (or as gpuaudit computes it, when no kustomize is on PATH)."""
    rendered: dict[ObjectId, dict[str, Any]] = {}
    how = "kustomize"
    if kustomize.kustomize_command() is not None and plan.changes:
        with tempfile.TemporaryDirectory(prefix="gpuaudit-fix-") as tmp:
            root = Path(tmp) / "overlay"
            layout = overlay.layout(plan, root)
            try:
                _write(root, layout, set())
                _, built = _built_objects(root, plan)
                rendered = {object_id(o): o for o in built}
            except (kustomize.KustomizeError, UnsafePathError, OSError) as exc:
                click.echo(f"gpuaudit: kustomize could not build the overlay: {exc}", err=True)
                sys.exit(2)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    else:
        how = "computed (no kubectl or kustomize on PATH)"
        rendered = {k: after for k, (_, after) in plan.expected.items()}
        for change in plan.changes:
            rendered.update({object_id(o): o for o in change.new_objects})
    click.echo(f"# {len(plan.changes)} change(s); after = {how}", err=True)
    targets = [*plan.expected, *(object_id(o) for c in plan.changes for o in c.new_objects)]
    for oid in dict.fromkeys(targets):
        before = plan.expected[oid][0] if oid in plan.expected else None
        after = rendered.get(oid)
        name = f"{oid[1]}/{oid[2] + '/' if oid[2] else ''}{oid[3]}"
        old = overlay.dump(before, sort_keys=True).splitlines(keepends=True) if before else []
        new = overlay.dump(after, sort_keys=True).splitlines(keepends=True) if after else []
        click.echo("".join(difflib.unified_diff(old, new, f"a/{name}", f"b/{name}")), nl=False)

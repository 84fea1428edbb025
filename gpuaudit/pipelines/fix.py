"""The fix pipeline: findings -> a plan of patches -> a Kustomize overlay (with
--verify: built and audited again), or the rendered before/after (--diff).
Never edits its inputs; writes only inside the folder it is given."""

from __future__ import annotations

import difflib
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import yaml

from gpuaudit import folders
from gpuaudit.engine.evaluate import evaluate, site_inputs
from gpuaudit.engine.rules import Rule
from gpuaudit.facts.context import Site, build_context
from gpuaudit.files import UnsafePathError, WriteError, inside, make_folders, write_atomic
from gpuaudit.kube.shapes import ObjectId, object_id
from gpuaudit.model import Document, Finding, InputError
from gpuaudit.model.workload_builder import WorkloadMemo, build_workloads
from gpuaudit.pipelines import fix_live
from gpuaudit.pipelines.audit import audit_cluster
from gpuaudit.pipelines.check import check_manifests, manifest_subjects
from gpuaudit.pipelines.policy import locators_for
from gpuaudit.remediate import coherence, overlay, verify
from gpuaudit.remediate.plan import Plan, Settings, Source, describe_manifests, plan_fixes
from gpuaudit.remediate.planners.common import RunState
from gpuaudit.remediate.planners.sharing import sharing_configs
from gpuaudit.safetext import one_line
from gpuaudit.sources import kustomize
from gpuaudit.sources.inputs import InputOptions
from gpuaudit.sources.manifests import read_each, read_paths
from gpuaudit.sources.units import KUSTOMIZATION_FILES
from gpuaudit.sources.user_config import Config


class FixOptions(msgspec.Struct, frozen=True):
    """What `gpuaudit fix` fixes: manifest ``paths`` (none: the snapshot's
    cluster), the snapshot's name in the review, remediation parameters
    (--set), and whether kustomizations may read files outside their folder."""

    paths: tuple[str, ...] = ()
    snapshot_label: str = "snapshot"
    overrides: Mapping[str, Any] = msgspec.field(default_factory=dict)
    kustomize_load_anywhere: bool = False


def plan_fix(
    options: FixOptions,
    snapshot: dict[str, Any] | None,
    telemetry_problem: str | None,
    config: Config,
    rules: Sequence[Rule],
) -> tuple[Plan, Inputs]:
    """Findings in ``options.paths`` (or, without paths, in the snapshot's
    cluster) -> the plan of patches. A snapshot with paths sizes the patches
    from its pods' telemetry and GPU models."""
    paths, snapshot_label, overrides = options.paths, options.snapshot_label, options.overrides
    kustomize_load_anywhere = options.kustomize_load_anywhere
    if paths:
        inputs = read_fix_inputs(paths, config, rules, kustomize_load_anywhere=kustomize_load_anywhere)
    else:
        inputs = read_live(snapshot or {}, snapshot_label, config, rules, telemetry_problem)
    inputs.snapshot = snapshot
    run = run_state(inputs, config, snapshot, snapshot_label)
    memo = WorkloadMemo()  # the planner's passes and the rechecks ask about the same objects
    plan = plan_fixes(
        inputs.items,
        locators_for(config),
        Settings(site=dict(config.site), overrides=dict(overrides)),
        run,
        None if inputs.live else Rechecker(config, rules, inputs, memo),
        memo=memo,
    )
    return plan, inputs


def run_state(inputs: Inputs, config: Config, snapshot: Mapping[str, Any] | None = None, label: str = "") -> RunState:
    """What the planners know of the whole input: advertised `.shared` names,
    sharing configs, live evidence, and the coherence check's setting (serving
    runtimes, site platform, what the snapshot's nodes advertise)."""
    run = RunState()
    if snapshot is not None:
        run.evidence = fix_live.evidence(snapshot)
        run.evidence_source = label
        run.cluster = True
        run.telemetry_window = fix_live.telemetry_window(snapshot)
        run.gpu_node_labels = fix_live.gpu_node_labels(snapshot)
    run.shared_names = inputs.shared_names(config)
    # A live cluster's sharing configs, whether or not a finding names them.
    live_configs = fix_live.config_maps(snapshot) if snapshot is not None else []
    run.sharing_configs = sharing_configs([*inputs.documents, *live_configs])
    run.world = tuple(d.obj for d in inputs.documents)
    run.coherence = coherence.setting_for(locators_for(config), run.world, config.site, snapshot)
    run.platform = run.coherence.platform
    return run


class Inputs(msgspec.Struct):
    """What the fix run read: findings with their source, every object as
    read (for --verify and --diff), and problems with the input."""

    items: list[tuple[Finding, Source]] = msgspec.field(default_factory=list)
    findings: list[Finding] = msgspec.field(default_factory=list)
    originals: dict[ObjectId, dict[str, Any]] = msgspec.field(default_factory=dict)
    errors: list[InputError] = msgspec.field(default_factory=list)
    files: set[Path] = msgspec.field(default_factory=set)  # every input file, resolved
    labels: dict[int, str] = msgspec.field(default_factory=dict)  # id(document) -> display name
    documents: list[Document] = msgspec.field(default_factory=list)  # every object read
    bare: list[Document] = msgspec.field(default_factory=list)  # non-Kubernetes YAML (bare configs)

    live: bool = False  # read from a snapshot: the base is the cluster's objects
    snapshot: Mapping[str, Any] | None = None  # --snapshot FILE, read

    def shared_names(self, config: Config) -> frozenset[str] | None:
        """The `.shared` names the input's device-plugin configs (or the site) advertise."""
        site = Site.from_config(config.site)
        return build_context(site, self.documents, [], self.bare).shared_names


def read_fix_inputs(
    paths: Sequence[str], config: Config, rules: Sequence[Rule], *, kustomize_load_anywhere: bool = False
) -> Inputs:
    inputs = Inputs()
    plain: list[str] = []
    for path in paths:
        p = Path(path)
        if kustomize.is_package(p):
            _read_package(p, config, rules, inputs, kustomize_load_anywhere)
        else:
            plain.append(path)
    if plain:
        # Each file is parsed once: the check judges the documents read here.
        files = read_each(plain)
        documents = [d for _, read in files for d in read.documents]
        inputs.documents.extend(documents)
        inputs.bare.extend(d for _, read in files for d in read.bare)
        options = InputOptions(load_anywhere=kustomize_load_anywhere)
        result = check_manifests(plain, config, rules, options=options, read=dict(files))
        inputs.errors.extend(result.errors)
        sources: dict[str, Source] = {}
        for finding in result.findings:
            doc = finding.subject.document if finding.subject is not None else None
            file = doc.file if doc is not None else finding.location.file
            if file not in sources:
                sources[file] = _file_source(Path(file))
            inputs.items.append((finding, sources[file]))
            inputs.findings.append(finding)
        for doc in documents:
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
    inputs.items = fix_live.live_items(
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


def _read_package(path: Path, config: Config, rules: Sequence[Rule], inputs: Inputs, load_anywhere: bool) -> None:
    label = f"{path} (kustomize build)"
    try:
        text, unrestricted = kustomize.build_package(path, load_anywhere=load_anywhere)
    except kustomize.OutsideFileError as exc:
        inputs.errors.append(InputError(str(path), None, str(exc)))
        return
    except kustomize.KustomizeError as exc:
        inputs.errors.append(InputError(str(path), None, f"kustomize build failed: {exc}"))
        return
    ids, problem = describe_manifests(text)
    source = Source(label, path, "kustomize", ids, problem, unrestricted)
    read = read_paths(["-"], stdin_text=text)  # parsed once: the check judges these documents
    result = check_manifests(["-"], config, rules, read={"-": read})
    inputs.errors.extend(InputError(label, e.line, e.message, e.level) for e in result.errors if e.level == "error")
    for finding in result.findings:
        inputs.items.append((finding, source))
        inputs.findings.append(finding)
        if finding.subject is not None and finding.subject.document is not None:
            inputs.labels[id(finding.subject.document)] = label
    inputs.documents.extend(read.documents)
    inputs.bare.extend(read.bare)
    for doc in read.documents:
        inputs.originals[object_id(doc.obj)] = dict(doc.obj)
    inputs.files.update(path.resolve() / n for n in KUSTOMIZATION_FILES)


class Rechecker:
    """The rules asked again about objects as a plan patches them, each
    judged with what the rest of the input says (facts.context); the
    planner's Recheck (remediate/plan.py)."""

    def __init__(self, config: Config, rules: Sequence[Rule], inputs: Inputs, memo: WorkloadMemo | None = None):
        # ``memo``: the workloads of objects asked about before (the planner's passes).
        self._memo = memo or WorkloadMemo()
        self._config = config
        self._rules = list(rules)
        self._by_id = {r.id: r for r in rules}
        self._locators = locators_for(config)
        workloads, _ = build_workloads(inputs.documents, self._locators)
        self._context = build_context(Site.from_config(config.site), inputs.documents, workloads, inputs.bare)
        self._have = {"manifest", *site_inputs(config.site)}

    def _findings(self, rules: Sequence[Rule], obj: Mapping[str, Any]) -> list[Finding]:
        doc = Document(dict(obj), "", 1)
        patched, _ = self._memo.build(doc, self._locators)
        subjects = manifest_subjects([doc], patched, self._context)
        return evaluate(rules, subjects, inputs=self._have, exemptions=self._config.exemptions).findings

    def still_found(self, finding: Finding, obj: Mapping[str, Any]) -> bool:
        rule = self._by_id.get(finding.rule)
        if rule is None:
            return True
        keys = {verify.finding_key(f) for f in self._findings([rule], obj)}
        return verify.finding_key(finding) in keys

    def brought(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Finding]:
        had = {verify.finding_key(f) for f in self._findings(self._rules, before)}
        return [f for f in self._findings(self._rules, after) if verify.finding_key(f) not in had]


def write_overlay(out_dir: Path, layout: overlay.Overlay, input_files: set[Path]) -> None:
    """Write the overlay's files as the folder ``out_dir``, whole: into a new
    folder beside it, then swapped in by one rename, so that an interruption
    (SIGTERM, SIGHUP, Ctrl-C, a full disk) leaves either the folder as it was
    or the new overlay, never a mix of old and new patches that still builds.

    What the folder held besides the previous overlay is kept (hard links
    into the new folder): only the files the previous gpuaudit overlay wrote
    (its kustomization.yaml, REVIEW.md and the patches/, resources/ and base/
    files that kustomization lists) are replaced. Input files are never
    overwritten, nor dropped. When the folder holds the current directory,
    it is written in place instead (renaming it away would leave the shell
    that called gpuaudit in a deleted folder). When a write fails (an
    OSError naming the file), the new folder and the folders this call made
    are removed again; nothing that was there before is touched."""
    targets = {rel: inside(out_dir, rel) for rel in [*layout.files, *layout.copies]}
    clobbered = sorted(str(t) for t in targets.values() if t in input_files)
    if clobbered:
        raise UnsafePathError(f"refusing to overwrite input file(s): {', '.join(clobbered)}")
    target = out_dir.resolve()
    cwd = Path.cwd().resolve()
    if cwd == target or target in cwd.parents:
        _write_in_place(out_dir, layout, targets)
        return
    with folders.stopped_cleanly():
        _swap_in(out_dir, target, layout, input_files)


def _write_in_place(out_dir: Path, layout: overlay.Overlay, targets: Mapping[str, Path]) -> None:
    created: list[Path] = []  # what this call made, in order: undone in reverse on failure
    try:
        created += make_folders(out_dir)
        for rel, content in [*layout.files.items(), *layout.copies.items()]:
            target = targets[rel]
            created += make_folders(target.parent)
            new = not target.exists() and not target.is_symlink()
            write_atomic(target, content.read_bytes() if isinstance(content, Path) else content)
            if new:
                created.append(target)
    except BaseException:
        folders.undo(created)
        raise


def _swap_in(out_dir: Path, target: Path, layout: overlay.Overlay, input_files: set[Path]) -> None:
    created = make_folders(target.parent)
    staging: Path | None = None
    try:
        staging = folders.new_folder_beside(target)
        for rel, content in [*layout.files.items(), *layout.copies.items()]:
            data = content.read_bytes() if isinstance(content, Path) else content
            try:
                write_atomic(inside(staging, rel), data)
            except WriteError as exc:  # named as the file the user asked for
                reason = str(exc.strerror or "").replace(str(staging), str(out_dir))
                raise WriteError(exc.errno, reason, str(out_dir / rel)) from None
        if target.is_dir():
            folders.carry(target, staging, _previous_overlay(target) - input_files, _OVERLAY_FOLDERS)
        with folders.signals_held():
            old = folders.exchange(staging, target)
            staging, created = None, []
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        folders.undo(created)
        raise


# The previous overlay's own files: its kustomization.yaml names them.
_OVERLAY_FOLDERS = ("patches/", "resources/", "base/")  # a str.startswith tuple


def _previous_overlay(folder: Path) -> set[Path]:
    """The files an earlier `gpuaudit fix` wrote in ``folder``: what is
    replaced, not kept. Only a kustomization.yaml gpuaudit generated counts,
    and only the entries in its own folders."""
    from gpuaudit.files import FileReadError, read_text

    try:
        text = read_text(folder / "kustomization.yaml", limit=4 * 2**20, what="kustomization")
        data = yaml.safe_load(text) if text.startswith("# Generated by gpuaudit fix") else None
    except (FileReadError, yaml.YAMLError):
        data = None
    if not isinstance(data, dict):
        return set()  # the new overlay's kustomization.yaml and REVIEW.md replace theirs all the same
    found = {folder / "kustomization.yaml", folder / "REVIEW.md", folder / "NOT-REMEDIATED.md"}
    entries = [e for e in data.get("resources") or [] if isinstance(e, str)]
    entries += [e["path"] for e in data.get("patches") or [] if isinstance(e, dict) and isinstance(e.get("path"), str)]
    for entry in entries:
        if entry.startswith(_OVERLAY_FOLDERS) and ".." not in Path(entry).parts:
            found.add(folder / entry)
    return found


def built_objects(directory: Path, plan: Plan) -> tuple[str, list[dict[str, Any]]]:
    text = kustomize.build(directory, load_restrictor_none=plan.load_restrictor_none)
    return text, [dict(d.obj) for d in read_paths(["-"], stdin_text=text).documents]


class OverlayCheck(msgspec.Struct):
    """What `fix --verify` found: the overlay built (or why not), and what the
    rules say of the built objects."""

    problem: str | None = None  # the overlay does not build
    built: int = 0
    result: verify.Verification | None = None
    live_only: list[str] = msgspec.field(default_factory=list)  # fixed rules no manifest audit can show

    @property
    def ok(self) -> bool:
        return self.problem is None and self.result is not None and self.result.ok


def verify_overlay(
    out_dir: Path,
    plan: Plan,
    inputs: Inputs,
    config: Config,
    rules: Sequence[Rule],
    applied_first: Sequence[Mapping[str, Any]] = (),
) -> OverlayCheck:
    """Build the written overlay with kustomize and audit the result.
    ``applied_first``: objects another overlay adds or changes before this
    one is applied (fix --split-by: the sharing config its moves request)."""
    try:
        text, built = built_objects(out_dir, plan)
    except kustomize.KustomizeError as exc:
        return OverlayCheck(problem=str(exc))
    # The base is also judged as the build is, from text with no file of its
    # own: a live base has none, and a file's folder can decide what a
    # workload is for (facts/purpose.py: a pod that idles in examples/ is a
    # demo), which the built objects, read from kustomize's output, no longer
    # say. A finding either way was there before the overlay.
    ids = {i for s in plan.sources for i in s.ids}  # the objects this overlay holds
    base = "---\n".join(overlay.dump(o) for oid, o in inputs.originals.items() if oid in ids)
    as_text = check_manifests(["-"], config, rules, stdin_text=base).findings
    before = as_text if inputs.live else [*inputs.findings, *as_text]
    first = {object_id(o): o for o in applied_first}
    world = [first.pop(object_id(d.obj), d.obj) for d in inputs.documents] + list(first.values())
    result = verify.verify(
        built,
        plan,
        inputs.originals,
        before,
        lambda: check_manifests(["-"], config, rules, stdin_text=text).findings,
        coherence.setting_for(locators_for(config), world, config.site, inputs.snapshot),
        world,
    )
    live_only: list[str] = []
    if inputs.live:  # rules judged on live state only: no manifest audit can show them
        scopes = {r.id: r.scope for r in rules}
        live_only = sorted({f.rule for f in result.fixed if "manifest" not in scopes.get(f.rule, ())})
    return OverlayCheck(built=len(built), result=result, live_only=live_only)


class DiffError(Exception):
    """kustomize could not build the overlay that --diff renders."""


def rendered_diff(plan: Plan) -> tuple[str, str]:
    """Unified diffs of every patched object, as kustomize builds the overlay
    (or as gpuaudit computes it, when no kustomize is on PATH); and which of
    the two it is."""
    rendered: dict[ObjectId, dict[str, Any]] = {}
    how = "kustomize"
    if kustomize.kustomize_command() is not None and plan.changes:
        with tempfile.TemporaryDirectory(prefix="gpuaudit-fix-") as tmp:
            root = Path(tmp) / "overlay"
            layout = overlay.layout(plan, root)
            try:
                write_overlay(root, layout, set())
                _, built = built_objects(root, plan)
                rendered = {object_id(o): o for o in built}
            except (kustomize.KustomizeError, UnsafePathError, OSError) as exc:
                raise DiffError(f"kustomize could not build the overlay: {exc}") from exc
            finally:
                shutil.rmtree(root, ignore_errors=True)
    else:
        how = "computed (no kubectl or kustomize on PATH)"
        rendered = {k: after for k, (_, after) in plan.expected.items()}
        for change in plan.changes:
            rendered.update({object_id(o): o for o in change.new_objects})
    targets = [*plan.expected, *(object_id(o) for c in plan.changes for o in c.new_objects)]
    chunks = []
    for oid in dict.fromkeys(targets):
        before = plan.expected[oid][0] if oid in plan.expected else None
        after = rendered.get(oid)
        # The header quotes object names: one line, no terminal control.
        name = one_line(f"{oid[1]}/{oid[2] + '/' if oid[2] else ''}{oid[3]}")
        old = overlay.dump(before, sort_keys=True).splitlines(keepends=True) if before else []
        new = overlay.dump(after, sort_keys=True).splitlines(keepends=True) if after else []
        chunks.append("".join(difflib.unified_diff(old, new, f"a/{name}", f"b/{name}")))
    return "".join(chunks), how

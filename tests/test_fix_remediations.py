"""Every remediation, proven with a real kustomize: `gpuaudit fix` writes an
overlay for one rule's findings; kubectl kustomize builds it; auditing the
build with every rule shows the targeted findings gone and none new; and the
object differs from the input only where the case says. A case may instead
expect the remediation to decline, for the reason REVIEW.md gives. The cases
sit with each remediation's templates (remediations/<id>/cases.yaml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuaudit.bundled import remediations_dir
from gpuaudit.pipelines.check import check_manifests
from gpuaudit.pipelines.policy import load_policy
from gpuaudit.remediate.review import md
from gpuaudit.sources.manifests import read_paths
from gpuaudit.sources.user_config import load_config

ROOT = Path(__file__).resolve().parents[1]


def load_cases() -> list[dict]:
    """The cases of every remediation, each with its id: the folder's name."""
    cases = []
    for path in sorted(remediations_dir().glob("*/cases.yaml")):
        cases += [{**case, "remediation": path.parent.name} for case in yaml.safe_load(path.read_text())]
    return cases


CASES = load_cases()
ANNOTATION = "gpuaudit.io/remediated"


@pytest.fixture
def kubectl(monkeypatch):
    """Real kubectl (embedded kustomize) from .tools/bin, on PATH for the CLI too."""
    tools = ROOT / ".tools" / "bin"
    monkeypatch.setenv("PATH", f"{tools}:{__import__('os').environ.get('PATH', '')}")
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl is not installed (scripts/install-kube-tools.py)")
    return found


def build(kubectl: str, overlay: Path) -> str:
    proc = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def key(finding) -> tuple:
    """Rule, object, container and the judged subject's pointer."""
    r = finding.resource
    return (finding.rule, r.kind, r.namespace, r.name, r.container, finding.subject.facts["pointer"])


def leaf_changes(before, after, path=""):
    """Pointers of every leaf that differs (lists compared by index)."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for k in sorted({*before, *after}, key=str):
            child = f"{path}/{str(k).replace('~', '~0').replace('/', '~1')}"
            if k not in before or k not in after:
                out.append(child)
            else:
                out.extend(leaf_changes(before[k], after[k], child))
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        pairs = enumerate(zip(before, after, strict=True))
        return [p for i, (a, b) in pairs for p in leaf_changes(a, b, f"{path}/{i}")]
    return [] if before == after else [path]


def identity(obj) -> tuple:
    meta = obj.get("metadata") or {}
    return (obj.get("kind"), meta.get("namespace"), meta.get("name"))


def not_remediated(review: str, rules: list[str]) -> list[str]:
    """The rows of REVIEW.md's "Not remediated" table for these rules."""
    table = review.partition("## Not remediated")[2]
    return [row for row in table.splitlines() if any(row.startswith(f"| {rule} |") for rule in rules)]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['remediation']}: {c['name']}" for c in CASES])
def test_remediation_builds_and_fixes_only_its_finding(case, tmp_path, run_cli, kubectl):
    manifest = tmp_path / "app.yaml"
    manifest.write_text(case["manifest"])
    config_file = tmp_path / ".gpuaudit.yaml"
    config_file.write_text(yaml.safe_dump({"site": case.get("site") or {}}))
    policies = [str(ROOT / p) for p in case.get("policies", [])]
    out = tmp_path / "overlay"
    args = ["fix", str(manifest), "--out", str(out), "--config", str(config_file)]
    args += ["--rules", ",".join(case["rules"])]
    for p in policies:
        args += ["--policies", p]
    for s in case.get("set", []):
        args += ["--set", s]
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    patches = sorted((out / "patches").glob("*.yaml"))
    if "silent" in case:  # the rule judges the effective spec and finds nothing to fix
        assert patches == [], [p.name for p in patches]
        assert not_remediated((out / "REVIEW.md").read_text(), case["rules"]) == []
        return
    if "declines" in case:
        assert patches == [], [p.name for p in patches]
        rows = not_remediated((out / "REVIEW.md").read_text(), case["rules"])
        assert rows, "the case should trigger its rule"
        assert [row for row in rows if md(case["declines"]) not in row] == []
        return
    assert len(patches) == 1, [p.name for p in patches]
    assert case["remediation"] in patches[0].name
    patch = yaml.safe_load(patches[0].read_text())
    assert ("json6902" if isinstance(patch, list) else "strategic-merge") == case["format"]

    config = load_config(config_file)
    rules, errors = load_policy(config, [Path(p) for p in policies])
    assert not [e for e in errors if e.level == "error"]
    before = check_manifests([str(manifest)], config, rules)
    built = build(kubectl, out)
    after = check_manifests(["-"], config, rules, stdin_text=built)

    targeted = [f for f in before.findings if f.rule in case["rules"]]
    assert targeted, "the case should trigger its rule"
    after_keys = {key(f) for f in after.findings}
    assert not [f.message for f in targeted if key(f) in after_keys]
    before_keys = {key(f) for f in before.findings}
    assert [f.message for f in after.findings if key(f) not in before_keys] == []

    originals = {identity(d.obj): d.obj for d in read_paths([str(manifest)]).documents}
    results = {identity(d.obj): d.obj for d in read_paths(["-"], stdin_text=built).documents}
    new_objects = {f"{k[0]} {k[2]}" for k in results if k not in originals}
    assert new_objects == set(case.get("new", []))
    changed_objects = 0
    for ident, original in originals.items():
        result = results[ident]
        paths = leaf_changes(original, result)
        if not paths:
            continue
        changed_objects += 1
        allowed = [*case["changed"], "/metadata/annotations"]
        assert [p for p in paths if not any(p.startswith(a) for a in allowed)] == []
        for prefix in case["changed"]:
            assert any(p.startswith(prefix) for p in paths), f"{prefix} did not change"
        assert set(result["metadata"]["annotations"][ANNOTATION].split(",")) == set(case["rules"])
    assert changed_objects == 1

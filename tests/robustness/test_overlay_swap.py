"""`fix --force` over an earlier overlay, interrupted by a real SIGTERM half
way through: the folder is wholly the old overlay or wholly the new one,
never a mix that still builds (issue 32, item 9). The overlay is written
into a temporary folder beside the target and swapped in whole.

Writing is made slow deterministically: the `gpuaudit` process runs through a
small wrapper that sleeps after each file the fix pipeline writes and says so
on stdout, and the test sends SIGTERM after the Nth file.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.robustness.processes import gpuaudit

FIXABLE = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: ml}}
spec:
  template:
    spec:
      nodeSelector: {{kubernetes.io/hostname: gpu-node-07}}
      containers:
      - name: main
        image: vllm:1
        resources:
          requests: {{cpu: "1", memory: 8Gi}}
          limits: {{nvidia.com/gpu: 8}}
"""

# The fix CLI, with every file the pipeline writes followed by a pause and a
# line on stdout ("wrote N").
SLOW = """
import sys, time
import gpuaudit.pipelines.fix as fix
real = fix.write_atomic
count = 0
def slow(path, data):
    global count
    real(path, data)
    count += 1
    print(f"wrote {count}", flush=True)
    time.sleep(0.2)
fix.write_atomic = slow
from gpuaudit.cli.main import main
sys.argv = ["gpuaudit", *sys.argv[1:]]
sys.exit(main())
"""


def manifests(prefix: str, count: int = 8) -> str:
    return "---\n".join(FIXABLE.format(name=f"{prefix}-{i}") for i in range(count))


def tree(root: Path) -> dict[str, bytes | str]:
    """Every file (content) and folder ("dir") below ``root``."""
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = "dir" if path.is_dir() else path.read_bytes()
    return out


def restore(root: Path, state: dict[str, bytes | str]) -> None:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    for rel, content in state.items():
        if content == "dir":
            (root / rel).mkdir(parents=True, exist_ok=True)
        else:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(content)  # type: ignore[arg-type]


@pytest.fixture
def overlays(tmp_path: Path):
    """The old overlay (fixes of old-*, plus a file of the user's), the new
    one a complete `fix --force` writes (fixes of new-*), and the folder."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.yaml").write_text(manifests("old"))
    run = gpuaudit("fix", "app.yaml", "--out", "overlay", cwd=work)
    assert run.code == 0, run.stderr
    out = work / "overlay"
    (out / "NOTES.md").write_text("the user's own notes\n")
    old = tree(out)
    (work / "app.yaml").write_text(manifests("new"))
    run = gpuaudit("fix", "app.yaml", "--out", "overlay", "--force", cwd=work)
    assert run.code == 0, run.stderr
    new = tree(out)
    assert old != new
    assert new["NOTES.md"] == b"the user's own notes\n"  # kept: not the overlay's
    # the old overlay's patches are gone, not left beside the new ones
    assert not any(rel.startswith("patches/") and "old-" in rel for rel in new)
    restore(out, old)
    return work, out, old, new


def interrupted(work: Path, after: int) -> int:
    """Run `fix --force` and send SIGTERM once ``after`` files are written."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW, "fix", "app.yaml", "--out", "overlay", "--force"],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == f"wrote {after}":
            proc.send_signal(signal.SIGTERM)
            break
    proc.communicate(timeout=60)
    return proc.returncode


@pytest.mark.parametrize("after", [1, 4, 9])
def test_sigterm_during_fix_force_leaves_the_old_or_the_new_overlay(overlays, after):
    work, out, old, new = overlays
    code = interrupted(work, after)
    assert code != 0  # it was stopped, and says so by its exit status
    state = tree(out)
    changed = {rel for rel in set(old) | set(new) if old.get(rel) != new.get(rel)}
    of_old = sorted(rel for rel in changed if rel in state and state[rel] == old.get(rel))
    of_new = sorted(rel for rel in changed if rel in state and state[rel] == new.get(rel))
    assert state in (old, new), (
        f"neither the old nor the new overlay: {len(of_old)} file(s) of the old one ({of_old[:2]}) "
        f"beside {len(of_new)} of the new one ({of_new[:2]})"
    )
    # the temporary folder beside it is gone too (SIGTERM is handled, not fatal)
    assert sorted(p.name for p in work.iterdir()) == ["app.yaml", "overlay"]


def test_an_uninterrupted_fix_force_swaps_in_the_new_overlay_whole(overlays):
    work, out, _old, new = overlays
    code = interrupted(work, after=10**6)  # never interrupted
    assert code == 0
    assert tree(out) == new
    assert sorted(p.name for p in work.iterdir()) == ["app.yaml", "overlay"]


def _generated(patches: list[str], resources: list[str]) -> dict[str, str]:
    kustomization = "# Generated by gpuaudit fix: test\n" + yaml.safe_dump(
        {"resources": resources, "patches": [{"path": p} for p in patches]}
    )
    files = {"kustomization.yaml": kustomization, "REVIEW.md": "review\n"}
    files.update({p: f"{p}\n" for p in [*patches, *resources]})
    return files


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two renames"])
def test_the_swap_keeps_what_is_not_the_previous_overlay(tmp_path, monkeypatch, exchange):
    """Replaced: the files the previous overlay's kustomization.yaml lists
    (and it, and REVIEW.md). Kept: the user's files beside them, in the
    overlay's folders too, symlinks as symlinks, empty folders, the folder's
    mode; input files. The same without the kernel's atomic exchange."""
    from gpuaudit import folders
    from gpuaudit.pipelines import fix
    from gpuaudit.remediate.overlay import Overlay

    if not exchange:
        monkeypatch.setattr(folders, "_rename_exchange", lambda a, b: False)
    out = tmp_path / "overlay"
    fix.write_overlay(out, Overlay(files=_generated(["patches/01-a.yaml"], ["base/old.yaml"])), set())
    (out / "patches" / "mine.yaml").write_text("mine\n")
    (out / "notes").mkdir()
    (out / "empty").mkdir()
    (out / "notes" / "n.txt").write_text("n\n")
    (out / "link").symlink_to("notes/n.txt")
    (out / "input.yaml").write_text("input\n")
    os.chmod(out, 0o750)

    fix.write_overlay(
        out, Overlay(files=_generated(["patches/01-b.yaml"], ["base/new.yaml"])), {(out / "input.yaml").resolve()}
    )

    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "REVIEW.md",
        "base",
        "base/new.yaml",
        "empty",
        "input.yaml",
        "kustomization.yaml",
        "link",
        "notes",
        "notes/n.txt",
        "patches",
        "patches/01-b.yaml",
        "patches/mine.yaml",
    ]
    assert os.readlink(out / "link") == "notes/n.txt"
    assert (out / "patches" / "mine.yaml").read_text() == "mine\n"
    assert os.stat(out).st_mode & 0o777 == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["overlay"]  # nothing left beside it

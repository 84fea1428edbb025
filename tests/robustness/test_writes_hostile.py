"""Writing output where writing fails: a file-size limit (RLIMIT_FSIZE, as
`ulimit -f` sets it), a read-only folder, a file where a folder belongs. Each
is a message naming the file and exit 2, never a traceback; what can still
be reported is; `fix` takes back the folders it made. And every file is
written with the mode the umask gives (0644 under 022), not 0600.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"
MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer, namespace: ml}
spec:
  template:
    spec:
      containers:
      - name: c
        image: cuda:12
        resources:
          requests: {cpu: "500m"}
          limits: {nvidia.com/gpu: 1}
"""
LIMIT = 2048  # bytes: more than any message, less than any SARIF or overlay


def gpuaudit(*args: str, cwd: Path, limit: int | None = None, umask: int | None = None):
    exe = shutil.which("gpuaudit") or str(Path(sys.executable).with_name("gpuaudit"))

    def before() -> None:  # in the child, before exec
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        if umask is not None:
            os.umask(umask)

    return subprocess.run(
        [exe, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        preexec_fn=before,
        check=False,
    )


def no_crash(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "app.yaml").write_text(MANIFEST)
    return tmp_path


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# --- check -o, --format NAME=FILE, --write-baseline ------------------------------------


def test_a_file_size_limit_on_o_is_a_message_and_stdout_still_gets_its_format(work):
    proc = gpuaudit("check", "app.yaml", "--format", "text", "--format", "sarif=out.sarif", cwd=work, limit=LIMIT)
    no_crash(proc)
    assert proc.returncode == 2
    assert "gpuaudit: cannot write out.sarif: File too large" in proc.stderr
    assert "Deployment ml/trainer" in proc.stdout  # the text still went out
    assert not (work / "out.sarif").exists() and _leftovers(work) == []  # no half file, no temporary


def test_every_format_that_fits_is_written_and_every_failure_named(work):
    proc = gpuaudit(
        "check",
        "app.yaml",
        "--format",
        "sarif=big.sarif",
        "--format",
        "junit=big.xml",
        "--format",
        "json",
        "--output-file",
        "out.json",
        cwd=work,
        limit=LIMIT,
    )
    no_crash(proc)
    assert proc.returncode == 2
    for name in ("big.sarif", "big.xml", "out.json"):
        assert f"cannot write {name}: File too large" in proc.stderr


def test_write_baseline_past_the_limit_is_a_message_and_the_output_still_goes_out(work):
    (work / "old.json").write_text("x" * 100)
    many = "---\n".join(MANIFEST.replace("trainer", f"trainer-{i}") for i in range(40))
    (work / "app.yaml").write_text(many)
    proc = gpuaudit("check", "app.yaml", "--write-baseline", "base.json", cwd=work, limit=LIMIT)
    no_crash(proc)
    assert proc.returncode == 2
    assert "gpuaudit: cannot write base.json: File too large" in proc.stderr
    assert "recorded" not in proc.stderr
    assert "Deployment ml/trainer-39" in proc.stdout
    assert not (work / "base.json").exists() and _leftovers(work) == []


@pytest.mark.parametrize("option", ["--output-file", "--write-baseline"])
def test_a_file_where_a_folder_belongs_is_named(work, option):
    (work / "somefile").write_text("keep\n")
    args = ["--format", "sarif", "--output-file", "somefile/deeper/out.sarif"] if option == "--output-file" else []
    if option == "--write-baseline":
        args = ["--write-baseline", "somefile/base.json"]
    proc = gpuaudit("check", "app.yaml", *args, cwd=work)
    no_crash(proc)
    assert proc.returncode == 2
    assert "somefile is not a folder" in proc.stderr
    assert (work / "somefile").read_text() == "keep\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_named(work):
    locked = work / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        proc = gpuaudit("check", "app.yaml", "--format", "json", "--output-file", "locked/out.json", cwd=work)
        deeper = gpuaudit("check", "app.yaml", "--format", "json", "--output-file", "locked/a/out.json", cwd=work)
    finally:
        locked.chmod(0o755)
    for p in (proc, deeper):
        no_crash(p)
        assert p.returncode == 2
    assert "cannot write locked/out.json: Permission denied" in proc.stderr
    assert "cannot write locked/a/out.json: cannot make the folder locked/a: Permission denied" in deeper.stderr


# --- fix ---------------------------------------------------------------------------------


def test_fix_past_the_limit_names_the_file_and_removes_the_folders_it_made(work):
    proc = gpuaudit("fix", "app.yaml", "--out", "new/deeper/overlay", cwd=work, limit=LIMIT)
    no_crash(proc)
    assert proc.returncode == 2
    assert "cannot write" in proc.stderr and "File too large" in proc.stderr
    assert "new/deeper/overlay/" in proc.stderr  # names the file it could not write
    assert sorted(p.name for p in work.iterdir()) == ["app.yaml"]  # new/ and all below it: gone


def test_fix_never_removes_what_was_there_before(work):
    out = work / "overlay"
    (out / "patches").mkdir(parents=True)
    (out / "patches" / "mine.yaml").write_text("mine\n")
    (out / "notes.txt").write_text("notes\n")
    proc = gpuaudit("fix", "app.yaml", "--out", "overlay", "--force", cwd=work, limit=LIMIT)
    no_crash(proc)
    assert proc.returncode == 2 and "File too large" in proc.stderr
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert left == ["notes.txt", "patches", "patches/mine.yaml"]

    empty = work / "empty"
    empty.mkdir()
    proc = gpuaudit("fix", "app.yaml", "--out", "empty", cwd=work, limit=LIMIT)
    assert proc.returncode == 2 and empty.is_dir() and list(empty.iterdir()) == []


def test_fix_out_below_a_file_is_named(work):
    (work / "somefile").write_text("keep\n")
    proc = gpuaudit("fix", "app.yaml", "--out", "somefile/overlay", cwd=work)
    no_crash(proc)
    assert proc.returncode == 2 and "somefile is not a folder" in proc.stderr
    assert (work / "somefile").read_text() == "keep\n"


# --- report ------------------------------------------------------------------------------


def test_report_past_the_limit_is_a_message_naming_the_file(work):
    proc = gpuaudit("report", "--snapshot", str(DEMO), "--out", "out", "--no-record", cwd=work, limit=LIMIT)
    no_crash(proc)
    assert proc.returncode == 2
    assert "cannot write" in proc.stderr and "report.html: File too large" in proc.stderr


# --- modes -------------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_every_file_written_follows_the_umask(work, umask, mode):
    files = []
    proc = gpuaudit(
        "check",
        "app.yaml",
        "--format",
        "sarif",
        "--output-file",
        "out.sarif",
        "--write-baseline",
        "base.json",
        cwd=work,
        umask=umask,
    )
    assert proc.returncode == 0, proc.stderr
    files += [work / "out.sarif", work / "base.json"]
    proc = gpuaudit("fix", "app.yaml", "--out", "overlay", cwd=work, umask=umask)
    assert proc.returncode == 0, proc.stderr
    files += [p for p in (work / "overlay").rglob("*") if p.is_file()]
    proc = gpuaudit(
        "audit",
        "--snapshot",
        str(DEMO),
        "--save-snapshot",
        "snap.json.gz",
        "--format",
        "json",
        "--output-file",
        "audit.json",
        cwd=work,
        umask=umask,
    )
    assert proc.returncode in (0, 1), proc.stderr
    files += [work / "snap.json.gz", work / "audit.json"]
    proc = gpuaudit("report", "--snapshot", str(DEMO), "--out", "review", cwd=work, umask=umask)
    assert proc.returncode == 0, proc.stderr
    files += [work / "review" / n for n in ("report.html", "report.md", "report.json", "history.sqlite")]
    assert json.loads((work / "review" / "report.json").read_text())
    assert {str(p.relative_to(work)): oct(_mode(p)) for p in files} == {
        str(p.relative_to(work)): oct(mode) for p in files
    }


def test_a_fifo_or_device_at_the_output_path_is_written_to_never_replaced(tmp_path):
    """`--output-file /dev/null` must not turn /dev/null into a regular file
    (the atomic rename would, and as root for the whole machine). Shown on a
    FIFO, which is safe to make here: the data goes through it and it stays a FIFO."""
    import threading

    from gpuaudit.files import write_atomic

    pipe = tmp_path / "out.fifo"
    os.mkfifo(pipe)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_bytes()))
    reader.start()
    write_atomic(pipe, "report\n")
    reader.join(timeout=10)
    assert received == [b"report\n"]
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["out.fifo"]  # no temporary file left

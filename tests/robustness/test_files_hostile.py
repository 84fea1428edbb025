"""Files that are not what they claim, for every file gpuaudit opens: FIFOs,
devices (`/dev/zero`, `/dev/stdin`), sparse files far past a limit. Each is
refused before it is read (or waited on) with a message naming it; the run
exits 2 and still reports what it could.

The one reader is `gpuaudit/files.py`; its own behaviour is tested first,
then every file option through the installed `gpuaudit` (with a timeout, and
stdin a pipe that never ends: see tests/robustness/processes.py).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuaudit import files
from gpuaudit.files import FileReadError, iter_lines, read_bytes, read_text
from tests.robustness.hostile import PINNED
from tests.robustness.processes import DEMO, GIB, SITE_RULE, fifo, gpuaudit, link, sparse

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")

NOT_REGULAR = "not a regular file, not read"

CASES = "- {name: one, expect: pass, facts: {cpu_request: 1}}\n"
SAMPLES = '{"kind": "header", "version": 1, "ts": 1700000000, "node": "n1", "interval_s": 10}\n' + "".join(
    json.dumps(
        {
            "kind": "gpu",
            "ts": 1700000000 + 10 * i,
            "node": "n1",
            "gpu": "0",
            "uuid": "GPU-0",
            "util_gpu_pct": 2,
            "fb_used_bytes": 2 * GIB,
            "fb_total_bytes": 80 * GIB,
            "processes": [],
        }
    )
    + "\n"
    for i in range(6)
)


# --- the reader ------------------------------------------------------------------------


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    with pytest.raises(FileReadError, match=NOT_REGULAR) as info:
        read_bytes(fifo(tmp_path / "pipe"), limit=100)
    assert info.value.path == str(tmp_path / "pipe") and info.value.line is None


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null", "/dev/stdin", "/dev/tty"])
def test_devices_are_refused_before_a_byte_is_read(tmp_path, device):
    if not os.path.exists(device):
        pytest.skip(f"no {device} here")
    with pytest.raises(FileReadError) as info:
        read_bytes(link(tmp_path / "dev.yaml", device), limit=100)
    assert info.value.problem == NOT_REGULAR or info.value.problem.startswith("cannot read: ")


def test_a_file_swapped_for_a_fifo_after_the_check_is_refused_by_the_open_descriptor(tmp_path, monkeypatch):
    """The path is stat-ed, then opened: what counts is the fstat of what was
    opened, so a FIFO swapped in between is still refused (and not waited on)."""
    regular = tmp_path / "regular.yaml"
    regular.write_text("a: 1\n")
    pipe = fifo(tmp_path / "pipe.yaml")
    real_stat = os.stat
    monkeypatch.setattr(files.os, "stat", lambda p, *a, **k: real_stat(regular if str(p) == str(pipe) else p, *a, **k))
    with pytest.raises(FileReadError, match=NOT_REGULAR):
        read_bytes(pipe, limit=100)


def test_a_size_over_the_limit_is_refused_from_the_file_system_without_reading(tmp_path):
    big = sparse(tmp_path / "big", 5 * GIB)
    with pytest.raises(FileReadError) as info:
        read_bytes(big, limit=1024, what="config file")
    assert info.value.problem == f"config file is {5 * GIB:,} bytes; the limit is 1,024 bytes"


def test_a_file_longer_than_it_says_is_read_only_to_the_limit():
    """/proc files report size 0 and have content: the reader reads at most
    limit + 1 bytes, so a file that grows (or lies) is refused as well."""
    with pytest.raises(FileReadError, match="file is more than 10 bytes; the limit is 10 bytes"):
        read_bytes("/proc/self/status", limit=10)


def test_text_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(FileReadError) as info:
        read_text(path, limit=100)
    assert str(info.value) == f"{path}:2: not valid UTF-8 text"
    path.write_bytes(b"\xef\xbb\xbfa: 1\n")  # a byte-order mark is no problem
    assert read_text(path, limit=100) == "a: 1\n"


def test_missing_and_unreadable_files_say_why(tmp_path):
    with pytest.raises(FileReadError, match="cannot read: No such file or directory"):
        read_bytes(tmp_path / "missing", limit=10)
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(FileReadError, match=NOT_REGULAR):
        read_bytes(folder, limit=10)


def test_gzip_is_inflated_only_up_to_the_limit(tmp_path):
    bomb = tmp_path / "bomb.gz"
    bomb.write_bytes(gzip.compress(b"\0" * (64 << 20)))  # 64 KiB -> 64 MiB
    assert bomb.stat().st_size < 100_000
    with pytest.raises(FileReadError) as info:
        read_bytes(bomb, limit=1 << 20, what="snapshot", gunzip=True)
    assert info.value.problem == ("snapshot inflates to more than 1,048,576 bytes; the limit is 1,048,576 bytes")
    small = tmp_path / "small.gz"
    small.write_bytes(gzip.compress(b"hello"))
    assert read_bytes(small, limit=100, gunzip=True) == b"hello"
    assert read_bytes(small, limit=100) == small.read_bytes()  # no gunzip: the bytes as they are
    small.write_bytes(gzip.compress(b"hello")[:-6])
    with pytest.raises(FileReadError, match="corrupt gzip data"):
        read_bytes(small, limit=100, gunzip=True)


def test_lines_are_streamed_and_each_is_bounded(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b"one\n\ntwo\n" + b"x" * 100 + b"\nthree")
    got: list[tuple[int, bytes]] = []
    with pytest.raises(FileReadError) as info:
        got.extend(iter_lines(path, limit=1000, line_limit=50))
    assert got == [(1, b"one\n"), (2, b"\n"), (3, b"two\n")]
    assert info.value.line == 4 and "line longer than 50 bytes" in info.value.problem
    path.write_bytes(b"one\ntorn")  # a last line without its newline is still a line
    assert list(iter_lines(path, limit=1000, line_limit=50)) == [(1, b"one\n"), (2, b"torn")]
    with pytest.raises(FileReadError, match=NOT_REGULAR):
        list(iter_lines(fifo(tmp_path / "pipe"), limit=1000, line_limit=50))


# --- every file option, through the real process ----------------------------------------

# What each kind of hostile entry is: made at a path the test names.
KINDS: dict[str, Callable[[Path], Path]] = {
    "fifo": fifo,
    "dev-zero": lambda p: link(p, "/dev/zero"),
    "dev-stdin": lambda p: link(p, "/dev/stdin"),  # stdin is a pipe that never ends
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "pinned.yaml").write_text(PINNED)
    (tmp_path / "samples.jsonl").write_text(SAMPLES)
    return tmp_path


def _check_said(run, name: str, code: int = 2) -> None:
    assert run.code == code, (run.code, run.stderr)
    assert name in run.stderr and NOT_REGULAR in run.stderr, run.stderr


# option -> (file name, arguments with {bad}, where the message goes)
OPTIONS = {
    "--config": ("config.yaml", ["check", "--config", "{bad}", "pinned.yaml"]),
    ".gpuaudit.yaml": (".gpuaudit.yaml", ["check", "pinned.yaml"]),
    "--baseline": ("baseline.json", ["check", "pinned.yaml", "--baseline", "{bad}"]),
    "--snapshot": ("snap.json.gz", ["audit", "--snapshot", "{bad}"]),
    "sample --aggregate": ("s.jsonl", ["sample", "--aggregate", "{bad}"]),
    "sample --pods": ("pods.json", ["sample", "--aggregate", "samples.jsonl", "--pods", "{bad}"]),
    "rules validate": ("rule.yaml", ["rules", "validate", "{bad}"]),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("option", OPTIONS)
def test_a_file_option_naming_a_fifo_or_device_is_refused_and_named(repo, option, kind):
    name, args = OPTIONS[option]
    bad = KINDS[kind](repo / name)
    run = gpuaudit(*(a.replace("{bad}", str(bad)) for a in args), cwd=repo)
    _check_said(run, name)


TELEMETRY_FILES = {
    "--samples": ["--samples", "{bad}"],
    "--prometheus-token-file": ["--prometheus", "http://127.0.0.1:9", "--prometheus-token-file", "{bad}"],
    "--prometheus-ca": ["--prometheus", "https://127.0.0.1:9", "--prometheus-ca", "{bad}"],
}


@pytest.mark.parametrize("kind", ["fifo", "dev-stdin"])
@pytest.mark.parametrize("option", TELEMETRY_FILES)
def test_a_telemetry_file_that_is_no_file_leaves_the_cluster_audit_standing(repo, option, kind):
    """Telemetry that cannot be read is a partial audit: exit 2, the reason
    names the file, the cluster findings are reported."""
    bad = KINDS[kind](repo / "telemetry-file")
    args = [a.replace("{bad}", str(bad)) for a in TELEMETRY_FILES[option]]
    run = gpuaudit("audit", "--snapshot", str(DEMO), *args, "--format", "json", cwd=repo)
    assert run.code == 2, run.stderr
    report = run.report()
    [problem] = [e for e in report["errors"] if e["file"] == "telemetry"]
    assert str(bad) in problem["message"] and NOT_REGULAR in problem["message"]
    assert report["findings"], "the cluster is still audited"


@pytest.mark.parametrize("kind", KINDS)
def test_a_rule_folder_of_fifos_and_devices_is_named_file_by_file(repo, kind):
    site = repo / "site"
    site.mkdir()
    (site / "good.yaml").write_text(SITE_RULE)
    KINDS[kind](site / "bad.yaml")
    KINDS[kind](site / "good.cases.yaml")
    run = gpuaudit("check", "pinned.yaml", "--policies", "site", "--format", "json", cwd=repo)
    assert run.code == 2
    report = run.report()
    assert [(Path(e["file"]).name, e["message"]) for e in report["errors"]] == [("bad.yaml", NOT_REGULAR)]
    assert "GPA-PL-001" in {f["rule"] for f in report["findings"]}

    validate = gpuaudit("rules", "validate", "site", cwd=repo)
    assert validate.code == 2
    assert f"bad.yaml: {NOT_REGULAR}" in validate.stderr
    assert f"good.cases.yaml: {NOT_REGULAR}" in validate.stderr

    tested = gpuaudit("rules", "test", "site", cwd=repo)
    assert tested.code == 1  # `rules test` says 1 for a rule or case it cannot run
    assert f"bad.yaml: {NOT_REGULAR}" in tested.stdout
    assert f"good.cases.yaml: {NOT_REGULAR}" in tested.stdout


def test_a_repository_config_pointing_at_devices_cannot_hang_or_exhaust_check(repo):
    """Item 4 of the hostile review: `gpuaudit check .` in a repository whose
    .gpuaudit.yaml names a policies folder of links to /dev/zero and
    /dev/stdin (stdin a pipe that never ends) and a FIFO. Under a 1 GiB
    address-space limit and a timeout."""
    policies = repo / "policies"
    policies.mkdir()
    link(policies / "zero.yaml", "/dev/zero")
    link(policies / "stdin.yaml", "/dev/stdin")
    fifo(policies / "fifo.yaml")
    (repo / ".gpuaudit.yaml").write_text("policies: [policies]\n")
    run = gpuaudit("check", ".", "--format", "json", cwd=repo, memory=GIB, timeout=60)
    assert run.code == 2
    report = run.report()
    named = {(Path(e["file"]).name, e["message"]) for e in report["errors"]}
    assert named == {(n, NOT_REGULAR) for n in ("zero.yaml", "stdin.yaml", "fifo.yaml")}
    assert "GPA-PL-001" in {f["rule"] for f in report["findings"]}


# option -> (file name, size, arguments, the limit in the message)
SIZES = {
    ".gpuaudit.yaml": (".gpuaudit.yaml", 1536 * 1024**2, ["check", "pinned.yaml"], "config file is", 4 << 20),
    "--baseline": ("b.json", 100 << 20, ["check", "pinned.yaml", "--baseline", "{bad}"], "baseline is", 64 << 20),
    "--snapshot": ("s.json", 1536 * 1024**2, ["audit", "--snapshot", "{bad}"], "snapshot is", GIB),
    "sample --aggregate": ("s.jsonl", 5 * GIB, ["sample", "--aggregate", "{bad}"], "sample file is", 4 * GIB),
    "sample --pods": (
        "p.json",
        1536 * 1024**2,
        ["sample", "--aggregate", "samples.jsonl", "--pods", "{bad}"],
        "pods file is",
        GIB,
    ),
    "rules validate": ("r.yaml", 2 << 20, ["rules", "validate", "{bad}"], "rule file is", 1 << 20),
    "cases": ("r.cases.yaml", 5 << 20, ["rules", "validate", "{bad}"], "cases file is", 4 << 20),
}


@pytest.mark.parametrize("option", SIZES)
def test_a_sparse_file_past_its_limit_is_refused_by_size_without_being_read(repo, option):
    name, size, args, what, limit = SIZES[option]
    bad = sparse(repo / name, size)
    run = gpuaudit(*(a.replace("{bad}", str(bad)) for a in args), cwd=repo, memory=GIB)
    assert run.code == 2, run.stderr
    assert f"{name}: {what} {size:,} bytes; the limit is {limit:,} bytes" in run.stderr


def test_a_token_file_past_its_limit_is_a_telemetry_problem(repo):
    bad = sparse(repo / "token", 1 << 20)
    run = gpuaudit(
        "audit",
        "--snapshot",
        str(DEMO),
        "--prometheus",
        "http://127.0.0.1:9",
        "--prometheus-token-file",
        str(bad),
        "--format",
        "json",
        cwd=repo,
    )
    assert run.code == 2
    [problem] = [e for e in run.report()["errors"] if e["file"] == "telemetry"]
    assert problem["message"] == (
        f"cannot query Prometheus: {bad}: token file is 1,048,576 bytes; the limit is 65,536 bytes"
    )

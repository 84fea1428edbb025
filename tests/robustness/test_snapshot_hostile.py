"""Snapshot and other JSON files built to exhaust the reader: gzip bombs,
integers past Python's 4,300-digit limit, arrays nested 200,000 deep. Each is
refused with a message naming the file, exit 2, quickly and in bounded memory.

The inflated size of a snapshot is bounded by MAX_SNAPSHOT_BYTES (1 GiB) in
gpuaudit/sources/snapshot.py, or $GPUAUDIT_MAX_SNAPSHOT_BYTES.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuaudit.sources.snapshot import LIMIT_VARIABLE, MAX_SNAPSHOT_BYTES, SnapshotError, read_snapshot
from tests.robustness.hostile import PINNED
from tests.robustness.processes import DEMO, GIB, gpuaudit

BIG_INT = "9" * 4400
DEEP = "[" * 200_000 + "]" * 200_000


def demo() -> dict:
    return json.loads(gzip.decompress(DEMO.read_bytes()))


def gzip_bomb(path: Path, inflated: int) -> Path:
    """A gzip file of many identical members of 16 MiB of zeros: 2 MB on disk
    inflates to 2 GB (each member compresses about a thousandfold)."""
    member = gzip.compress(b"\0" * (16 << 20), compresslevel=9)
    path.write_bytes(member * (inflated // (16 << 20)))
    return path


def test_a_2_mb_gzip_that_inflates_to_2_gb_is_refused_at_the_default_limit(tmp_path):
    bomb = gzip_bomb(tmp_path / "bomb.json.gz", 2 * 1000**3)
    assert bomb.stat().st_size < 2_500_000
    run = gpuaudit("audit", "--snapshot", str(bomb), cwd=tmp_path, memory=3 * GIB, timeout=120)
    assert run.code == 2
    assert run.stderr == (
        f"gpuaudit: {bomb}: snapshot inflates to more than {MAX_SNAPSHOT_BYTES:,} bytes; the limit "
        f"is {MAX_SNAPSHOT_BYTES:,} bytes (set {LIMIT_VARIABLE} to raise it)\n"
    )


def test_the_snapshot_limit_is_set_by_an_environment_variable(tmp_path):
    bomb = gzip_bomb(tmp_path / "bomb.json.gz", 256 << 20)
    for command in (["audit"], ["report", "--out", "review"]):
        run = gpuaudit(*command, "--snapshot", str(bomb), cwd=tmp_path, env={LIMIT_VARIABLE: str(64 << 20)})
        assert run.code == 2
        assert f"{bomb}: snapshot inflates to more than 67,108,864 bytes" in run.stderr
        assert run.seconds < 30
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(DEMO.read_bytes()))
    run = gpuaudit("audit", "--snapshot", str(plain), cwd=tmp_path, env={LIMIT_VARIABLE: "1000"})
    assert run.code == 2
    assert f"{plain}: snapshot is {plain.stat().st_size:,} bytes; the limit is 1,000 bytes" in run.stderr
    run = gpuaudit("audit", "--snapshot", str(plain), cwd=tmp_path, env={LIMIT_VARIABLE: "lots"})
    assert run.code == 2
    assert f"{LIMIT_VARIABLE}='lots' is not a positive number of bytes" in run.stderr
    assert gpuaudit("audit", "--snapshot", str(DEMO), cwd=tmp_path, env={LIMIT_VARIABLE: str(GIB)}).code == 1


@pytest.mark.parametrize("compressed", [False, True], ids=["json", "gz"])
@pytest.mark.parametrize(
    ("where", "value", "expected"),
    [
        ("top", BIG_INT, "not valid JSON: Exceeds the limit (4300 digits) for integer string conversion"),
        ("pod label", BIG_INT, "not valid JSON: Exceeds the limit (4300 digits)"),
        ("top", DEEP, "not valid JSON: nested too deep to parse"),
        ("pod label", DEEP, "not valid JSON: nested too deep to parse"),
    ],
    ids=["int-top", "int-label", "deep-top", "deep-label"],
)
def test_numbers_and_nesting_past_the_parser_are_refused_naming_the_file(tmp_path, where, value, expected, compressed):
    text = json.dumps(demo())
    marker = '"__HOSTILE__"'
    if where == "top":
        text = text[:-1] + f', "extra": {marker}' + "}"
    else:
        text = text.replace('"labels": {', f'"labels": {{"hostile": {marker}, ', 1)
    text = text.replace(marker, value)
    path = tmp_path / ("snap.json.gz" if compressed else "snap.json")
    path.write_bytes(gzip.compress(text.encode()) if compressed else text.encode())
    run = gpuaudit("audit", "--snapshot", str(path), cwd=tmp_path, timeout=60)
    assert run.code == 2
    assert run.stderr.startswith(f"gpuaudit: {path}: {expected}"), run.stderr
    with pytest.raises(SnapshotError, match="not valid JSON"):
        read_snapshot(path)


def test_nesting_the_parser_accepts_is_audited_and_reported(tmp_path):
    """900 levels parse (Python's limit is about 1,000): the audit, every
    format and the review must not trip over them later."""
    snapshot = demo()
    pod = snapshot["objects"]["pods"][0]
    pod["metadata"]["labels"]["deep"] = pod["spec"]["deep"] = "__DEEP__"
    path = tmp_path / "deep.json"  # json.dumps recurses in Python: splice the text in
    path.write_text(json.dumps(snapshot).replace('"__DEEP__"', "[" * 900 + "]" * 900))
    for fmt in ("json", "sarif", "text"):
        run = gpuaudit("audit", "--snapshot", str(path), "--format", fmt, cwd=tmp_path)
        assert run.code == 1, run.stderr  # findings, as without the deep values
    assert gpuaudit("report", "--snapshot", str(path), "--out", "review", cwd=tmp_path).code == 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"version": 1, "findings": [' + BIG_INT + "]}", "invalid JSON: Exceeds the limit (4300 digits)"),
        ('{"version": 1, "findings": ' + DEEP + "}", "nested too deep to parse"),
        (b'{"version": 1, "findings": ["caf\xe9"]}', "invalid JSON"),
    ],
    ids=["big-int", "deep", "latin1"],
)
def test_a_hostile_baseline_is_refused_naming_it(tmp_path, content, expected):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    baseline = tmp_path / "baseline.json"
    baseline.write_bytes(content.encode() if isinstance(content, str) else content)
    run = gpuaudit("check", "pinned.yaml", "--baseline", str(baseline), cwd=tmp_path)
    assert run.code == 2
    assert run.stderr.startswith(f"gpuaudit: {baseline}: not a gpuaudit baseline ("), run.stderr
    assert expected in run.stderr


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"uid": ' + BIG_INT + "}", "not valid JSON: Exceeds the limit (4300 digits)"),
        (DEEP, "not valid JSON: nested too deep to parse"),
        ("{", "not valid JSON: Expecting property name"),
    ],
    ids=["big-int", "deep", "truncated"],
)
def test_a_hostile_pods_file_is_refused_naming_it(tmp_path, content, expected):
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"kind": "gpu", "ts": 1700000000, "node": "n", "gpu": "0", "util_gpu_pct": 1}\n')
    pods = tmp_path / "pods.json"
    pods.write_text(content)
    run = gpuaudit("sample", "--aggregate", str(samples), "--pods", str(pods), cwd=tmp_path)
    assert run.code == 2
    assert run.stderr.startswith(f"gpuaudit: {pods}: {expected}"), run.stderr

"""NVML sample files with values of the wrong type or out of range, through
`gpuaudit sample --aggregate` and `gpuaudit audit --samples`.

A record without a plausible time, or whose identity (node, gpu, uuid,
mig_id...) is not text, is skipped; a measurement of the wrong type, not
finite or out of range reads as missing, as NVML's own gaps do. Either way
the problem is listed with its file and line (the first ten per file, then a
count), the rest of the file is used, and a file with nothing usable is a
clear error (exit 2). Never a traceback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaudit.model.telemetry import TelemetryUnavailable
from gpuaudit.sources.samples import MAX_PROBLEMS_PER_FILE, aggregate_samples
from tests.robustness.processes import DEMO, GIB, gpuaudit

T0 = 1_700_000_000


def header(**changes: Any) -> dict[str, Any]:
    return {"kind": "header", "version": 1, "ts": T0, "node": "n1", "interval_s": 10, **changes}


def record(i: int = 0, **changes: Any) -> dict[str, Any]:
    return {
        "kind": "gpu",
        "ts": T0 + 10 * i,
        "node": "n1",
        "gpu": "0",
        "uuid": "GPU-0",
        "model": "NVIDIA H100",
        "mig_enabled": False,
        "mig_profile": None,
        "mig_id": None,
        "util_gpu_pct": 3,
        "sm_util_pct": None,
        "fb_used_bytes": 20 * GIB,
        "fb_total_bytes": 80 * GIB,
        "pcie_tx_bytes_per_s": 1000,
        "pcie_rx_bytes_per_s": 1000,
        "processes": [{"pid": 7, "used_bytes": 20 * GIB, "pod_uid": "uid-1", "namespace": "ml", "pod": "trainer"}],
        **changes,
    }


def raw(field: str, text: str) -> str:
    """A record line with ``field`` set to JSON ``text`` that json.dumps would not write."""
    return json.dumps(record(0, **{field: "__RAW__"})).replace('"__RAW__"', text)


def write(path: Path, *lines: dict[str, Any] | str) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def aggregate(tmp_path: Path, *lines: dict[str, Any] | str) -> tuple[Path, dict[str, Any]]:
    path = write(tmp_path / "samples.jsonl", *lines)
    run = gpuaudit("sample", "--aggregate", str(path), cwd=tmp_path)
    assert run.code == 0, run.stderr
    return path, run.report()


GOOD = [record(i) for i in range(1, 6)]

# the broken line (line 2, after the header) -> what its error says
BROKEN_RECORDS = {
    "string-for-number": (record(0, util_gpu_pct="lots"), 'read as missing: util_gpu_pct "lots"'),
    "list-for-bytes": (record(0, fb_used_bytes=[1]), "read as missing: fb_used_bytes [1]"),
    "negative": (record(0, pcie_tx_bytes_per_s=-5), "read as missing: pcie_tx_bytes_per_s -5"),
    "overflow": (raw("fb_total_bytes", "1e400"), "read as missing: fb_total_bytes inf"),
    "nan": (raw("util_gpu_pct", "NaN"), "read as missing: util_gpu_pct nan"),
    "huge-int": (record(0, fb_used_bytes=10**30), "read as missing: fb_used_bytes 1000000000000000000000000000000"),
    "processes-mapping": (record(0, processes={"pid": 1}), 'read as missing: processes {"pid": 1}'),
    "process-not-object": (record(0, processes=["x"]), 'read as missing: process "x"'),
    "process-uid-list": (
        record(0, processes=[{"pod_uid": ["u"], "used_bytes": 1}]),
        'read as missing: process pod_uid ["u"]',
    ),
    "process-bytes-text": (
        record(0, processes=[{"pod_uid": "u", "used_bytes": "big"}]),
        'read as missing: process used_bytes "big"',
    ),
    "list-for-id": (record(0, uuid=["GPU-0"]), 'uuid ["GPU-0"] is not text; record skipped'),
    "mapping-for-node": (record(0, node={"n": 1}), 'node {"n": 1} is not text; record skipped'),
    "text-for-time": (record(0, ts="2024-01-01"), 'ts "2024-01-01" is not a time in seconds; record skipped'),
    "huge-time": (record(0, ts=1e300), "ts 1e+300 is not a time in seconds; record skipped"),
    "negative-time": (record(0, ts=-1), "ts -1 is not a time in seconds; record skipped"),
    "bool-time": (record(0, ts=True), "ts true is not a time in seconds; record skipped"),
    "big-int-line": (
        raw("fb_used_bytes", "9" * 4400),
        "not JSON: Exceeds the limit (4300 digits) for integer string conversion",
    ),
    "deep-line": ("[" * 200_000 + "]" * 200_000, "not JSON: nested too deep to parse"),
}


@pytest.mark.parametrize("case", BROKEN_RECORDS)
def test_a_record_of_the_wrong_types_is_named_and_the_rest_aggregated(tmp_path, case):
    line, expected = BROKEN_RECORDS[case]
    path, got = aggregate(tmp_path, header(), line, *GOOD)
    [error] = got["errors"]
    assert error["endpoint"] == f"{path}:2"
    assert error["message"].startswith(expected), error
    [row] = [g for g in got["gpus"] if g["pod"] == "trainer"]
    assert row["fb_used_mean_mib"] == 20 * 1024  # the good records, intact
    assert json.dumps(got, allow_nan=False)  # strict JSON


@pytest.mark.parametrize("interval", [1e-300, 0, -10, "10", [10], 1e300, None])
def test_an_implausible_interval_is_ignored_and_inferred_from_the_times(tmp_path, interval):
    _, got = aggregate(tmp_path, header(interval_s=interval), *GOOD)
    assert got["window"]["step_seconds"] == 10
    [row] = got["gpus"]
    assert row["coverage"] == 1.0


def test_times_that_are_all_equal_or_microseconds_apart_stay_finite(tmp_path):
    _, got = aggregate(tmp_path, header(interval_s=1e-300), record(0), record(0, ts=T0 + 1e-9))
    [row] = got["gpus"]
    assert 0 < row["coverage"] <= 1


def test_problems_are_listed_up_to_ten_per_file_then_counted(tmp_path):
    path, got = aggregate(tmp_path, header(), *[record(i, uuid=[i]) for i in range(25)], *GOOD)
    assert len(got["errors"]) == MAX_PROBLEMS_PER_FILE + 1
    assert got["errors"][-1] == {
        "endpoint": str(path),
        "query": "parse",
        "level": "warning",
        "message": "15 more lines with problems",
    }
    assert all(e["level"] == "warning" for e in got["errors"])  # lines left out: the rest is read
    assert got["gpus"]


def test_a_file_with_nothing_usable_is_an_error_naming_it(tmp_path):
    path = write(tmp_path / "junk.jsonl", header(interval_s=1e-300), record(0, ts="now"), record(1, gpu=[0]))
    run = gpuaudit("sample", "--aggregate", str(path), cwd=tmp_path)
    assert run.code == 2
    assert run.stderr == f'gpuaudit: NVML samples {path}: ts "now" is not a time in seconds; record skipped\n'


def test_audit_with_hostile_samples_judges_the_rest_and_names_each_line(tmp_path):
    path = write(
        tmp_path / "samples.jsonl",
        header(interval_s=1e-300),
        record(0, uuid=[1]),
        record(1, util_gpu_pct="lots"),
        *GOOD,
    )
    run = gpuaudit("audit", "--snapshot", str(DEMO), "--samples", str(path), "--format", "json", cwd=tmp_path)
    assert run.code == 1, run.stderr  # findings; sample problems are warnings
    report = run.report()
    named = {(e["file"], e["level"]) for e in report["errors"]}
    assert {(f"{path}:2", "warning"), (f"{path}:3", "warning")} <= named
    assert report["summary"]["telemetry"]["source"] == "nvml"

    junk = write(tmp_path / "junk.jsonl", record(0, ts=[T0]))
    run = gpuaudit("audit", "--snapshot", str(DEMO), "--samples", str(junk), "--format", "json", cwd=tmp_path)
    assert run.code == 2
    [problem] = [e for e in run.report()["errors"] if e["file"] == "telemetry"]
    assert problem["message"] == (
        f"cannot use samples: NVML samples {junk}: ts [{T0}] is not a time in seconds; record skipped"
    )


def test_aggregate_samples_never_raises_on_wrong_types(tmp_path):
    """The function itself, over every broken record at once."""
    lines = [header(interval_s="fast")] + [line for line, _ in BROKEN_RECORDS.values()] + GOOD
    got = aggregate_samples([write(tmp_path / "all.jsonl", *lines)])
    assert got["gpus"] and len(got["errors"]) == MAX_PROBLEMS_PER_FILE + 1


# --- fuzz: any value in any field of any record ---------------------------------------------

EXAMPLES = int(os.environ.get("GPUAUDIT_FUZZ_EXAMPLES", "150"))
_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_FIELDS = sorted({*record(), *header()})


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=8), st.dictionaries(st.sampled_from(_FIELDS), _JUNK, max_size=4)),
        min_size=1,
        max_size=8,
    )
)
def test_aggregate_samples_never_raises_on_any_value(tmp_path, changes):
    """Records whose fields hold any JSON value: the aggregate is strict JSON
    with finite numbers, whatever the file says."""
    lines: list[dict[str, Any]] = [header()]
    for i, fields in changes:
        kind = header if fields.get("kind") == "header" else record
        lines.append(kind(**fields) if kind is header else record(i, **fields))
    path = tmp_path / "fuzz.jsonl"
    path.write_text("".join(json.dumps(line, allow_nan=True) + "\n" for line in lines))
    try:
        got = aggregate_samples([path])
    except TelemetryUnavailable:
        return  # nothing usable in the file: a clear error, which the CLI reports with exit 2
    json.dumps(got, allow_nan=False)  # strict JSON: no NaN or infinity anywhere

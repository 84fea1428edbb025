"""write_snapshot: what it writes reads back as it was, as strict JSON, in
batches, whatever the objects hold (sources/snapshot._dump)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaudit.sources import snapshot as snapshot_module
from gpuaudit.sources.cluster import OBJECT_KEYS
from gpuaudit.sources.snapshot import SnapshotError, read_snapshot, write_snapshot

# What JSON from an API server holds: no NaN or infinity, no lone surrogate
# (neither can be written as strict UTF-8 JSON; tests below cover both).
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(blacklist_categories=("Cs",))),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",)), max_size=5), inner, max_size=4),
    ),
    max_leaves=20,
)
OBJECTS = st.dictionaries(st.text(max_size=8), VALUES, max_size=5).map(
    lambda extra: {**extra, "metadata": {"name": "p", "namespace": "ns"}}
)


def _snapshot(**objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": 1,
        "kind": "gpuaudit-snapshot",
        "collected_at": "2026-12-01T00:00:00Z",
        "cluster": {"server": "https://example:6443", "context": None},
        "objects": {**{key: [] for key in OBJECT_KEYS}, **objects},
        "absent": [],
        "errors": [],
        "telemetry": {"source": "prometheus", "gpus": []},
    }


def _strict(raw: bytes) -> Any:
    """The file's JSON, read by a parser that refuses NaN and the infinities."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} written")

    return json.loads(raw, parse_constant=refuse)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(OBJECTS, max_size=6), st.sampled_from(["snap.json", "snap.json.gz"]))
def test_what_is_written_reads_back_equal(tmp_path, pods, name):
    path = tmp_path / name
    snapshot = _snapshot(pods=pods)
    write_snapshot(snapshot, path)
    assert read_snapshot(path) == snapshot
    raw = path.read_bytes()
    assert _strict(gzip.decompress(raw) if name.endswith(".gz") else raw) == snapshot


def test_objects_of_many_batches_are_written_whole(tmp_path):
    pods = [
        {"metadata": {"name": f"pod-{i}", "namespace": "ns", "annotations": {"note": "x" * 2000 + str(i)}}}
        for i in range(1500)
    ]
    snapshot = _snapshot(pods=pods, nodes=[{"metadata": {"name": "n"}}])
    assert len(json.dumps(pods)) > 2 * snapshot_module._BATCH_BYTES  # several batches, then more keys
    for name in ("snap.json", "snap.json.gz"):
        write_snapshot(snapshot, tmp_path / name)
        assert read_snapshot(tmp_path / name) == snapshot


def test_a_number_json_cannot_carry_in_an_object_is_written_as_null(tmp_path):
    """Only a hostile server sends NaN or an infinity (and only the lenient
    reader reads them): the snapshot is still written, as strict JSON."""
    pod = {
        "metadata": {"name": "p", "namespace": "ns"},
        "status": {"odd": [math.nan, math.inf, -math.inf, 2**70, 0.1, 1e300]},
    }
    path = tmp_path / "snap.json"
    write_snapshot(_snapshot(pods=[pod]), path)
    back = _strict(path.read_bytes())
    assert back["objects"]["pods"][0]["status"]["odd"] == [None, None, None, 2**70, 0.1, 1e300]


def test_a_key_that_is_no_string_is_written_as_json_writes_it(tmp_path):
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {True: 1, None: 2, 3: "c"}}
    path = tmp_path / "snap.json"
    write_snapshot(_snapshot(pods=[pod]), path)
    assert _strict(path.read_bytes())["objects"]["pods"][0]["spec"] == {"true": 1, "null": 2, "3": "c"}


@pytest.mark.parametrize(
    "where",
    [
        lambda s: s["objects"]["pods"][0]["metadata"].__setitem__("name", "\ud800"),  # a lone surrogate
        lambda s: s.__setitem__("telemetry", {"bad": math.nan}),  # gpuaudit's own data: its bug
    ],
)
def test_what_cannot_be_written_leaves_the_old_file(tmp_path, where):
    path = tmp_path / "snap.json.gz"
    good = _snapshot(pods=[{"metadata": {"name": "p", "namespace": "ns"}}])
    write_snapshot(good, path)
    before = path.read_bytes()
    broken = json.loads(json.dumps(good))
    where(broken)
    with pytest.raises(SnapshotError, match="not JSON-serializable"):
        write_snapshot(broken, path)
    assert path.read_bytes() == before
    assert [p.name for p in Path(tmp_path).iterdir()] == ["snap.json.gz"]

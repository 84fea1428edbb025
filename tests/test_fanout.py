"""Reading a large directory on several cores gives exactly what reading it
file by file gives: the same documents, lines, bare configs and errors, in
the same order; and a worker that fails costs time, not results."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gpuaudit.sources import fanout
from gpuaudit.sources.manifests import ReadResult, iter_manifest_files, read_file, read_paths

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux only")

POD = """apiVersion: v1
kind: Pod
metadata:
  name: pod-{i}
spec:
  containers:
  - name: main
    image: nvcr.io/nvidia/pytorch:24.08-py3
    resources:
      limits: {{nvidia.com/gpu: {gpus}}}
"""
LIST = """{{"apiVersion": "v1", "kind": "List", "items": [
 {{"apiVersion": "v1", "kind": "Service", "metadata": {{"name": "svc-{i}"}}}},
 {{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "listed-{i}"}}}}]}}
"""
ODD = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/gpu, replicas: 4}]\n",
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n",
    "apiVersion: v1\nkind: Pod\nmetadata: {name: {{ .Values.name }}}\n",
    "base: &b {x: 1}\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\ndata:\n  <<: *b\n",
    "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nkind: Pod\n",
)


def repository(root: Path, files: int) -> Path:
    for i in range(files):
        folder = root / f"team-{i % 7}"
        folder.mkdir(exist_ok=True)
        if i % 10 == 3:
            (folder / f"{i:04d}.json").write_text(LIST.format(i=i))
        elif i % 10 == 7:
            (folder / f"{i:04d}.yaml").write_text(ODD[(i // 10) % len(ODD)])
        elif i % 50 == 9:
            (folder / f"{i:04d}.yaml").write_bytes(b"\0binary")
        else:
            (folder / f"{i:04d}.yaml").write_text(POD.format(i=i, gpus=1 + i % 8))
    return root


def one_by_one(root: Path) -> ReadResult:
    result = ReadResult()
    for path in iter_manifest_files(root):
        read_file(path, result)
    return result


def as_data(result: ReadResult) -> tuple:
    def docs(items):
        return [(d.obj, d.file, d.line, dict(d.lines), d.base) for d in items]

    return docs(result.documents), docs(result.bare), result.errors, result.files


@pytest.fixture
def two_cpus(monkeypatch):
    """Two workers even on a one-CPU machine, and a count of the forks."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    forks = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return forks


def test_a_large_directory_read_on_two_cores_matches_reading_file_by_file(tmp_path, two_cpus):
    root = repository(tmp_path, 300)
    expected = one_by_one(root)
    assert not two_cpus  # reading one by one forks nothing

    parallel = read_paths([str(root)])

    assert len(two_cpus) == 1  # one worker beside this process
    assert as_data(parallel) == as_data(expected)
    assert expected.errors and expected.bare and len(expected.documents) > 300  # all kinds seen


def test_a_failing_worker_costs_time_not_results(tmp_path, two_cpus, monkeypatch):
    root = repository(tmp_path, 200)
    expected = one_by_one(root)

    def broken(result):
        raise TypeError("cannot send this")

    monkeypatch.setattr(fanout, "_pack", broken)  # fails in the worker, after the fork
    parallel = read_paths([str(root)])

    assert two_cpus
    assert as_data(parallel) == as_data(expected)


def test_small_inputs_and_threaded_callers_are_read_here(tmp_path, two_cpus):
    assert fanout.workers_for(100, 64) == 1
    assert fanout.workers_for(1000, 64) == 2
    root = repository(tmp_path, 100)
    read_paths([str(root)])
    assert not two_cpus


def test_when_no_worker_can_start_everything_is_read_here(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)

    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    root = repository(tmp_path, 200)
    assert as_data(read_paths([str(root)])) == as_data(one_by_one(root))

"""What judging a large cluster in two processes would buy, and cost.

    .venv/bin/python bench/fork_judging.py one|two [SNAPSHOT]

An experiment, not a feature: it reads the snapshot (default: the one
`bench/run.py --only cluster` writes) and builds its model as `audit` does,
then computes the GPU pods' facts and judges them with the built-in rules:
``one`` in this process, ``two`` split in two, a forked child taking the
second half of the pods and sending its subjects and findings back pickled,
as a parallel audit would have to (the report reads every subject). Run
each way in its own process, alternately: a process that judged once
already has its freed memory to reuse, and its caches warm. Each half
also computes the node and cluster documents from its own pods, so both
sides do the work of a whole audit's other subjects once: the timing is
fair, the numbers of those documents are not an audit's.

Prints the wall time of each way, and the memory each process holds
privately (``Private_Dirty`` of ``/proc/PID/smaps_rollup``): the child's
is what the parent's peak RSS, which the benchmark measures, does not show.
"""

from __future__ import annotations

import gc
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

from msgspec.structs import replace

from gpuaudit.engine.evaluate import evaluate
from gpuaudit.facts import cluster as cluster_facts
from gpuaudit.model import ClusterState
from gpuaudit.model.cluster_builder import build_cluster_state, kept_for_audit
from gpuaudit.pipelines.policy import load_policy
from gpuaudit.sources.snapshot import read_snapshot
from gpuaudit.sources.user_config import Config

DEFAULT_SNAPSHOT = Path(__file__).resolve().parent / "out" / "cluster" / "snapshot.json.gz"


def private_mib() -> int:
    """This process's private dirty memory (MiB): what a fork copied or made."""
    with open("/proc/self/smaps_rollup", encoding="ascii") as rollup:
        for line in rollup:
            if line.startswith("Private_Dirty:"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("no Private_Dirty in /proc/self/smaps_rollup")


def judged(state: ClusterState, rules: list[Any]) -> tuple[list[Any], list[Any]]:
    subjects = list(cluster_facts.subjects(state))
    evaluation = evaluate(rules, subjects, inputs={"cluster"}, today=state.collected_at.date())
    return subjects, evaluation.findings


def main(argv: list[str]) -> int:
    gc.disable()  # as every command but `sample` runs
    if not argv or argv[0] not in ("one", "two"):
        raise SystemExit(__doc__)
    way = argv[0]
    snapshot = Path(argv[1]) if len(argv) > 1 else DEFAULT_SNAPSHOT
    rules, _ = load_policy(Config())
    start = time.perf_counter()
    state = build_cluster_state(read_snapshot(snapshot, each=kept_for_audit))
    print(f"read and model: {time.perf_counter() - start:.2f} s; {len(state.pods):,} GPU pods")
    print(f"this process before judging: {private_mib()} MiB private")

    if way == "one":
        start = time.perf_counter()
        _, findings = judged(state, rules)
        print(f"one process: facts and judging {time.perf_counter() - start:.2f} s, {len(findings):,} findings")
        return 0

    half = len(state.pods) // 2
    start = time.perf_counter()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        subjects, findings = judged(replace(state, pods=state.pods[half:]), rules)
        data = pickle.dumps(([s for s in subjects if s.target == "pod"], findings), protocol=5)
        print(f"  child: {private_mib()} MiB private at its end; sends {len(data) / 2**20:.1f} MiB", flush=True)
        with os.fdopen(write_end, "wb") as out:
            out.write(data)
        os._exit(0)
    os.close(write_end)
    _, findings = judged(replace(state, pods=state.pods[:half]), rules)
    waited = time.perf_counter()
    with os.fdopen(read_end, "rb") as received:
        _, theirs = pickle.loads(received.read())
    os.waitpid(child, 0)
    took = time.perf_counter() - start
    print(f"  parent: waited for and read the child's half {time.perf_counter() - waited:.2f} s")
    print(f"two processes: facts and judging {took:.2f} s, {len(findings) + len(theirs):,} findings")
    print(f"this process at the end: {private_mib()} MiB private")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

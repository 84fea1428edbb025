"""Time `gpuaudit report` on a generated 5,000-node cluster with telemetry.

    .venv/bin/python bench/bench_report.py [--snapshot FILE] [--nodes 5000 --pods 50000]
                                           [--repeat 3]

The snapshot is bench/out/cluster/snapshot.json.gz when bench/run.py has
collected one (through the fake API server), else the cluster bench/
gen_cluster.py generates, wrapped as a snapshot. Telemetry aggregates are
added for every bound GPU pod (synthetic, shaped like the demo: busy
trainers, idle resident models after GenTD26, idle services, and about one
pod in eight without a DCGM exporter), so the report runs its full path.

Prints the wall time and peak RSS of the whole command (a child process,
bench/measure.py: median of --repeat runs after one warm-up), then where the
time goes, measured in-process once: reading the snapshot, the cluster
state, the fact documents, the rules, and the report's own work. Target:
under 10 s. Generated files go to bench/out/report/ (ignored by git).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import random
import resource
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(ROOT))

from measure import Command, measure_interleaved  # noqa: E402

GPUAUDIT = str(Path(sys.executable).parent / "gpuaudit")
OUT = BENCH / "out" / "report"
TARGET_S = 10.0


def _snapshot(args: argparse.Namespace) -> dict[str, Any]:
    collected = BENCH / "out" / "cluster" / "snapshot.json.gz"
    path = args.snapshot or (collected if collected.exists() else None)
    if path is not None:
        return json.loads(gzip.decompress(Path(path).read_bytes()))
    import gen_cluster

    recorded = gen_cluster.generate(args.nodes, args.pods, args.seed)
    names = ("nodes", "pods", "events", "replicasets", "jobs", "configmaps", "clusterpolicies",
             "resourceclaims", "resourceslices", "kueueworkloads")  # fmt: skip
    objects = {name: recorded.get(name, []) for name in names}
    for items in objects.values():
        for obj in items:
            obj.get("metadata", {}).pop("managedFields", None)  # as the collector drops it
    return {
        "version": 1,
        "kind": "gpuaudit-snapshot",
        "collected_at": "2025-12-29T00:00:00Z",
        "cluster": {"server": "https://bench.example:6443", "context": "bench"},
        "objects": objects,
        "absent": [],
        "errors": [],
        "telemetry": None,
    }


def add_telemetry(snapshot: dict[str, Any], seed: int = 1) -> int:
    """Telemetry rows for the bound GPU pods; returns how many GPU rows."""
    from make_demo_snapshot import sd_behaviour, steady  # scripts/

    from gpuaudit.model import telemetry as tm

    rng = random.Random(seed)
    memory = {
        n["metadata"]["name"]: float(n["metadata"]["labels"].get("nvidia.com/gpu.memory") or 81920)
        for n in snapshot["objects"]["nodes"]
    }
    next_gpu: dict[str, int] = {}
    rows = []
    for pod in snapshot["objects"]["pods"]:
        node = pod["spec"].get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        gpus = 0
        for c in pod["spec"].get("containers") or []:
            limits = (c.get("resources") or {}).get("limits") or {}
            gpus += int(float(limits.get("nvidia.com/gpu", 0)))
        if not node or not gpus or phase not in ("Running", "Pending"):
            continue
        first = next_gpu.get(node, 0)
        next_gpu[node] = first + gpus
        roll = rng.random()
        if roll < 0.12:
            continue  # no exporter on this pod's node: no data
        if roll < 0.45:
            behaviour = steady(rng, (0.6, 0.92), (40, 76))
        elif roll < 0.75:
            behaviour = sd_behaviour(rng)
        else:
            behaviour = steady(rng, (0.01, 0.09), (1, 12), 0.3)
        meta = pod["metadata"]
        for gpu in range(first, first + gpus):
            metrics = {**behaviour, "coverage": 0.99, "fb_total_mib": memory.get(node, 81920)}
            identity = {"node": node, "gpu": str(gpu), "uuid": f"GPU-{node}-{gpu}",
                        "namespace": meta["namespace"], "pod": meta["name"], "container": "main"}  # fmt: skip
            rows.append(tm.gpu_row(identity, metrics))
    end = datetime.fromisoformat(snapshot["collected_at"].replace("Z", "+00:00"))
    snapshot["telemetry"] = tm.result(
        source="prometheus",
        endpoint="http://prometheus.bench:9090",
        window=tm.window(end - timedelta(days=7), end, 60),
        signals={"compute": "DCGM_FI_PROF_SM_ACTIVE", "memory": "DCGM_FI_DEV_FB_USED"},
        params={"resident_fb_mib": 1024, "idle_compute": 0.05},
        queries=9,
        gpu_rows=rows,
        errors=[],
    )
    return len(rows)


def stages(path: Path) -> dict[str, float]:
    """CPU seconds per stage, in this process (one run): CPU time rather than
    wall time, so that other work on the machine does not inflate a stage."""
    gc.disable()  # as every gpuaudit command but `sample` runs (cli/main.py)
    from gpuaudit.engine.evaluate import evaluate
    from gpuaudit.facts import cluster as cluster_facts
    from gpuaudit.model.cluster_builder import build_cluster_state
    from gpuaudit.pipelines.audit import audit_cluster
    from gpuaudit.pipelines.policy import load_policy
    from gpuaudit.report.build import analyse, assemble, run_summary, settings_from_config
    from gpuaudit.report.period import month_of
    from gpuaudit.report.render import render_html, render_json, render_markdown
    from gpuaudit.sources.snapshot import read_snapshot
    from gpuaudit.sources.user_config import Config

    out: dict[str, float] = {}
    clock = time.process_time
    start = clock()
    snapshot = read_snapshot(path)
    out["read snapshot"] = clock() - start
    rules, _ = load_policy(Config())
    start = clock()
    state = build_cluster_state(snapshot)
    out["cluster state"] = clock() - start
    start = clock()
    subjects = list(cluster_facts.subjects(state))
    out["fact documents"] = clock() - start
    start = clock()
    evaluate(rules, subjects, inputs={"cluster", "telemetry"})
    out["rules"] = clock() - start
    result = audit_cluster(snapshot, Config(), rules)  # again, for what the report needs
    start = clock()
    settings = settings_from_config({})
    analysis = analyse(result.state, result.subjects, result, settings)
    document = assemble(
        analysis,
        runs=[run_summary(analysis, "report")],
        period=month_of(analysis.collected_at),
        generated_at=datetime.now(timezone.utc),
        settings=settings,
        history=None,
    )
    out["report: counts, what-if"] = clock() - start
    start = clock()
    render_html(document), render_markdown(document), render_json(document)
    out["report: render"] = clock() - start
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshot", type=Path)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpuaudit.sources.snapshot import write_snapshot

    OUT.mkdir(parents=True, exist_ok=True)
    snapshot = _snapshot(args)
    rows = add_telemetry(snapshot, args.seed)
    path = OUT / "snapshot-telemetry.json.gz"
    write_snapshot(snapshot, path)
    objects = snapshot["objects"]
    size = f"{len(objects['nodes']):,} nodes / {len(objects['pods']):,} pods / {rows:,} GPU rows"
    argv_ = (GPUAUDIT, "report", "--snapshot", str(path), "--out", str(OUT / "out"),
             "--history", str(OUT / "history.sqlite"), "--gpu-hour-price", "2.5")  # fmt: skip
    measured = measure_interleaved({"report": Command(argv_, OUT / "report.log", timeout_s=600)}, repeat=args.repeat)[
        "report"
    ]
    print(f"gpuaudit report on {size}")
    print(
        f"  wall {measured.wall_s:.1f} s (median of {len(measured.runs)}), "
        f"peak RSS {measured.peak_rss_mib:,.0f} MiB, exit {measured.returncode}; "
        f"target < {TARGET_S:.0f} s: {'met' if measured.wall_s < TARGET_S else 'NOT met'}"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv_, check=True, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"  CPU time of one run {cpu:.1f} s (user + sys; what a quiet machine's wall time nears)")
    for name, seconds in stages(path).items():
        print(f"  {name:<26} {seconds:6.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

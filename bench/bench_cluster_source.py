"""Measure the live-cluster collector over HTTP: wall time and peak RSS.

    python bench/bench_cluster_source.py alibaba          # the Alibaba trace cluster
    python bench/bench_cluster_source.py cluster.json     # e.g. from bench/gen_cluster.py

The recorded cluster is served by tests/apiserver.py in a separate process
(a stand-in for the API server: no real one runs here), and the collection
runs in a fresh process of its own, so its peak RSS is the collector's alone
(plus the interpreter and the kubernetes client, reported as the baseline).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _peak_rss_mib() -> float:
    """This process's peak resident set (VmHWM). Not ``ru_maxrss``: Linux
    carries the parent's high-water mark across fork+exec into it."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def measure(kubeconfig: str, page_size: int, snapshot_out: str | None) -> None:
    """Runs in the child: collect once, print one JSON line of numbers."""
    gc.disable()  # as every gpuaudit command but `sample` runs (cli/main.py)
    sys.path.insert(0, str(ROOT))
    import kubernetes.client  # noqa: F401 - the baseline includes the client

    from gpuaudit.sources.cluster import collect

    baseline = _peak_rss_mib()
    started = time.perf_counter()
    snapshot = collect(kubeconfig=kubeconfig, page_size=page_size, deadline=1800)
    elapsed = time.perf_counter() - started
    result = {
        "collect_s": round(elapsed, 2),
        "peak_rss_mib": _peak_rss_mib(),
        "baseline_rss_mib": baseline,
        "objects": {key: len(items) for key, items in snapshot["objects"].items()},
        "errors": snapshot["errors"],
    }
    if snapshot_out:
        from gpuaudit.sources.snapshot import read_snapshot, write_snapshot

        started = time.perf_counter()
        write_snapshot(snapshot, Path(snapshot_out))
        result["write_s"] = round(time.perf_counter() - started, 2)
        result["snapshot_mib"] = round(os.path.getsize(snapshot_out) / 2**20, 1)
        del snapshot
        started = time.perf_counter()
        read_snapshot(Path(snapshot_out))
        result["read_s"] = round(time.perf_counter() - started, 2)
        result["peak_rss_after_io_mib"] = _peak_rss_mib()
    print(json.dumps(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cluster", help="'alibaba' or a recorded-cluster JSON file")
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--snapshot", help="also write and read back this snapshot file")
    parser.add_argument("--measure", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        measure(args.measure, args.page_size, args.snapshot)
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        cluster_file = Path(args.cluster)
        if args.cluster == "alibaba":
            sys.path.insert(0, str(ROOT))
            from tests.clusters import alibaba

            if not alibaba.available():
                print(f"trace not found in {alibaba.DATA_DIR}", file=sys.stderr)
                return 1
            cluster_file = Path(tmp) / "alibaba.json"
            cluster_file.write_text(json.dumps(alibaba.build()))
        kubeconfig = Path(tmp) / "kubeconfig"
        server = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests" / "apiserver.py"),
                str(cluster_file),
                "--kubeconfig",
                str(kubeconfig),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            url = server.stdout.readline().strip()  # printed once it serves
            if not url:
                print("the fake API server did not start", file=sys.stderr)
                return 1
            child = [
                sys.executable,
                __file__,
                args.cluster,
                "--measure",
                str(kubeconfig),
                "--page-size",
                str(args.page_size),
            ]
            if args.snapshot:
                child += ["--snapshot", args.snapshot]
            started = time.perf_counter()
            out = subprocess.run(child, capture_output=True, text=True, check=False)
            wall = time.perf_counter() - started
        finally:
            server.terminate()
            server.wait(timeout=10)
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return out.returncode
    result = json.loads(out.stdout)
    result["process_wall_s"] = round(wall, 2)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

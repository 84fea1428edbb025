"""Telemetry at fleet scale, with and without gpuaudit's recording rules.

Generates dcgm-exporter series (GPU_UTIL, FB_USED, FB_FREE) for --gpus GPUs
over --days days at one sample per --scrape seconds (a third resident-idle, a
third busy in bursts, a third working), backfills them with promtool into a
real Prometheus with its default limits (2-minute query timeout, 50 million
samples per query), then reads the audit's telemetry for the whole window:

1. from the raw series (subqueries, split into day parts);
2. after `promtool tsdb create-blocks-from rules` has recorded the per-GPU
   level of `gpuaudit monitoring rules` over the window: from the recorded
   series.

A proxy in front of Prometheus asks each query's statistics (stats=all) and
keeps the samples it touched. Prints one JSON object per run.

    python bench/monitoring.py --gpus 5000 --days 7 --scrape 60
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuaudit.sources.prometheus import query_telemetry
from tests.monitoring_prometheus import RecordedPrometheus, level_files
from tests.prometheus_server import Family, Reply, StubServer


def families(gpus: int, start: float, end: float, scrape: int) -> list[Family]:
    times = [start + i * scrape for i in range(int((end - start) // scrape) + 1)]

    def labels(i: int) -> dict[str, str]:
        return {
            "gpu": str(i % 8),
            "UUID": f"GPU-{i:08x}-0000-0000-0000-000000000000",
            "modelName": "NVIDIA H100",
            "Hostname": f"node-{i // 8:04d}",
            "namespace": f"team-{i % 20:02d}",
            "pod": f"pod-{i:05d}",
            "container": "main",
        }

    def util(i: int, j: int) -> float:
        kind = i % 3
        if kind == 0:
            return 0.0  # resident, idle
        if kind == 1:
            return 90.0 if j % 7 == 0 else 1.0  # bursts
        return 60.0 + (j % 5)

    def series(value):
        for i in range(gpus):
            yield labels(i), [(t, value(i, j)) for j, t in enumerate(times)]

    return [
        Family("DCGM_FI_DEV_GPU_UTIL", series(util)),
        Family("DCGM_FI_DEV_FB_USED", series(lambda i, j: 30000.0)),
        Family("DCGM_FI_DEV_FB_FREE", series(lambda i, j: 50000.0)),
    ]


class StatsProxy:
    """Forwards each instant query with stats=all and keeps its sample count."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.samples: list[int] = []
        self.stub = StubServer(self.handle)

    def handle(self, request):
        if not request.path.endswith("/api/v1/query"):
            return None
        form = urllib.parse.parse_qs(request.body.decode())
        form["stats"] = ["all"]
        data = urllib.parse.urlencode({k: v[0] for k, v in form.items()}).encode()
        try:
            with urllib.request.urlopen(self.upstream + request.path, data=data, timeout=600) as resp:
                body = resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            body, status = exc.read(), exc.code
        payload = json.loads(body)
        stats = ((payload.get("data") or {}).get("stats") or {}).get("samples") or {}
        self.samples.append(int(stats.get("totalQueryableSamples") or 0))
        return Reply(status, body)


def read(url: str, window: int, end: float, step: int, deadline: float) -> dict:
    proxy = StatsProxy(url)
    with proxy.stub:
        began = time.monotonic()
        result = query_telemetry(
            proxy.stub.url,
            window_seconds=window,
            step_seconds=step,
            end=datetime.fromtimestamp(end, timezone.utc),
            deadline=deadline,
            timeout=120.0,
        )
        seconds = time.monotonic() - began
    errors = [e for e in result["errors"] if not e["message"].startswith("warning:")]
    return {
        "seconds": round(seconds, 1),
        "queries": result["queries"],
        "subqueries": result["subqueries"],
        "pods": len(result["pods"]),
        "samples_max_per_query": max(proxy.samples, default=0),
        "samples_total": sum(proxy.samples),
        "failed_queries": len(errors),
        "errors": errors[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=5000)
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--scrape", type=int, default=60, help="seconds between samples (= --step)")
    parser.add_argument("--deadline", type=float, default=1800)
    args = parser.parse_args()
    window = int(args.days * 86400)
    end = math.floor((time.time() - 3600) / args.scrape) * args.scrape
    start = end - window - 600
    with tempfile.TemporaryDirectory(prefix="gpuaudit-bench-") as tmp:
        work = Path(tmp)
        began = time.monotonic()
        server = RecordedPrometheus(work).load(families(args.gpus, start, end, args.scrape))
        loaded = time.monotonic() - began
        try:
            print(
                json.dumps(
                    {
                        "gpus": args.gpus,
                        "days": args.days,
                        "scrape_s": args.scrape,
                        "samples": 3 * args.gpus * (int((end - start) // args.scrape) + 1),
                        "backfill_s": round(loaded, 1),
                    }
                ),
                flush=True,
            )
            raw = read(server.url, window, end, args.scrape, args.deadline)
            print(json.dumps({"mode": "raw series", **raw}), flush=True)
            rules = work / "rules"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gpuaudit",
                    "monitoring",
                    "rules",
                    "--out",
                    str(rules),
                    "--interval",
                    f"{args.scrape}s",
                ],
                check=True,
                capture_output=True,
            )
            gpu_level = level_files(rules / "gpuaudit-rules.yaml", work)[0]
            began = time.monotonic()
            server.record(gpu_level, end - window - args.scrape, end, args.scrape)
            recorded_in = time.monotonic() - began
            recorded = read(server.url, window, end, args.scrape, args.deadline)
            print(
                json.dumps({"mode": "recorded series", "rules_backfill_s": round(recorded_in, 1), **recorded}),
                flush=True,
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()

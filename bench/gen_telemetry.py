"""Generate dcgm-exporter series for N GPU pods, as OpenMetrics for promtool.

One GPU per pod, eight GPUs per node, the labels dcgm-exporter writes
(``gpu``, ``UUID``, ``modelName``, ``Hostname``, ``namespace``, ``pod``,
``container``), and a mix of behaviours: busy trainers, idle notebooks that
keep a model in memory, and pods that come and go within the window. The
benchmark backfills this into a real Prometheus to count the queries an audit
sends at 100 and at 10,000 pods.

    python bench/gen_telemetry.py OUT.om --pods 10000 [--window 3600] [--step 120]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for `tests.` imports

from tests.prometheus_server import Family, write_openmetrics

FB_TOTAL_MIB = 81_559  # an 80 GB A100/H100 as dcgm-exporter reports it
MODEL = "NVIDIA H100 80GB HBM3"
_NAMESPACE = uuid.UUID("6f1c5d2e-0b8a-4c39-9a57-2d4f3e8b9c10")


def labels(index: int) -> dict[str, str]:
    gpu = index % 8
    return {
        "gpu": str(gpu),
        "UUID": f"GPU-{uuid.uuid5(_NAMESPACE, f'bench/{index}')}",
        "device": f"nvidia{gpu}",
        "modelName": MODEL,
        "Hostname": f"gpu-node-{index // 8:05d}",
        "namespace": f"team-{index % 40:02d}",
        "pod": f"worker-{index:06d}",
        "container": "main",
    }


def _profiles(pods: int, samples: int, seed: int) -> list[tuple[list[float], list[float]]]:
    """(utilisation %, framebuffer MiB) per pod and sample."""
    r = random.Random(seed)
    out = []
    for _ in range(pods):
        kind = r.random()
        if kind < 0.4:  # training: busy, memory full
            util = [min(100.0, r.gauss(85, 8)) for _ in range(samples)]
            fb = [r.uniform(60_000, 78_000)] * samples
        elif kind < 0.7:  # idle but resident: the case the audit is for
            util = [max(0.0, r.gauss(2, 1.5)) for _ in range(samples)]
            fb = [r.uniform(20_000, 70_000)] * samples
        else:  # bursty inference
            util = [r.choice((0.0, 5.0, 40.0, 90.0)) for _ in range(samples)]
            fb = [r.uniform(8_000, 30_000)] * samples
        out.append((util, fb))
    return out


def families(pods: int, end: float, window_s: int, step_s: int, seed: int = 8) -> list[Family]:
    times = [end - window_s + i * step_s for i in range(window_s // step_s + 1)]
    data = _profiles(pods, len(times), seed)

    def series(pick: int, transform=lambda v: v) -> Iterator[tuple[dict[str, str], list]]:
        for i, profile in enumerate(data):
            yield labels(i), [(t, transform(v)) for t, v in zip(times, profile[pick], strict=True)]

    return [
        Family("DCGM_FI_DEV_GPU_UTIL", series(0)),
        Family("DCGM_FI_DEV_FB_USED", series(1)),
        Family("DCGM_FI_DEV_FB_FREE", series(1, lambda v: FB_TOTAL_MIB - v)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--window", type=int, default=3600, help="seconds")
    parser.add_argument("--step", type=int, default=120, help="seconds between samples")
    parser.add_argument("--end", type=float, default=None, help="unix time (default: now)")
    args = parser.parse_args()
    end = float(int(args.end if args.end is not None else time.time()))
    count = write_openmetrics(args.out, families(args.pods, end, args.window, args.step))
    print(f"{count} samples for {args.pods} pods in {args.out}")


if __name__ == "__main__":
    main()

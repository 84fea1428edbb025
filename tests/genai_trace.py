"""Turn the GenTD26 trace (Alibaba, Stable Diffusion serving: per-pod GPU duty
cycle and VRAM used, ~1-minute samples, 143 pods) into dcgm-exporter-shaped
series for a backfilled Prometheus.

Naming (shared with the recorded cluster built from the same trace, keep it):
pod ``sd-serving-{i:03d}`` in namespace ``genai``, container ``main``, where i is
the rank of ``container_ip`` among the sorted unique IPs of the duty-cycle file;
node ``genai-node-{i // 8:02d}``, ``gpu`` = i % 8, a deterministic ``UUID``,
``modelName`` "NVIDIA A100-SXM4-80GB". The memory file names one IP that the
duty-cycle file lacks; it has no pod and is dropped.

Series: DCGM_FI_DEV_GPU_UTIL (percent, as in the trace), DCGM_FI_DEV_FB_USED
(MiB = bytes / 2**20) and DCGM_FI_DEV_FB_FREE (81920 MiB - used). Timestamps are
shifted by a whole number of trace steps so the trace ends about an hour
before now: Prometheus serves it as recent history, and subquery steps that
are multiples of the trace step stay aligned with the samples.

Usage: python tests/genai_trace.py OUT.om   (writes OpenMetrics for promtool)
"""

from __future__ import annotations

import csv
import io
import itertools
import sys
import tarfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# The shared data folder sits next to the checkout (../shared/data).
DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-genai-v2026"
DUTY = "pod_gpu_duty_cycle_anon.tar.gz"
MEMORY = "pod_gpu_memory_used_bytes_anon.tar.gz"
NAMESPACE = "genai"
CONTAINER = "main"
MODEL = "NVIDIA A100-SXM4-80GB"
FB_TOTAL_MIB = 81920
_UUID_NAMESPACE = uuid.UUID("6f1c1c52-3a7e-4c55-9a51-2b8d0f6a0001")


def available(data_dir: Path = DATA_DIR) -> bool:
    return (data_dir / DUTY).is_file() and (data_dir / MEMORY).is_file()


def pod_name(index: int) -> str:
    return f"sd-serving-{index:03d}"


def labels_for(index: int) -> dict[str, str]:
    gpu = index % 8
    return {
        "gpu": str(gpu),
        "UUID": f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'genai/{index}')}",
        "device": f"nvidia{gpu}",
        "modelName": MODEL,
        "Hostname": f"genai-node-{index // 8:02d}",
        "namespace": NAMESPACE,
        "pod": pod_name(index),
        "container": CONTAINER,
    }


def read_csv(archive: Path) -> Iterator[dict[str, str]]:
    """Rows of the one CSV inside a .tar.gz."""
    with tarfile.open(archive, "r:gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".csv"))
        handle = tar.extractfile(member)
        assert handle is not None
        yield from csv.DictReader(io.TextIOWrapper(handle, encoding="utf-8"))


@dataclass
class Trace:
    """The trace, keyed by pod index, timestamps already shifted."""

    ips: list[str]  # index -> container_ip
    util: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # percent
    fb_mib: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    step: float = 57.0
    shift: float = 0.0
    start: float = 0.0
    end: float = 0.0

    @property
    def pods(self) -> list[str]:
        return [pod_name(i) for i in range(len(self.ips))]


def load(data_dir: Path = DATA_DIR, *, now: float | None = None, margin_s: float = 3600.0) -> Trace:
    duty = [(r["container_ip"], float(r["timestamp_anon"]), float(r["value"])) for r in read_csv(data_dir / DUTY)]
    memory = [(r["container_ip"], float(r["timestamp_anon"]), float(r["value"])) for r in read_csv(data_dir / MEMORY)]
    ips = sorted({ip for ip, _, _ in duty})
    index = {ip: i for i, ip in enumerate(ips)}
    stamps = sorted({ts for _, ts, _ in duty} | {ts for _, ts, _ in memory})
    step = Counter(round(b - a, 3) for a, b in itertools.pairwise(stamps)).most_common(1)[0][0]
    now = time.time() if now is None else now
    # a whole number of steps, so multiples of the step stay multiples
    shift = ((now - margin_s - stamps[-1]) // step) * step
    trace = Trace(ips=ips, step=step, shift=shift, start=stamps[0] + shift, end=stamps[-1] + shift)
    for ip, ts, value in duty:
        trace.util.setdefault(index[ip], []).append((ts + shift, value))
    for ip, ts, value in memory:
        if ip in index:
            trace.fb_mib.setdefault(index[ip], []).append((ts + shift, value / 2**20))
    for series in (*trace.util.values(), *trace.fb_mib.values()):
        series.sort()
    return trace


def families(trace: Trace) -> list:
    """The trace as prometheus_server.Family objects."""
    from tests.prometheus_server import Family

    def series(data: dict[int, list[tuple[float, float]]], transform=lambda v: v):
        for i in sorted(data):
            yield labels_for(i), [(ts, transform(v)) for ts, v in data[i]]

    return [
        Family("DCGM_FI_DEV_GPU_UTIL", series(trace.util)),
        Family("DCGM_FI_DEV_FB_USED", series(trace.fb_mib)),
        Family("DCGM_FI_DEV_FB_FREE", series(trace.fb_mib, lambda v: FB_TOTAL_MIB - v)),
    ]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    if not available():
        print(f"GenTD26 data not found in {DATA_DIR}", file=sys.stderr)
        return 1
    from tests.prometheus_server import write_openmetrics

    trace = load()
    count = write_openmetrics(Path(argv[0]), families(trace))
    print(
        f"{count} samples, {len(trace.ips)} pods, {trace.start:.0f}..{trace.end:.0f} (step {trace.step:g}s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for `tests.` imports
    sys.exit(main(sys.argv[1:]))

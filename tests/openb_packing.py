"""The what-if packer on Alibaba's GPU trace (alibaba-gpu-v2023, "openb").

The default pod list (8,152 pods, 7,064 of them asking for GPUs; 3,078 ask for
a fraction of one: ``gpu_milli`` < 1000) on the real node list (1,523 nodes,
6,212 GPUs), three ways:

- ``whole``: every GPU pod gets whole GPUs (``num_gpu``), as a stock device
  plugin hands them out: pods placed in arrival order, first fit;
- ``shared``: the same pods, in the same order, but a fractional pod takes
  only its ``gpu_milli`` of one GPU (best fit inside the node);
- ``pool``: the what-if's offline packer (gpuaudit.report.packing.pack_pool)
  on the fractional pods alone, against the lower bound the trace implies
  (their summed ``gpu_milli``, and one GPU each for those above 500).

Used by tests/test_report_packing.py and bench/pack_alibaba.py.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from pathlib import Path
from typing import Any

from gpuaudit.report.packing import NodeSpace, PodDemand, pack_pool, place_on_nodes

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-gpu-v2023"
NODES_CSV = Path("csv") / "openb_node_list_all_node.csv"
PODS_CSV = Path("csv") / "openb_pod_list_default.csv"
UNIT = 1000  # the trace's gpu_milli


def available(data_dir: Path = DATA_DIR) -> bool:
    return (data_dir / NODES_CSV).is_file() and (data_dir / PODS_CSV).is_file()


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def compare(data_dir: Path = DATA_DIR) -> dict[str, Any]:
    nodes = [
        NodeSpace(n["sn"], int(n["gpu"]), float(n["cpu_milli"]), float(n["memory_mib"]))
        for n in _read(data_dir / NODES_CSV)
    ]
    rows = sorted(_read(data_dir / PODS_CSV), key=lambda r: (int(r["creation_time"]), r["name"]))
    gpu_rows = [r for r in rows if int(r["num_gpu"]) > 0]
    fractions = [int(r["gpu_milli"]) for r in gpu_rows if int(r["gpu_milli"]) < UNIT]

    def demands(shared: bool) -> list[PodDemand]:
        out = []
        for r in rows:
            gpus, milli = int(r["num_gpu"]), int(r["gpu_milli"])
            share = milli if shared and gpus == 1 and milli < UNIT else UNIT
            out.append(PodDemand(r["name"], gpus, share if gpus else 0, float(r["cpu_milli"]), float(r["memory_mib"])))
        return out

    gpu_names = {r["name"] for r in gpu_rows}
    results: dict[str, Any] = {
        "nodes": len(nodes),
        "gpus": sum(n.gpus for n in nodes),
        "gpu_pods": len(gpu_rows),
        "fractional_pods": len(fractions),
        "demand_whole_gpus": sum(int(r["num_gpu"]) for r in gpu_rows),
        "demand_gpu_equivalents": round(
            sum(int(r["gpu_milli"]) / UNIT if int(r["gpu_milli"]) < UNIT else int(r["num_gpu"]) for r in gpu_rows),
            1,
        ),
    }
    for mode, shared in (("whole", False), ("shared", True)):
        placement = place_on_nodes(nodes, demands(shared), unit=UNIT)
        row = placement.as_dict(UNIT)
        row["gpu_pods_unplaced"] = sum(1 for name in placement.unplaced if name in gpu_names)
        row["gpu_pods_placed"] = len(gpu_rows) - row["gpu_pods_unplaced"]
        results[mode] = row
    packed = pack_pool(Counter((m,) for m in fractions), (UNIT,))
    results["pool"] = {
        "fractional_pods": len(fractions),
        "gpus_as_whole": len(fractions),
        "gpus_packed": packed.gpus,
        "lower_bound": max(math.ceil(sum(fractions) / UNIT), sum(1 for m in fractions if m > 500)),
        "gpu_equivalents": round(sum(fractions) / UNIT, 1),
    }
    return results

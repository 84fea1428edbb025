#!/usr/bin/env bash
# Device check for the NVML sampler, on a machine with a real NVIDIA GPU.
#
# Starts a process that holds a large buffer on GPU 0 and then idles, samples
# with `gpuaudit sample` (run as `python -m gpuaudit sample`), turns the
# samples into telemetry with gpuaudit.sources.samples and checks that the GPU
# holding the buffer comes out resident-idle. Exit 0: it did; 1: it did not;
# 2: the check could not run (no GPU, no pynvml, nothing could allocate).
#
#   OUT=dir DURATION=60s HOLD_MIB=8192 bench/device_check.sh
#
# The buffer is allocated with torch if present, else cupy, else the CUDA
# runtime (libcudart) through ctypes, else the driver API (libcuda, which every
# driver install has).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-$(mktemp -d)}"
DURATION="${DURATION:-60s}"
INTERVAL="${INTERVAL:-1s}"
HOLD_MIB="${HOLD_MIB:-8192}"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ] && .venv/bin/python -c "" 2>/dev/null; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"

if ! "$PY" -c "import pynvml" 2>/dev/null; then
  echo "device_check: pynvml (nvidia-ml-py) is not importable with $PY" >&2
  exit 2
fi

READY="$OUT/holder.ready"
rm -f "$READY"
HOLD_MIB="$HOLD_MIB" READY="$READY" CUDA_DEVICE_ORDER=PCI_BUS_ID "$PY" - <<'EOF' &
import ctypes
import glob
import os
import time

size = int(os.environ["HOLD_MIB"]) * 2**20


def with_torch():
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    buf = torch.ones(size, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    return buf


def with_cupy():
    import cupy

    buf = cupy.ones(size, dtype=cupy.uint8)
    cupy.cuda.Device(0).synchronize()
    return buf


def _load(names, patterns):
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                return ctypes.CDLL(path)
            except OSError:
                pass
    raise RuntimeError(f"none of {names} found")


def with_cudart():
    lib = _load(["libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"],
                ["/usr/local/cuda*/lib64/libcudart.so*",
                 "/usr/local/lib/python3*/*-packages/nvidia/cuda_runtime/lib/libcudart.so*",
                 "/usr/lib/python3*/*-packages/nvidia/cuda_runtime/lib/libcudart.so*"])
    ptr = ctypes.c_void_p()
    for call, args in (("cudaSetDevice", (0,)),
                       ("cudaMalloc", (ctypes.byref(ptr), ctypes.c_size_t(size))),
                       ("cudaMemset", (ptr, 1, ctypes.c_size_t(size))),
                       ("cudaDeviceSynchronize", ())):
        rc = getattr(lib, call)(*args)
        if rc:
            raise RuntimeError(f"{call} returned {rc}")
    return ptr


def with_driver_api():
    lib = _load(["libcuda.so.1", "libcuda.so"], [])
    device, context, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(device), 0)),
                       ("cuCtxCreate_v2", (ctypes.byref(context), 0, device)),
                       ("cuMemAlloc_v2", (ctypes.byref(ptr), ctypes.c_size_t(size))),
                       ("cuMemsetD8_v2", (ptr, 1, ctypes.c_size_t(size))),
                       ("cuCtxSynchronize", ())):
        rc = getattr(lib, call)(*args)
        if rc:
            raise RuntimeError(f"{call} returned {rc}")
    return ptr


held, errors = None, []
for way in (with_torch, with_cupy, with_cudart, with_driver_api):
    try:
        held = way()
        method = way.__name__
        break
    except Exception as exc:  # try the next way
        errors.append(f"{way.__name__}: {exc}")
if held is None:
    print("holder: could not allocate:", "; ".join(errors), flush=True)
    raise SystemExit(3)
with open(os.environ["READY"], "w") as ready:
    ready.write(f"{os.getpid()} {method}\n")
print(f"holder: pid {os.getpid()} holds {size >> 20} MiB on GPU 0 via {method}", flush=True)
while True:  # resident and idle until killed
    time.sleep(3600)
EOF
HOLDER=$!
trap 'kill "$HOLDER" 2>/dev/null || true' EXIT

for _ in $(seq 1 240); do
  [ -s "$READY" ] && break
  if ! kill -0 "$HOLDER" 2>/dev/null; then
    echo "device_check: the holder could not allocate GPU memory" >&2
    exit 2
  fi
  sleep 0.5
done
[ -s "$READY" ] || { echo "device_check: the holder did not get ready" >&2; exit 2; }

"$PY" -m gpuaudit sample --interval "$INTERVAL" --duration "$DURATION" \
  -o "$OUT/samples.jsonl"

HOLD_MIB="$HOLD_MIB" OUT="$OUT" READY="$READY" "$PY" - <<'EOF'
import json
import os
from pathlib import Path

from gpuaudit.sources.samples import aggregate_samples

out = Path(os.environ["OUT"])
hold_mib = int(os.environ["HOLD_MIB"])
pid, method = Path(os.environ["READY"]).read_text().split()
agg = aggregate_samples([out / "samples.jsonl"])
(out / "aggregate.json").write_text(json.dumps(agg, indent=2))
records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
seen = any(p.get("pid") == int(pid) for r in records for p in (r.get("processes") or []))
errors = sorted({e for r in records for e in (r.get("errors") or [])})
print(f"signals: {agg['signals']}")
print(f"holder pid {pid} ({method}) in NVML's process list: {seen}; record errors: {errors}")
print(f"{'gpu':>4} {'mig':>4} {'pod':>10} {'fb_mean_mib':>12} {'compute_mean':>12} "
      f"{'resident':>9} {'res_idle':>9} {'coverage':>9}")
for g in agg["gpus"]:
    print(f"{g['gpu']:>4} {g['mig_id'] or '-':>4} {str(g['pod'] or g.get('pod_uid') or '-')[:10]:>10} "
          f"{g['fb_used_mean_mib'] or 0:>12.0f} {g['compute_mean'] if g['compute_mean'] is not None else float('nan'):>12.3f} "
          f"{g['resident_fraction'] or 0:>9.2f} {g['resident_idle_fraction'] if g['resident_idle_fraction'] is not None else float('nan'):>9.2f} "
          f"{g['coverage']:>9.2f}")
row = max(agg["gpus"], key=lambda g: g["fb_used_mean_mib"] or 0)
holds = (row["fb_used_mean_mib"] or 0) >= 0.9 * hold_mib
idle = (row["resident_idle_fraction"] or 0) >= 0.5
print(f"verdict: GPU {row['gpu']} (uuid {row['uuid']}) holds the buffer: {holds}; "
      f"resident-idle: {idle} (fraction {row['resident_idle_fraction']})")
raise SystemExit(0 if holds and idle else 1)
EOF

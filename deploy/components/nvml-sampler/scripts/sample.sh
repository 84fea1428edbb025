#!/bin/sh
# NVML sampler loop (DaemonSet gpuaudit-nvml-sampler), one file per node and
# SAMPLE_FILE_DURATION (an hour): $SAMPLES_DIR/<node>-<time>.jsonl. A file is
# written as .part and renamed when it is complete, so the audit (which reads *.jsonl) never
# reads a half-written line. Files older than SAMPLES_KEEP_DAYS are deleted:
# what is left is the window the audit judges.
set -eu

dir=${SAMPLES_DIR:-/samples}
node=${NODE_NAME:?the DaemonSet sets NODE_NAME from spec.nodeName}
keep_minutes=$(( ${SAMPLES_KEEP_DAYS:-7} * 1440 ))
mkdir -p "$dir"

while :; do
  file="$dir/$node-$(date -u +%Y-%m-%dT%H%M%SZ).jsonl"
  gpuaudit sample --node "$node" --proc-root "${PROC_ROOT:-/host/proc}" \
    --interval "${SAMPLE_INTERVAL:-60s}" --duration "${SAMPLE_FILE_DURATION:-1h}" --output "$file.part"
  mv "$file.part" "$file"
  find "$dir" -name "$node-*" -type f -mmin +"$keep_minutes" -delete
done

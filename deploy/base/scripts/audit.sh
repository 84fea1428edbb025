#!/bin/sh
# Daily audit (CronJob gpuaudit-audit). Arguments name the cluster source
# (--in-cluster in the CronJob; --kubeconfig FILE when tried by hand).
#
# Writes, under $DATA_DIR (default /data):
#   audits/<time>.json        the audit, JSON v1 (docs/output.md)
#   snapshots/<time>.json.gz  what it read, to replay: gpuaudit audit --snapshot FILE
#   history.db                one summary row per run, for the report's trend
#   reports/metrics.txt       this run's metrics, OpenMetrics (atomically replaced):
#                             the report server's /metrics
# and the text report to stdout (kubectl logs job/...).
#
# Sent when set (empty: off), read by gpuaudit itself from the environment:
#   GPUAUDIT_PUSHGATEWAY_URL  push the metrics to this Pushgateway
#   GPUAUDIT_WEBHOOK_URL      post the headline and top findings (Slack or JSON;
#   GPUAUDIT_WEBHOOK_FORMAT   slack|json) -- the URL from a Secret
#   GPUAUDIT_REPORT_URL       the link the message carries
# A notification or push that fails is an exit 2 after every file is written.
#
# Exit 0 when the audit ran, whatever it found: findings at or above fail_on
# (gpuaudit's exit 1) are the result, not a failure of the Job. Exit 2 (bad
# config, an API or RBAC error that left the result partial) fails the Job,
# so that monitoring sees it; everything that could be audited is still written.
set -eu

data=${DATA_DIR:-/data}
config=${GPUAUDIT_CONFIG:-/etc/gpuaudit/gpuaudit.yaml}
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
mkdir -p "$data/audits" "$data/snapshots" "$data/reports"

if [ -n "${PROMETHEUS_URL:-}" ]; then
  set -- "$@" --prometheus "$PROMETHEUS_URL" --window "${WINDOW:-7d}"
fi
# NVML samples from the optional sampler DaemonSet (deploy/components/nvml-sampler).
if [ -n "${SAMPLES_DIR:-}" ]; then
  for file in "$SAMPLES_DIR"/*.jsonl; do
    if [ -f "$file" ]; then set -- "$@" --samples "$file"; fi
  done
fi

status=0
gpuaudit audit "$@" \
  --config "$config" \
  --history "$data/history.db" \
  --save-snapshot "$data/snapshots/$stamp.json.gz" \
  --format text \
  --format "json=$data/audits/$stamp.json" \
  --format "openmetrics=$data/reports/metrics.txt" || status=$?

find "$data/audits" "$data/snapshots" -type f -mtime +"${KEEP_DAYS:-90}" -delete
[ "$status" -le 1 ]

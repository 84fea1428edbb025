#!/bin/sh
# Monthly capacity review (CronJob gpuaudit-report, on the 1st): the month
# that just ended, from the last snapshot the daily audit saved in it (no
# second pass over the API server) and the run history the audits keep.
# Arguments go to `gpuaudit report`: the cluster source (--in-cluster), used
# only when no snapshot of an earlier month exists yet (a first run), then
# the report covers the current month so far.
#
# Writes $DATA_DIR/reports/<YYYY-MM>/report.{html,md,json} and metrics.txt
# (the review's audit as OpenMetrics), and prints report.md to stdout
# (kubectl logs job/...). GPUAUDIT_PUSHGATEWAY_URL, GPUAUDIT_WEBHOOK_URL,
# GPUAUDIT_WEBHOOK_FORMAT and GPUAUDIT_REPORT_URL, when set (empty: off), are
# read by gpuaudit itself: the message carries the review's decision and
# first actions. A failed push or notification exits 2 after the files are
# written and report.md printed.
set -eu

data=${DATA_DIR:-/data}
config=${GPUAUDIT_CONFIG:-/etc/gpuaudit/gpuaudit.yaml}
this_month=$(date -u +%Y-%m)

# Snapshot names are UTC times (scripts/audit.sh), so the glob sorts them in
# time order: the last one not of this month is the end of the last month.
latest=""
for file in "$data"/snapshots/*.json.gz; do
  case $(basename "$file") in
    "$this_month"*) ;;
    *) if [ -f "$file" ]; then latest=$file; fi ;;
  esac
done
if [ -n "$latest" ]; then
  period=$(basename "$latest" | cut -c1-7)
  set -- --snapshot "$latest" "$@"
else
  period=$this_month
fi
out="$data/reports/$period"

status=0
gpuaudit report "$@" \
  --config "$config" \
  --history "$data/history.db" \
  --period "$period" \
  --out "$out" \
  --output "openmetrics=$out/metrics.txt" || status=$?
if [ -f "$out/report.md" ]; then cat "$out/report.md"; fi
exit "$status"

#!/bin/sh
# Monthly capacity review (CronJob gpuaudit-report, on the 1st): the month
# that just ended, from the last snapshot the daily audit saved in it (no
# second pass over the API server) and the run history the audits keep.
# Arguments go to `gpuaudit report`: the cluster source (--in-cluster), used
# only when no snapshot of an earlier month exists yet (a first run), then
# the report covers the current month so far.
#
# Writes $DATA_DIR/reports/<YYYY-MM>/report.{html,md,json} and prints
# report.md to stdout (kubectl logs job/...).
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

gpuaudit report "$@" \
  --config "$config" \
  --history "$data/history.db" \
  --period "$period" \
  --out "$out"
cat "$out/report.md"

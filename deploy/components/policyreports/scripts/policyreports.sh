#!/bin/sh
# Write the PolicyReports of the latest daily audit (CronJob
# gpuaudit-policyreports, with the audit's read-only ServiceAccount) to the
# data volume; the CronJob gpuaudit-policyreports-apply applies that file
# with kubectl and prunes the reports it no longer holds. It replays the
# snapshot the audit saved, so the reports say exactly what the audit's JSON
# says and the API server and Prometheus are not read twice. Arguments are
# the cluster source (--in-cluster), used only before the first snapshot
# exists.
set -eu

data=${DATA_DIR:-/data}
config=${GPUAUDIT_CONFIG:-/etc/gpuaudit/gpuaudit.yaml}
out=${REPORTS_FILE:-$data/policyreports/policyreports.yaml}
mkdir -p "$(dirname "$out")"

latest=""
for file in "$data"/snapshots/*.json.gz; do
  if [ -f "$file" ]; then latest=$file; fi
done
if [ -n "$latest" ]; then
  set -- --snapshot "$latest" "$@"
fi

# As in audit.sh: exit 1 means findings, which is what is being published.
status=0
gpuaudit audit "$@" --config "$config" --format policyreport --output-file "$out" || status=$?
[ "$status" -le 1 ]

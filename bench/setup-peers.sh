#!/usr/bin/env bash
# Install what the benchmarks compare against and profile with, outside the
# project's dependencies:
#   bench/.venv-checkov  checkov (the peer), in a virtualenv of its own
#   .venv                pyinstrument (bench/profile.py runs inside gpuaudit's venv)
# Idempotent. Needs PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x bench/.venv-checkov/bin/checkov ]; then
  python3 -m venv bench/.venv-checkov
  bench/.venv-checkov/bin/pip install -q --upgrade pip
  bench/.venv-checkov/bin/pip install -q checkov
fi
bench/.venv-checkov/bin/checkov --version

[ -x .venv/bin/python ] || { echo "no .venv: run scripts/test.sh (or pip install -e .) first" >&2; exit 1; }
.venv/bin/python -c "import pyinstrument" 2>/dev/null || .venv/bin/pip install -q pyinstrument
.venv/bin/python -c "import pyinstrument; print('pyinstrument', pyinstrument.__version__)"

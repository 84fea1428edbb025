#!/usr/bin/env bash
# The README's test command: a venv with the test extras, the official kubectl
# (embedded kustomize) and helm in .tools/bin, then ruff and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[test]'
.venv/bin/python scripts/install-kube-tools.py .tools/bin
export PATH="$PWD/.tools/bin:$PWD/.venv/bin:$PATH"
ruff check .
pytest -q "$@"

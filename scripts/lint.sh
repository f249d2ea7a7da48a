#!/usr/bin/env bash
# Lint the whole tree: `ruff check` (rules in pyproject.toml), `ruff format --check`, and the
# import contracts of .importlinter (`lint-imports`: layers, independence, qpinfer never imports
# qptables).
# Installs the package with its test extras (which pin ruff) into .venv like scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports --no-cache

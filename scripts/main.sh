#!/usr/bin/env bash
# The main job. For now: install the package (with the table-building extras) into .venv and
# print a small sigma* grid beside EP's sigma. Needs only python3 (>= 3.11) with venv and pip.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[tables]'
exec .venv/bin/python -m qpinfer.demo_grid "$@"

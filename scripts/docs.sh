#!/usr/bin/env bash
# Build the docs site (Sphinx + MyST + numpydoc; docs/conf.py) into docs/_build/html with every
# warning an error. Installs the docs extra into .venv first. Extra arguments go to sphinx-build.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[docs]'
rm -rf docs/_build docs/api/generated
exec .venv/bin/python -m sphinx -W --keep-going -n -b html docs docs/_build/html "$@"

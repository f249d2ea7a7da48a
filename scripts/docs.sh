#!/usr/bin/env bash
# Build the docs site (Sphinx + MyST + numpydoc; docs/conf.py) into docs/_build/html with every
# warning an error, running the example gallery (examples/ -> docs/auto_examples). Installs the docs
# extra (everything the build imports) into .venv first; links to other projects' docs resolve
# offline, through docs/_intersphinx (scripts/intersphinx_inventories.py). Extra arguments go to
# sphinx-build.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[docs]'
rm -rf docs/_build docs/api/generated docs/auto_examples
exec .venv/bin/python -m sphinx -W --keep-going -n -b html docs docs/_build/html "$@"

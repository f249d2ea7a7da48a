#!/usr/bin/env bash
# The main job: install the package into .venv, build a small verified probit sigma* table on the
# embedded default (a local dask cluster, one worker process per core), then use it for GP
# classification with EP and QP. Needs only python3 (>= 3.11) with venv and pip.
# The paper's full grid (20001 x 2001 per label) is the same command with `--grid paper`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[tables,data]'
mkdir -p out
.venv/bin/qptables build probit out/probit-small.zarr \
    --mu -10 10 0.01 --log10-sigma -1 1 0.01 --force "$@"
.venv/bin/qptables info out/probit-small.zarr
exec .venv/bin/python scripts/main_job.py out/probit-small.zarr

#!/usr/bin/env bash
# The main job: install the package into .venv, build the verified probit sigma* table
# (reduced coordinates, Chebyshev cells: every cavity, ~1e-13) on the embedded default (a local
# dask cluster, one worker process per core), then use it for GP classification with EP and QP.
# Needs only python3 (>= 3.11) with venv and pip. The paper's full grid (App. J, 20001 x 2001 per
# label, linear interpolation) is `qptables build probit OUT --grid paper`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[tables,data]'
mkdir -p out
.venv/bin/qptables build probit out/probit-cells.zarr --grid cells --force "$@"
.venv/bin/qptables info out/probit-cells.zarr
exec .venv/bin/python scripts/main_job.py out/probit-cells.zarr

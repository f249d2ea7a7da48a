#!/usr/bin/env bash
# Run the test suite: install the package with its test extras into .venv, then pytest on two
# processes (pytest-xdist, each test file on one of them so that its module fixtures are made
# once; `-n 0` runs one process), printing the 25 slowest tests.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -m slow`, `... tests/sigma/test_sigma_qp.py`).
set -euo pipefail
cd "$(dirname "$0")/.."
# one BLAS thread per process: on 2 cores, threaded BLAS on the suite's small matrices is
# many times slower (tests that start dask workers run several processes at once)
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
exec .venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=25 "$@"

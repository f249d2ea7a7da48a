#!/usr/bin/env bash
# A user's install, checked: build a wheel from this tree, install it into a fresh venv (nothing
# from the repository on sys.path), run the README's quick start with the `data` extra alone,
# then add the `tables` extra and run every README example (the table build included), with
# warnings as errors (scripts/run_examples.py). Used by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"${PYTHON:-python3}" -m venv "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$py" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$work/dist" .
wheel="$(ls "$work"/dist/quantile_propagation-*.whl)"
echo "check_wheel: $(basename "$wheel")"
"$py" -m pip install --quiet --disable-pip-version-check "${wheel}[data]"
cp README.md scripts/run_examples.py "$work/"
cd "$work"
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
"$py" -c "import qpinfer, sys; assert 'site-packages' in qpinfer.__file__, qpinfer.__file__; print('qpinfer', qpinfer.__version__, 'from', qpinfer.__file__)"
echo "check_wheel: the quick start with [data]"
"$py" run_examples.py --first 1 README.md
echo "check_wheel: every README example with [data,tables]"
"$py" -m pip install --quiet --disable-pip-version-check "${wheel}[data,tables]"
"$py" run_examples.py README.md

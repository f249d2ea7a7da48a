"""The shipped logit and poisson_log v2 tables (issue #15; boxes: qpinfer.tables.boxes.logit):
lookups within 1e-12 of the exact kernel over the claimed domain without fallbacks, every other
finite query answered exactly (counted fallbacks) or refused, the log-link table serving every count
0..1e5 with no count axis, the stored mpmath verification, and the estimators' default use.
(The bit-for-bit tile rebuild is tests/test_shipped_tables.py, parametrized over SHIPPED.)"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _helpers import blobs, coal

import qpinfer
from qpinfer.likelihoods.poisson_log import mode_frame
from qpinfer.tables.reduced import open_reduced
from qpinfer.tables.shipped import open_shipped, shipped_path


def _table(name):
    return open_reduced(shipped_path(name))


def _check(name, mu, sigma, y):
    table = _table(name)
    got = table.sigma_qp(mu, sigma, y)
    exact = qpinfer.sigma_qp(name, mu, sigma, y)
    err = np.max(np.abs(got / exact - 1.0))
    return err, table.fallback_count


def test_stores_record_their_mpmath_verification():
    for name in ("logit", "poisson_log"):
        ver = _table(name).attrs["verification"]
        assert ver["passed"] and ver["mpmath_points"] >= 24
        assert ver["mpmath_max_rel_err"] <= 1e-12 and ver["kernel_max_rel_err"] <= 1e-12


def test_logit_lookups_match_the_kernel_over_the_claimed_domain():
    """Claimed: s in [1e-3, 10^0.5] and [20, 1e6], every mu and label (below 1e-3 and far out
    the closed forms)."""
    rng = np.random.default_rng(11)
    n = 40_000
    sigma = np.where(
        rng.random(n) < 0.5, 10.0 ** rng.uniform(-5, 0.5, n), 10.0 ** rng.uniform(1.31, 6, n)
    )
    mu = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-3, 13, n)
    mu = np.where(rng.random(n) < 0.5, mu, rng.normal(0, 3, n) * sigma)  # near the step
    y = rng.choice([-1.0, 1.0], n)
    err, fallbacks = _check("logit", mu, sigma, y)
    assert err <= 1e-12 and fallbacks == 0


def test_logit_mid_range_falls_back_to_the_exact_kernel():
    mu, sigma = np.array([0.3, -40.0, 12.0]), np.array([5.0, 9.0, 15.0])
    table = _table("logit")
    got = table.sigma_qp(mu, sigma, 1.0)
    np.testing.assert_allclose(got, qpinfer.sigma_qp("logit", mu, sigma, 1.0), rtol=2e-15)
    assert table.fallback_count == 3
    with pytest.raises(ValueError, match="^sigma must be <= 1e"):
        table.sigma_qp(0.0, 2e6, 1.0)


def test_poisson_log_table_serves_counts_0_to_1e5_like_the_kernel():
    """No count axis: every count maps to y = 0 at m' = mu + y s^2. Claimed: s <= 1 with the
    tilted mode a <= 16 (every count up to 1e5 with mu in [-40, 15] and s <= 1)."""
    rng = np.random.default_rng(12)
    n = 40_000
    y = np.floor(10.0 ** rng.uniform(0, 5, n))
    y[: n // 10] = 0.0
    y[n // 10 : n // 5] = 100_000.0
    sigma = 10.0 ** rng.uniform(-9, 0, n)
    mu = rng.uniform(-30, 15, n) - np.log1p(y) * rng.random(n)
    _, a, _, _ = mode_frame(mu, sigma, y)
    assert np.all(a <= 16.0)
    err, fallbacks = _check("poisson_log", mu, sigma, y)
    assert err <= 1e-12 and fallbacks == 0


def test_poisson_log_outside_the_boxes_is_exact_or_refused():
    table = _table("poisson_log")
    mu, sigma, y = np.array([0.0, 6e6]), np.array([3.0, 0.5]), np.array([2.0, 0.0])  # s > 1; a = 17
    np.testing.assert_allclose(
        table.sigma_qp(mu, sigma, y), qpinfer.sigma_qp("poisson_log", mu, sigma, y), rtol=2e-15
    )
    assert table.fallback_count == 2
    for bad, arg in (((0.0, 1.0, 1.5), "y"), ((0.0, 1.0, -1.0), "y"), ((0.0, 2e4, 1.0), "sigma")):
        with pytest.raises(ValueError, match=rf"^{arg}\b"):
            table.sigma_qp(*bad)


def test_estimators_use_the_shipped_tables_and_match_exact_qp(monkeypatch, tmp_path):
    monkeypatch.setenv("QPINFER_TABLES", str(tmp_path / "no-tables"))
    X, y = blobs(n=40, seed=2)
    kw = {"likelihood": "logit", "variance": 2.0, "length_scale": 0.8, "optimizer": None}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "no table" warning
        tab = qpinfer.GPClassifier("qp", **kw).fit(X, y)
    exact = qpinfer.GPClassifier("qp", table="exact", **kw).fit(X, y)
    assert type(tab.table_).__name__ == "ReducedTable"
    assert abs(tab.log_marginal_likelihood_ - exact.log_marginal_likelihood_) <= 1e-9
    Xc, yc = coal()
    kw = {"link": "log", "variance": 0.6, "length_scale": 1.9, "optimizer": None}
    # the shipped table is opened once per process, its fallback count shared by every fit in
    # it (other tests' fits run into its gap): this fit's own fallbacks are the difference
    before = open_shipped("poisson_log").fallback_count
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tab = qpinfer.GPPoissonRegressor("qp", **kw).fit(Xc, yc)
    exact = qpinfer.GPPoissonRegressor("qp", table="exact", **kw).fit(Xc, yc)
    assert tab.table_ is open_shipped("poisson_log")
    assert tab.table_.fallback_count - before == 0
    assert abs(tab.log_marginal_likelihood_ - exact.log_marginal_likelihood_) <= 1e-9

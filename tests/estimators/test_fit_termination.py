"""Every fit ends, and ends honestly: hyperparameter searches that hit a failing
evaluation backtrack instead of stopping at their start; a search that fails, stalls or ends on a
bound says so; EP on Student-t data with outliers at +-1e12 converges; a fit's inner loops have a
cap; huge dense fits and overflowing feature scales are named before any heavy work."""

from __future__ import annotations

import warnings

import mpmath
import numpy as np
import pytest

from qpinfer import GPClassifier, GPPoissonRegressor
from qpinfer.estimators.base import LargeDenseFitWarning
from qpinfer.estimators.student_t_regressor import GPStudentTRegressor
from qpinfer.inference.optimize import MAX_UNCONVERGED_EVALUATIONS, BoundWarning, OptimizerWarning
from qpinfer.likelihoods.student_t import StudentT


def _counts_with_outlier():
    """20 counts ~ Poisson(3) on a 1-d grid plus one count of 1000."""
    rng = np.random.default_rng(0)
    X = np.linspace(0.0, 10.0, 21)[:, None]
    counts = rng.poisson(3.0, 21)
    counts[10] = 1000
    return X, counts


def _fit_recording(est, X, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    return [w for w in caught if issubclass(w.category, OptimizerWarning)]


@pytest.fixture(scope="module")
def vb_log_link():
    X, counts = _counts_with_outlier()
    return GPPoissonRegressor(method="vb", link="log").fit(X, counts)


@pytest.mark.parametrize("method", ["ep", "qp", "laplace"])
def test_log_link_search_backtracks_from_a_failing_first_step(method, vb_log_link):
    """The first L-BFGS-B step goes to the bounds, where inference fails; the search must
    backtrack and fit (before: it stopped at its start, evidence -298.6 vs VB's ELBO -70.7)."""
    X, counts = _counts_with_outlier()
    est = GPPoissonRegressor(method=method, link="log")
    optimizer_warnings = _fit_recording(est, X, counts)
    start = np.zeros(2)  # variance 1, length scale 1: the defaults
    assert not np.allclose(est.kernel_.theta, start)
    at_start = est.log_marginal_likelihood(start)
    # far above the start's evidence, and at least VB's ELBO (a lower bound of the evidence;
    # EP's and Laplace's approximations of it are not bounds, hence one nat of slack)
    assert est.log_marginal_likelihood_ > at_start + 100.0
    assert est.log_marginal_likelihood_ > vb_log_link.log_marginal_likelihood_ - 1.0
    assert optimizer_warnings == []


@pytest.mark.parametrize("method", ["laplace", "vb"])
def test_square_link_length_scale_on_its_bound_warns(method):
    X, counts = _counts_with_outlier()
    est = GPPoissonRegressor(method=method, link="square")
    with pytest.warns(
        BoundWarning, match=r"GPPoissonRegressor\(method='.*log length_scale\[0\].* lower bound"
    ):
        est.fit(X, counts)
    assert est.kernel_.theta[1] == pytest.approx(np.log(1e-5), abs=1e-3)


def test_overflowing_feature_scale_is_refused_with_its_cause():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 2))
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(ValueError, match=r"feature 1 spans .*e\+300.* overflow"):
        GPClassifier(method="ep").fit(X * np.array([1.0, 1e300]), y)


def test_large_dense_fit_warns_before_the_heavy_work():
    """N = 15000: the warning (memory of K, O(N^3) per sweep, the sparse estimator) comes first;
    turned into an error it ends the fit before any N x N matrix exists."""
    n = 15_000
    X = np.linspace(0.0, 1.0, n)[:, None]
    y = np.arange(n) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", LargeDenseFitWarning)
        with pytest.raises(LargeDenseFitWarning, match=r"N=15000.*1\.8 GB.*SparseGPClassifier"):
            GPClassifier(method="ep").fit(X, y)


def _student_t_outliers():
    """25 rows, two outliers at +-1e12."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 5.0, (25, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(25)
    y[0], y[-1] = 1e12, -1e12
    return X, y


def _tilted_mean_mp(mu: float, sigma: float, nu: float, y: float) -> mpmath.mpf:
    """The tilted mean by mpmath quadrature (60 digits) over +-40 sigma about a cavity far from
    y (the t factor's lobe at y holds no mass there), as ``mu + E[f - mu]``."""
    with mpmath.workdps(60):
        m, s, n, yy = (mpmath.mpf(v) for v in (mu, sigma, nu, y))

        def q(f):
            return mpmath.exp(-((f - m) ** 2) / (2 * s * s)) * (1 + (yy - f) ** 2 / n) ** (
                -(n + 1) / 2
            )

        nodes = [m - 40 * s, m, m + 40 * s]
        return m + mpmath.quad(lambda f: (f - m) * q(f), nodes) / mpmath.quad(q, nodes)


def test_student_t_tilted_mean_far_from_y_keeps_the_cavity_digits():
    """The tilted mean at |y - mu| = 1e12 is the cavity mean plus a shift of ~6e-13; computed as
    y + (mean - y) it carried ulp(1e12) ~ 1e-4 of noise (which kept EP from converging)."""
    lik = StudentT(4.0, 1.0)
    mu, sigma = 0.3, 0.35
    for y in (1e12, -1e12):
        ref = _tilted_mean_mp(mu, sigma, 4.0, y)
        mean, _ = lik.tilted_moments(np.array([mu]), np.array([sigma]), np.array([y]))
        # float64 holds mu + shift to half an ulp of mu; the series is exact to O((sigma/y)^2)
        assert abs(mean[0] - float(ref)) <= 2.0 * np.spacing(mu)


@pytest.mark.parametrize("method", ["ep", "qp"])
def test_student_t_outliers_at_1e12_converge_at_fixed_hyperparameters(method):
    X, y = _student_t_outliers()
    est = GPStudentTRegressor(method, optimizer=None, max_iter=200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: ConvergenceWarning after every sweep allowed
        est.fit(X, y)
    assert est.result_.converged and est.result_.n_iter < 100
    assert abs(est.predict(X[[0]])[0]) < 10.0  # the outlier is discounted


def test_student_t_outlier_fit_ends_below_its_inner_loop_cap():
    X, y = _student_t_outliers()
    est = GPStudentTRegressor("ep", max_iter=300).fit(X, y)
    assert est.result_.converged
    cap = MAX_UNCONVERGED_EVALUATIONS * est.max_iter
    assert est.n_inner_iter_total_ < cap


def test_search_stops_after_too_many_unconverged_inner_loops():
    """max_iter=2: no inner loop converges; the search stops after the cap with a warning that
    names it, instead of running L-BFGS-B's iterations at max_iter sweeps each."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((40, 2))
    y = (X[:, 0] + 0.3 * rng.standard_normal(40) > 0).astype(int)
    est = GPClassifier(method="ep", max_iter=2)
    with pytest.warns(
        OptimizerWarning,
        match=r"GPClassifier\(method='ep'\).*did not converge within max_iter=2 at 10 hyperparameter values",
    ):
        est.fit(X, y)
    assert est.n_evaluations_ == MAX_UNCONVERGED_EVALUATIONS
    assert est.n_inner_iter_total_ <= MAX_UNCONVERGED_EVALUATIONS * 2

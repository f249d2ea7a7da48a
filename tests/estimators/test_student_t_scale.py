"""The Student-t noise scale by evidence: the per-site derivative of log Z in
log(scale) against mpmath, each method's evidence gradient in (kernel, log scale) against central
finite differences of the re-converged evidence, the fit recovering a known scale, bad input."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import mpmath as mp
import numpy as np
import pytest

from qpinfer.estimators.student_t_regressor import GPStudentTRegressor
from qpinfer.likelihoods.student_t import StudentT

mp.mp.dps = 30


def _mp_tilted_score(nu, s, mu, sigma, y):
    """E_q[d log p / dlog s] under q ~ t(y - f) N(f | mu, sigma^2), by mpmath quadrature."""
    nu, s, mu, sigma, y = (mp.mpf(v) for v in (nu, s, mu, sigma, y))
    A = nu * s * s

    def w(f):
        r = y - f
        return (1 + r * r / A) ** (-(nu + 1) / 2) * mp.exp(-((f - mu) ** 2) / (2 * sigma * sigma))

    def h(f):
        r = y - f
        return -1 + (nu + 1) * r * r / (A + r * r)

    lo, hi = min(mu - 14 * sigma, y - 60 * s), max(mu + 14 * sigma, y + 60 * s)
    pts = sorted({lo, hi, mu, y, y - s, y + s, (mu + y) / 2})
    return mp.quad(lambda f: h(f) * w(f), pts) / mp.quad(w, pts)


@pytest.mark.parametrize(
    "mu, sigma",
    [(0.1, 0.05), (0.3, 1.0), (3.0, 0.5), (8.2, 1.6), (-15.8, 3.2), (2.0, 30.0)],
)  # (8.2, 1.6) and (-15.8, 3.2) are bimodal tilts (cavity far from y, |mu - y| ~ 5 sigma)
def test_site_scale_derivative_matches_mpmath(mu, sigma):
    from qpinfer.estimators.student_t_scale import ep_scale_gradient
    from qpinfer.likelihoods.student_t.canonical import stationary_points

    nu, s, y = 4.0, 0.4, 0.2
    lik = StudentT(nu, s)
    m, sd = lik.tilted_moments(np.array([mu]), np.array([sigma]), np.array([y]))
    formula = -((m - mu) * (m - y) + sd * sd) / sigma**2  # what ep_scale_gradient sums
    ref = _mp_tilted_score(nu, s, mu, sigma, y)
    assert abs(formula[0] - ref) <= 1e-11 * (1 + abs(ref)), (formula[0], ref)
    # and it is the derivative of log Z in log(scale) (central differences)
    h = 1e-5
    lz = [StudentT(nu, s * np.exp(d)).log_z(mu, sigma, y) for d in (h, -h)]
    assert abs(formula[0] - (lz[0] - lz[1]) / (2 * h)) <= 1e-7 * (1 + abs(ref))

    # ep_scale_gradient forms the cavity from a result's posterior and sites: one site
    # (tau, nu) = (0.7, 0.07) whose cavity is (mu, sigma)
    var = 1.0 / (1.0 / sigma**2 + 0.7)
    post = SimpleNamespace(var=np.array([var]), mean=np.array([var * (mu / sigma**2 + 0.07)]))
    res = SimpleNamespace(tau=np.array([0.7]), nu=np.array([0.07]), posterior=post)
    assert abs(ep_scale_gradient(res, np.array([y]), lik) - formula[0]) <= 1e-9 * (1 + abs(ref))
    if (mu, sigma) in ((8.2, 1.6), (-15.8, 3.2)):
        assert stationary_points(abs(mu - y) / s, sigma / s, nu)[3]  # bimodal indeed


def _toy(n=20, seed=1):
    rng = np.random.default_rng(seed)
    X = np.linspace(-3, 3, n)[:, None]
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
    y[::5] += 3.0
    return X, y


@pytest.mark.parametrize("method", [pytest.param("ep", marks=pytest.mark.slow), "laplace", "vb"])
def test_evidence_gradient_in_kernel_and_scale_matches_finite_differences(method):
    X, y = _toy()
    with pytest.warns(UserWarning, match="optimize_scale=True has no effect with optimizer=None"):
        r = GPStudentTRegressor(
            method, nu=4, scale=0.15, optimize_scale=True, optimizer=None, tol=1e-11, max_iter=5000
        ).fit(X, y)
    sites = r.result_.W if method == "laplace" else r.result_.tau
    assert np.sum(sites < 0) >= 2  # the negative-precision paths are exercised
    theta = np.append(r.kernel_.theta, np.log(r.scale_))
    value, grad = r.log_marginal_likelihood(theta, eval_gradient=True)
    assert grad.shape == (3,) and np.isfinite(value)
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = 1e-5
        fd = (r.log_marginal_likelihood(theta + e) - r.log_marginal_likelihood(theta - e)) / 2e-5
        assert abs(grad[i] - fd) <= 1e-5 * max(1.0, abs(fd)), (i, grad[i], fd)


@pytest.mark.parametrize("method", ["laplace", pytest.param("vb", marks=pytest.mark.slow)])
def test_fit_recovers_the_noise_scale(method):
    rng = np.random.default_rng(7)
    n, s_true = 120, 0.2
    X = rng.uniform(-3, 3, (n, 1))
    y = np.sin(X[:, 0]) + s_true * rng.standard_t(4.0, n)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = GPStudentTRegressor(method, nu=4, scale=1.0, optimize_scale=True).fit(X, y)
    assert 0.7 * s_true < r.scale_ < 1.4 * s_true
    assert r.get_params()["scale"] == 1.0  # the parameter is kept, the fit is scale_
    grad = r.log_marginal_likelihood(eval_gradient=True)[1]
    assert abs(grad[-1]) < 1e-2  # a stationary point in log(scale)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"scale_bounds": (0.0, 1.0)}, "scale_bounds"),
        ({"scale_bounds": (2.0, 1.0)}, "scale_bounds"),
        ({"scale_bounds": "wide"}, "scale_bounds"),
        ({"optimize_scale": "yes"}, "optimize_scale"),
        ({"optimize_scale": True, "scale": 10.0, "scale_bounds": (0.1, 1.0)}, "scale"),
        ({"scale": np.inf}, "scale"),
        ({"nu": -1.0}, "nu"),
        ({"nu": np.nan}, "nu"),
    ],
)
def test_bad_scale_options_name_the_argument(kwargs, match):
    X, y = _toy(8)
    with pytest.raises(ValueError, match=match):
        GPStudentTRegressor("laplace", optimizer=None, **kwargs).fit(X, y)


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_infinite_targets_name_y(bad):
    X, y = _toy(8)
    y[2] = bad
    with pytest.raises(ValueError, match="y"):
        GPStudentTRegressor("vb", optimizer=None).fit(X, y)


def test_theta_with_the_wrong_length_names_theta():
    X, y = _toy(8)
    with pytest.warns(UserWarning, match="optimize_scale"):  # the scale stays fixed
        r = GPStudentTRegressor("laplace", optimize_scale=True, optimizer=None).fit(X, y)
    with pytest.raises(ValueError, match="theta"):
        r.log_marginal_likelihood(r.kernel_.theta)

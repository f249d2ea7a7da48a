"""Minibatch sparse EP / QP for every likelihood: logit classification (binary and multi-class),
Poisson counts (square and log link) and Student-t noise (negative sites, the learned scale):
the tied fixed point against full-batch sparse EP, the energy gradient against central
differences, the tables serving the fits, dask arrays on a cluster, and fits that beat trivial
baselines."""

from __future__ import annotations

import numpy as np
import pytest

from qpinfer import (
    MiniBatchSparseGPClassifier,
    MiniBatchSparseGPPoissonRegressor,
    MiniBatchSparseGPStudentTRegressor,
)
from qpinfer.inference.power_ep import PowerMomentMatching
from qpinfer.inference.projections import QuantileMatching
from qpinfer.inference.sparse import dask_sweep
from qpinfer.inference.sparse.stochastic import (
    BatchStats,
    TiedSite,
    batch_statistics,
    cavity_of,
    posterior_of,
    proper_site_step,
)
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.likelihoods.logit import Logit
from qpinfer.likelihoods.poisson_log import PoissonLog
from qpinfer.likelihoods.poisson_square import PoissonSquare
from qpinfer.likelihoods.student_t import StudentT

da = pytest.importorskip("dask.array")

LIKELIHOODS = {
    "logit": Logit(),
    "poisson_square": PoissonSquare(),
    "poisson_log": PoissonLog(),
    "student_t": StudentT(4.0, 0.3),
}


def _targets(name: str, f: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if name == "logit":
        return np.where(rng.random(f.size) < 1 / (1 + np.exp(-2 * f)), 1.0, -1.0)
    if name == "poisson_square":
        return rng.poisson((1 + f) ** 2).astype(float)
    if name == "poisson_log":
        return rng.poisson(np.exp(f)).astype(float)
    return f + 0.3 * rng.standard_t(4.0, size=f.size)


def _state(seed: int = 1, m: int = 6):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(m, 2))
    kernel = ARDSquaredExponential(0.8, np.array([0.9, 1.3]))
    return kernel, Z


@pytest.mark.parametrize("name", list(LIKELIHOODS))
def test_minibatch_gradient_matches_central_differences(name):
    """The tied energy's batch gradient in the log hyperparameters, ``Z`` and (Student-t) the
    log noise scale against central differences of its data term, exact moments (no table: a
    table's interpolation is not smooth to the differences' precision). Step 1e-4: truncation
    ~h^2 |F'''| ~ 1e-8 relative, round-off of the quadrature (~1e-13 relative of |F| ~ 1e2)
    over h ~ 1e-9; tolerance 1e-6 of the gradient's scale. QP's gradient is EP's by
    construction (the energy at QP's sites), so EP's projection is checked."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 2))
    lik = LIKELIHOODS[name]
    y = _targets(name, np.sin(X[:, 0]), rng)
    kernel, Z = _state()
    site = TiedSite(np.eye(6) * 0.01 + 0.002, rng.normal(size=6) * 0.05)
    cav = cavity_of(site, 60, 1.0)
    scale_grad = name == "student_t"
    st = batch_statistics(
        kernel, Z, 1e-6, cav, PowerMomentMatching(lik, 1.0), X, y, True, scale_grad
    )

    def f(theta, Zp, log_scale=np.log(0.3)):
        k = kernel.with_theta(theta)
        like = StudentT(4.0, np.exp(log_scale)) if scale_grad else lik
        return batch_statistics(
            k, Zp, 1e-6, cav, PowerMomentMatching(like, 1.0), X, y, False
        ).log_z_sum

    h, th = 1e-4, kernel.theta
    g = np.array([(f(th + h * e, Z) - f(th - h * e, Z)) / (2 * h) for e in np.eye(th.size)])
    scale = max(np.max(np.abs(g)), np.max(np.abs(st.grad_Z)))
    assert np.max(np.abs(st.grad_theta - g)) <= 1e-6 * scale
    for i, j in [(0, 0), (3, 1), (5, 0)]:
        E = np.zeros_like(Z)
        E[i, j] = h
        gz = (f(th, Z + E) - f(th, Z - E)) / (2 * h)
        assert abs(st.grad_Z[i, j] - gz) <= 1e-6 * scale
    if scale_grad:
        ls = np.log(0.3)
        gs = (f(th, Z, ls + h) - f(th, Z, ls - h)) / (2 * h)
        assert abs(st.grad_log_scale - gs) <= 1e-6 * abs(gs)


def _projection(lik, method: str):
    """EP, or QP with the table shipped for the likelihood (its moment table added)."""
    from qpinfer.estimators.tables import with_moment_table
    from qpinfer.tables.choice import open_default
    from qpinfer.tables.scaled import for_likelihood

    class _Est:
        table = None

    table = for_likelihood(open_default(lik)[0], lik) if method == "qp" else None
    lik = with_moment_table(_Est, lik, table)
    return PowerMomentMatching(lik, 1.0) if method == "ep" else QuantileMatching(lik, table)


@pytest.mark.parametrize("method", ["ep", "qp"])
@pytest.mark.parametrize("name", list(LIKELIHOODS))
def test_one_full_batch_reaches_full_batch_sparse_ep_on_identical_rows(name, method):
    """With every row alike the N full-batch sparse EP sites are alike too, so tied-site EP
    (one site for all) has full-batch EP's fixed point: the minibatch loop with one batch of
    all rows (rho = 1: each step sets the tied site to the batch's mean site, as an estimator
    with batch_size >= N does), a fixed kernel and no held-out rows ends at the mean of
    :func:`qpinfer.sparse.run_sparse_pep`'s sites (a contraction run to round-off: 1e-8
    relative); the square link's both start on the positive branch."""
    from qpinfer.inference.sparse.minibatch import (
        LabelTarget,
        LocalRunner,
        MinibatchSettings,
        ValueTarget,
        fit_minibatch,
    )
    from qpinfer.inference.sparse.pseudo_points import pseudo_point_prior
    from qpinfer.sparse import run_sparse_pep

    n = 40
    projection = _projection(LIKELIHOODS[name], method)
    kernel, Z = _state()
    y = {"logit": 1.0, "poisson_square": 3.0, "poisson_log": 2.0, "student_t": 0.4}[name]
    X, Y = np.repeat(np.array([[0.3, -0.2]]), n, axis=0), np.full(n, y)
    if name == "logit":
        target = LabelTarget(np.array([-1.0, 1.0]), projection.likelihood)
    else:
        target = ValueTarget(projection.likelihood, lambda v, start: np.asarray(v, float))
    s = MinibatchSettings(
        batch_size=n,
        batch_parts=1,
        max_epochs=200,
        learning_rate=1.0,
        validation_fraction=0.0,
        n_iter_no_change=1,
        tol=1e-4,
        optimize_kernel=False,
        optimize_inducing=False,
        jitter=1e-6,
        seed=0,
        verbose=False,
    )
    tied = fit_minibatch(kernel, Z, target, n, projection, LocalRunner(X, Y), s).site
    prior = pseudo_point_prior(kernel, X, Z, 1e-6)
    init = None  # the square link: both on the positive branch (sites at f = sqrt(y), tau 4)
    if name == "poisson_square":
        init = (np.full(n, 4.0), np.full(n, 4.0 * np.sqrt(y)))
    full = run_sparse_pep(prior.A, prior.h, Y, projection, init=init, tol=1e-12, max_iter=2000)
    a = prior.A[:, 0]
    np.testing.assert_allclose(full.tau, full.tau[0], rtol=1e-9)
    tol = 1e-8 * (abs(full.tau[0]) * (a @ a) + abs(full.nu[0]) * np.abs(a).max())
    np.testing.assert_allclose(tied.prec, full.tau[0] * np.outer(a, a), rtol=0, atol=tol)
    np.testing.assert_allclose(tied.shift, full.nu[0] * a, rtol=0, atol=tol)

"""The full-batch pseudo-point estimators of every likelihood (SparseGPClassifier with the probit
and the logit, SparseGPPoissonRegressor, SparseGPStudentTRegressor; Bui, Yan and Turner, 2017):
at M = N, Z = X they are the dense estimators; the gradients of the energy eq. (110) they
maximise match finite differences; their fits are served by the tables; on dask they equal the
in-process fit; a fit with hyperparameters predicts sensibly."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import gammaln

from qpinfer import (
    GPClassifier,
    GPPoissonRegressor,
    GPStudentTRegressor,
    SparseGPClassifier,
    SparseGPPoissonRegressor,
    SparseGPRegressor,
    SparseGPStudentTRegressor,
)
from qpinfer.inference.sparse.pseudo_points import pseudo_point_prior
from qpinfer.inference.sparse.sites import sparse_pep_gradient
from qpinfer.tables.scaled import ScaledTable

from .._helpers import coal

N = 30
RNG_SEED = 0


def _data(seed: int = RNG_SEED, n: int = N):
    """2-D inputs and targets of every kind from one latent ``f``."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1]
    return X, {
        "labels": (rng.random(n) < 1.0 / (1.0 + np.exp(-2.0 * f))).astype(int),
        "counts": rng.poisson(np.exp(f)).astype(float),
        "reals": f + 0.3 * rng.standard_t(4, size=n),
    }


# (dense, sparse, targets, the user-facing predictions both have)
CASES = {
    "probit": (GPClassifier, SparseGPClassifier, {"likelihood": "probit"}, "labels"),
    "logit": (GPClassifier, SparseGPClassifier, {"likelihood": "logit"}, "labels"),
    "poisson-square": (GPPoissonRegressor, SparseGPPoissonRegressor, {"link": "square"}, "counts"),
    "poisson-log": (GPPoissonRegressor, SparseGPPoissonRegressor, {"link": "log"}, "counts"),
    "student-t": (GPStudentTRegressor, SparseGPStudentTRegressor, {"scale": 0.5}, "reals"),
}


def _predictions(est, X: np.ndarray, kind: str) -> dict[str, np.ndarray]:
    """What a user reads off a fitted estimator of ``kind``."""
    if kind == "labels":
        return {"predict_proba": est.predict_proba(X), "decision": est.decision_function(X)}
    if kind == "counts":
        grid = np.tile(np.arange(6.0), (X.shape[0], 1))
        return {"predict": est.predict(X), "log_pmf": est.log_pmf(X, grid)}
    mean, std = est.predict(X, return_std=True)
    lpd = est.log_predictive_density(X, np.linspace(-1.0, 1.0, X.shape[0]))
    return {"predict": mean, "std": std, "log_predictive_density": lpd}


# Tolerance: the sites converge to tol = 1e-12 (RMS change per sweep; the fixed point is within
# ~tol / (1 - contraction) ~ 1e-11) and the two posteriors are formed by different arithmetic
# (dense Cholesky of K against the low-rank B = I + A S A^T, A = chol(K)^-1 K: round-off ~1e-16
# times cond(K) ~ 1e4 here); measured differences are <= 1e-11, three decades below 1e-8.
RTOL = 1e-8


@pytest.mark.parametrize("method", ["ep", "qp"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_at_m_equal_n_with_z_equal_x_the_sparse_estimator_is_the_dense_one(case, method):
    dense_cls, sparse_cls, params, kind = CASES[case]
    X, targets = _data()
    y = targets[kind]
    Xs = np.random.default_rng(1).normal(size=(7, 2))
    fixed = dict(optimizer=None, tol=1e-12, max_iter=5000, **params)
    dense = dense_cls(method, **fixed).fit(X, y)
    sparse = sparse_cls(
        method=method, inducing_points=X, optimize_inducing=False, jitter=0.0, **fixed
    ).fit(X, y)
    assert sparse.log_marginal_likelihood_ == pytest.approx(
        dense.log_marginal_likelihood_, rel=RTOL
    )
    md, vd = dense.predict_latent(Xs)
    ms, vs = sparse.predict_latent(Xs)
    np.testing.assert_allclose(ms, md, rtol=RTOL, atol=RTOL * np.max(np.abs(md)))
    np.testing.assert_allclose(vs, vd, rtol=RTOL)
    want = _predictions(dense, Xs, kind)
    for name, got in _predictions(sparse, Xs, kind).items():
        scale = np.max(np.abs(want[name]))
        np.testing.assert_allclose(got, want[name], rtol=RTOL, atol=RTOL * scale, err_msg=name)
    if kind == "labels":
        np.testing.assert_array_equal(sparse.predict(Xs), dense.predict(Xs))
    if kind == "counts":  # the predictive means (in _predictions), and the modes
        np.testing.assert_array_equal(sparse.predict_mode(Xs), dense.predict_mode(Xs))


# -- gradients of eq. (110) at M < N -----------------------------------------------------------
def _gradient_problem(case: str):
    """``(estimator, X, y, Z)``: N = 30, M = 8. The square link's on 1-D inputs covered by
    evenly spaced inducing inputs and rates (3 + sin)^2 away from 0: where an input's cavity
    of ``f`` straddles 0 (far from every inducing input, h_n ~ the prior variance) its tilt is
    bimodal, the site precision is clipped at the floor and the sites are no stationary point
    of eq. (110), so no gradient formula at a fixed point applies there."""
    rng = np.random.default_rng(3)
    if case == "poisson-square":
        X = np.sort(rng.uniform(0.0, 5.0, size=(N, 1)), axis=0)
        Z = np.linspace(0.2, 4.8, 8)[:, None]
        y = rng.poisson((3.0 + np.sin(2.0 * X[:, 0])) ** 2).astype(float)
        est = SparseGPPoissonRegressor(method="ep", variance=9.0, length_scale=0.8)
        return est, X, y, Z
    X, targets = _data(seed=4)
    Z = X[rng.choice(N, 8, replace=False)] + 0.1 * rng.normal(size=(8, 2))
    est = {
        "logit": SparseGPClassifier(method="ep", likelihood="logit"),
        "poisson-log": SparseGPPoissonRegressor(method="ep", link="log"),
        "student-t": SparseGPStudentTRegressor(method="ep", scale=0.4, optimize_scale=True),
    }[case]
    est.set_params(variance=1.3, length_scale=0.9)
    return est, X, targets[CASES[case][3]], Z


@pytest.mark.parametrize("case", ["logit", "poisson-square", "poisson-log", "student-t"])
def test_energy_gradient_in_theta_scale_and_z_matches_central_differences(case):
    """d eq. (110) / d(log kernel hyperparameters, log scale for the Student-t) and / dZ at
    converged sites (tol 1e-12) against central differences of the re-converged energy (step
    1e-5: truncation ~h^2 |F'''| ~ 1e-10, the energy's round-off ~1e-14 |F| / h ~ 1e-8;
    measured <= 4.6e-8 relative to the largest component)."""
    est, X, y, Z = _gradient_problem(case)
    est.set_params(
        inducing_points=Z, optimize_inducing=False, optimizer=None, tol=1e-12, max_iter=10000
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # optimize_scale without an optimizer
        est.fit(X, y)
    assert est.pep_result_.converged and est.pep_result_.n_clipped == 0
    h = 1e-5
    theta = np.append(est.kernel_.theta, np.log(est.scale_) if case == "student-t" else [])
    _, grad = est.log_marginal_likelihood(theta, eval_gradient=True)
    steps = h * np.eye(theta.size)
    fd = [
        (est.log_marginal_likelihood(theta + e) - est.log_marginal_likelihood(theta - e)) / (2 * h)
        for e in steps
    ]
    assert grad.size == theta.size
    assert np.max(np.abs(fd - grad)) <= 1e-6 * np.max(np.abs(grad))

    def energy(Zp):
        prior = pseudo_point_prior(est.kernel_, est.X_train_, Zp, est.jitter)
        res = est._run(prior, est.y_train_, est.projection_)
        args = (est.kernel_, est.X_train_, Zp, prior, res, est.y_train_, est.projection_)
        return res.log_marginal_likelihood, sparse_pep_gradient(*args)[1]

    _, g_Z = energy(Z)
    fd_Z = np.array(
        [
            (energy(Z + e.reshape(Z.shape))[0] - energy(Z - e.reshape(Z.shape))[0]) / (2 * h)
            for e in h * np.eye(Z.size)
        ]
    )
    assert np.max(np.abs(fd_Z - g_Z.ravel())) <= 1e-6 * np.max(np.abs(g_Z))


# -- the tables serve the fits; hyperparameter fits predict sensibly ----------------------------
def _tables(est) -> list:
    """The tables the fit used: QP's (its base for a re-scaled one) and the moment table."""
    out = [est.likelihood_._moment_table]
    table = est.table_
    out.append(table.base if isinstance(table, ScaledTable) else table)
    return [t for t in out if t is not None]


def _fallbacks(tables: list) -> list[tuple[int, int]]:
    return [(t.fallback_count, t.moment_fallback_count) for t in tables]


def _fit_served_by_tables(est, X, y):
    """``est`` fitted to ``(X, y)``; asserts its tables answered every lookup (the tables are
    shared by the process, so their counts are compared before and after)."""
    probe = type(est)(**{**est.get_params(), "optimizer": None})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # optimize_scale without an optimizer
        probe.fit(X, y)
    tables = _tables(probe)
    before = _fallbacks(tables)
    est.fit(X, y)
    assert _tables(est) == tables  # the same (cached) tables
    assert _fallbacks(tables) == before
    if isinstance(est.table_, ScaledTable):
        assert est.table_.fallback_count == 0
    return est


def test_poisson_fit_on_coal_beats_a_constant_rate_and_is_served_by_the_tables():
    """Coal-mining disasters (112 years): odd years train, even years test. Both links beat
    the constant rate of the training mean on the held-out mean log pmf (measured: square QP
    -1.566, log EP -1.551, constant -1.783)."""
    X, y = coal()
    Xtr, ytr, Xte, yte = X[1::2], y[1::2], X[::2], y[::2]
    rate = ytr.mean()
    constant = np.mean(yte * np.log(rate) - rate - gammaln(yte + 1.0))
    for link, method in (("square", "qp"), ("log", "ep")):
        est = SparseGPPoissonRegressor(10, method=method, link=link, random_state=0)
        _fit_served_by_tables(est, Xtr, ytr)
        assert est.n_evaluations_ > 1
        assert np.mean(est.log_predictive_density(Xte, yte)) > constant + 0.05, link
        assert np.all(est.predict(Xte) > 0)


def test_student_t_fit_with_outliers_beats_the_gaussian_sparse_regressor():
    """sin(x) plus small noise, 10% of the targets shifted by +-5: the Student-t fit (scale
    fitted too) has a lower test RMSE than SparseGPRegressor's Gaussian one (measured 0.022
    against 0.52)."""
    rng = np.random.default_rng(5)
    n = 80
    X = rng.uniform(-3.0, 3.0, size=(n, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    bad = rng.choice(n, n // 10, replace=False)
    y[bad] += rng.choice([-5.0, 5.0], size=bad.size)
    Xte = np.linspace(-2.8, 2.8, 50)[:, None]
    est = SparseGPStudentTRegressor(10, method="qp", optimize_scale=True, random_state=0)
    _fit_served_by_tables(est, X, y)
    gauss = SparseGPRegressor(10, random_state=0).fit(X, y)
    rmse = np.sqrt(np.mean((est.predict(Xte) - np.sin(Xte[:, 0])) ** 2))
    rmse_gauss = np.sqrt(np.mean((gauss.predict(Xte) - np.sin(Xte[:, 0])) ** 2))
    assert rmse < 0.5 * rmse_gauss
    assert est.scale_ != est.scale  # fitted


def test_logit_classifier_fit_is_served_by_the_tables_and_classifies():
    """Labels drawn from sigma(2 f) (the Bayes rule's accuracy on the 140 test rows: 0.77):
    trained on 60 rows, the held-out mean log probability beats the class frequencies'
    (measured -0.61 against -0.70) and the accuracy the majority class's (0.74 against 0.51)."""
    X, targets = _data(seed=6, n=200)
    y = targets["labels"]
    est = SparseGPClassifier(8, method="qp", likelihood="logit", random_state=0)
    _fit_served_by_tables(est, X[:60], y[:60])
    proba = est.predict_proba(X[60:])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    freq = np.bincount(y[:60], minlength=2) / 60
    held_out = np.mean(np.log(proba[np.arange(140), y[60:]]))
    assert held_out > np.mean(np.log(freq[y[60:]])) + 0.05
    assert est.score(X[60:], y[60:]) > max(np.mean(y[60:]), 1 - np.mean(y[60:])) + 0.15


@pytest.mark.parametrize("likelihood", ["probit", "logit"])
@pytest.mark.parametrize("multi_class", ["one_vs_rest", "one_vs_one"])
def test_three_classes_with_each_likelihood(likelihood, multi_class):
    rng = np.random.default_rng(8)
    X = rng.normal(size=(45, 2)) + np.repeat([[0, 0], [4, 0], [0, 4]], 15, axis=0)
    y = np.repeat([0, 1, 2], 15)
    est = SparseGPClassifier(
        5, method="ep", likelihood=likelihood, multi_class=multi_class, optimizer=None
    ).fit(X, y)
    assert all(e.likelihood_.name == likelihood for e in est.estimators_)
    assert est.score(X, y) >= 0.9
    np.testing.assert_allclose(est.predict_proba(X).sum(axis=1), 1.0)


# -- parameters ---------------------------------------------------------------------------------
def test_logit_has_no_fractional_power():
    X, targets = _data()
    with pytest.raises(ValueError, match=r"method='pep' with alpha=0.5.*likelihood='logit'"):
        SparseGPClassifier(method="pep", likelihood="logit").fit(X, targets["labels"])
    est = SparseGPClassifier(alpha=1.0, method="pep", likelihood="logit", optimizer=None)
    assert est.fit(X, targets["labels"]).log_marginal_likelihood_ < 0


@pytest.mark.parametrize(
    "est, kind",
    [
        (SparseGPClassifier(method="qp", likelihood="logit"), "labels"),
        (SparseGPPoissonRegressor(), "counts"),
        (SparseGPStudentTRegressor(), "reals"),
    ],
)
@pytest.mark.parametrize("objective", ["evidence", "loo"])
def test_qp_own_objectives_are_the_probits_only(est, kind, objective):
    X, targets = _data()
    with pytest.raises(ValueError, match=rf"qp_objective='{objective}'.*probit"):
        est.set_params(qp_objective=objective).fit(X, targets[kind])


def test_the_regressors_share_the_sparse_and_dense_parameters():
    sparse_common = set(SparseGPClassifier().get_params()) - {
        "alpha",
        "likelihood",
        "multi_class",
        "n_jobs",
    }
    for sparse, dense in (
        (SparseGPPoissonRegressor, GPPoissonRegressor),
        (SparseGPStudentTRegressor, GPStudentTRegressor),
    ):
        names = set(sparse().get_params())
        assert sparse_common <= names
        own = set(dense().get_params()) - set(GPClassifier().get_params())
        assert own <= names
        for name in own | {"method"}:
            assert sparse().get_params()[name] == dense().get_params()[name], name
        assert sparse().qp_objective == "ep"
        assert sparse(7).n_inducing == 7


# -- dask ---------------------------------------------------------------------------------------
DASK_CASES = {
    "logit-qp": (SparseGPClassifier, {"likelihood": "logit", "method": "qp"}, "labels"),
    "poisson-square-qp": (SparseGPPoissonRegressor, {"link": "square"}, "counts"),
    "poisson-log-ep": (SparseGPPoissonRegressor, {"link": "log", "method": "ep"}, "counts"),
    "student-t-qp": (SparseGPStudentTRegressor, {"scale": 0.5}, "reals"),
}


@pytest.mark.parametrize("case", sorted(DASK_CASES))
def test_fit_on_a_dask_cluster_equals_the_in_process_fit(case, dask_client):
    """The likelihood (its moment table) and QP's table reach the two worker processes (as
    paths, opened there) and the map-reduce sweeps give the in-process sites: the same
    arithmetic with the sums over partitions in another order (round-off ~1e-15, through
    ~50 sweeps to tol 1e-10: differences <= 1e-10 relative)."""
    pytest.importorskip("distributed")
    cls, params, kind = DASK_CASES[case]
    X, targets = _data(seed=9, n=120)
    y = targets[kind]
    kw = dict(n_inducing=10, optimizer=None, random_state=0, tol=1e-10, **params)
    ref = cls(**kw).fit(X, y)
    est = cls(**kw, scheduler=dask_client).fit(X, y)
    assert est.log_marginal_likelihood_ == pytest.approx(ref.log_marginal_likelihood_, rel=1e-10)
    np.testing.assert_allclose(est.pep_result_.tau, ref.pep_result_.tau, rtol=1e-8, atol=1e-10)
    Xs = X[:20]
    for a, b in zip(est.predict_latent(Xs), ref.predict_latent(Xs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)
    for name, got in _predictions(est, Xs, kind).items():
        want = _predictions(ref, Xs, kind)[name]
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10, err_msg=name)

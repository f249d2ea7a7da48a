"""EP/QP site updates (qpinfer.inference.ep) and the kernel (qpinfer.kernels).

The reference for EP is an independent, deliberately naive implementation written from the paper
(eq. (3) with explicit inverses, eq. (5)-(6) updates, eq. (4) with the site normalisers Z~_i
spelled out), which shares no code with qpinfer.inference.ep.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import log_ndtr

import qpinfer
from qpinfer.inference.ep import (
    MIN_SITE_PRECISION,
    ConvergenceWarning,
    MomentMatching,
    QuantileMatching,
    fixed_site_log_evidence,
    log_evidence_gradient,
    predict_latent,
    run_ep,
    site_constant,
)
from qpinfer.kernels import ARDSquaredExponential, Kernel

PROBIT = qpinfer.get_likelihood("probit")


def make_problem(n=40, d=3, seed=0, n_test=25):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + n_test, d))
    f = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1]
    y = np.where(f + 0.3 * rng.normal(size=n + n_test) > 0, 1.0, -1.0)
    return X[:n], y[:n], X[n:]


def naive_ep(K, y, sweeps=200):
    """EP for the probit straight from the paper: eq. (3), (5), (6) and eq. (4), dense inverses."""
    n = len(y)
    site_var = np.full(n, np.inf)  # sigma~^2
    site_mean = np.zeros(n)  # mu~
    for _ in range(sweeps):
        for i in range(n):
            prec = np.where(np.isinf(site_var), 0.0, 1.0 / site_var)
            Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(prec))  # eq. (3)
            mu = Sigma @ (prec * site_mean)
            cav_var = 1.0 / (1.0 / Sigma[i, i] - prec[i])
            cav_mean = cav_var * (mu[i] / Sigma[i, i] - prec[i] * site_mean[i])
            # tilted moments of Phi(y f) N(f | cav) (R&W eq. (3.58))
            z = y[i] * cav_mean / np.sqrt(1 + cav_var)
            r = np.exp(-0.5 * z * z - 0.5 * np.log(2 * np.pi) - log_ndtr(z))
            m_star = cav_mean + y[i] * cav_var * r / np.sqrt(1 + cav_var)
            v_star = cav_var - cav_var**2 * r * (z + r) / (1 + cav_var)
            site_var[i] = 1.0 / (1.0 / v_star - 1.0 / cav_var)  # eq. (6)
            site_mean[i] = site_var[i] * (m_star / v_star - cav_mean / cav_var)
    # eq. (4) with log Z~_i = log Z^_i + log sqrt(2 pi (cav_var + site_var))
    #                         + (cav_mean - site_mean)^2 / (2 (cav_var + site_var))
    prec = 1.0 / site_var
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(prec))
    mu = Sigma @ (prec * site_mean)
    cav_var = 1.0 / (1.0 / np.diag(Sigma) - prec)
    cav_mean = cav_var * (mu / np.diag(Sigma) - prec * site_mean)
    log_zhat = log_ndtr(y * cav_mean / np.sqrt(1 + cav_var))
    s = cav_var + site_var
    log_ztilde = log_zhat + 0.5 * np.log(2 * np.pi * s) + (cav_mean - site_mean) ** 2 / (2 * s)
    A = K + np.diag(site_var)
    log_z = (
        np.sum(log_ztilde - 0.5 * np.log(2 * np.pi))
        - 0.5 * np.linalg.slogdet(A)[1]
        - 0.5 * site_mean @ np.linalg.solve(A, site_mean)
    )
    return log_z, mu, np.diag(Sigma), prec, prec * site_mean


@pytest.fixture(scope="module")
def problem():
    X, y, Xs = make_problem()
    kern = ARDSquaredExponential(2.0, np.array([1.0, 1.5, 2.0]))
    return X, y, Xs, kern


# --------------------------------------------------------------------------------------------
# EP against the naive reference
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("schedule", ["parallel", "sequential"])
def test_ep_fixed_point_and_evidence_match_the_naive_reference(problem, schedule):
    X, y, _, kern = problem
    K = kern(X)
    log_z, mu, var, tau, nu = naive_ep(K, y, sweeps=60)
    r = run_ep(K, y, MomentMatching(PROBIT), schedule=schedule, tol=1e-12, max_iter=5000)
    assert r.converged
    np.testing.assert_allclose(r.tau, tau, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(r.nu, nu, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(r.mean, mu, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(r.var, var, rtol=1e-8)
    assert r.log_marginal_likelihood == pytest.approx(log_z, rel=1e-10)


def test_blocked_rank_one_updates_equal_one_at_a_time(problem):
    X, y, _, kern = problem
    K = kern(X)
    proj = MomentMatching(PROBIT)
    kw = {"schedule": "sequential", "max_iter": 2, "tol": 1e-300}
    with pytest.warns(ConvergenceWarning):
        a = run_ep(K, y, proj, block_size=1, **kw)
    with pytest.warns(ConvergenceWarning):
        b = run_ep(K, y, proj, block_size=7, **kw)
    np.testing.assert_allclose(a.tau, b.tau, rtol=1e-11)
    np.testing.assert_allclose(a.nu, b.nu, rtol=1e-11, atol=1e-14)


def test_warm_start_converges_to_the_same_sites_in_fewer_sweeps(problem):
    X, y, _, kern = problem
    K = kern(X)
    cold = run_ep(K, y, MomentMatching(PROBIT), tol=1e-10)
    warm = run_ep(K, y, MomentMatching(PROBIT), tol=1e-10, init=(cold.tau, cold.nu))
    assert warm.n_iter < cold.n_iter
    np.testing.assert_allclose(warm.tau, cold.tau, rtol=1e-8)


def test_predictions_equal_the_dense_gaussian_conditional(problem):
    X, y, Xs, kern = problem
    r = run_ep(kern(X), y, MomentMatching(PROBIT), tol=1e-10)
    mean, var = predict_latent(r.posterior, kern(X, Xs), kern.diag(Xs))
    # R&W eq. (3.60)-(3.61) with explicit inverses
    A = kern(X) + np.diag(1.0 / r.tau)
    Ks = kern(X, Xs)
    np.testing.assert_allclose(mean, Ks.T @ np.linalg.solve(A, r.nu / r.tau), rtol=1e-8)
    ref_var = kern.diag(Xs) - np.einsum("ij,ij->j", Ks, np.linalg.solve(A, Ks))
    np.testing.assert_allclose(var, ref_var, rtol=1e-8)


# --------------------------------------------------------------------------------------------
# QP
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ep_and_qp(problem):
    X, y, _Xs, kern = problem
    K = kern(X)
    ep = run_ep(K, y, MomentMatching(PROBIT), tol=1e-9)
    qp = run_ep(K, y, QuantileMatching(PROBIT), tol=1e-9)
    return ep, qp


def test_qp_latent_variance_is_at_most_eps_at_every_test_point(problem, ep_and_qp):
    """Paper Cor. 2.2 / Fig. 1, with identical hyperparameters."""
    X, _, Xs, kern = problem
    ep, qp = ep_and_qp
    assert qp.converged
    Ks, kss = kern(X, Xs), kern.diag(Xs)
    m_ep, v_ep = predict_latent(ep.posterior, Ks, kss)
    m_qp, v_qp = predict_latent(qp.posterior, Ks, kss)
    assert np.all(v_qp <= v_ep * (1 + 1e-12))
    assert np.all(qp.var <= ep.var * (1 + 1e-12))
    np.testing.assert_allclose(m_qp, m_ep, atol=0.05 * np.sqrt(kss.max()))
    # sites: QP's precisions are at least EP's at the QP cavities (Theorem 2)
    assert np.all(qp.tau >= 0)


def test_qp_sites_satisfy_the_quantile_matching_fixed_point(problem, ep_and_qp):
    """At convergence each QP site reproduces eq. (5) mean and eq. (7) sigma* at its cavity."""
    _, y, _, _ = problem
    _, qp = ep_and_qp
    cm, cs = qp.cavity_mean, np.sqrt(qp.cavity_var)
    m, _ = PROBIT.tilted_moments(cm, cs, y)
    s_star = qpinfer.sigma_qp(PROBIT, cm, cs, y)
    np.testing.assert_allclose(qp.mean, m, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.sqrt(qp.var), s_star, rtol=1e-6)


def test_quantile_matching_refuses_a_table_for_another_likelihood():
    from qpinfer.tables.shipped import open_shipped

    with pytest.raises(ValueError, match="poisson_square"):
        QuantileMatching(PROBIT, open_shipped("poisson_square"))


def test_quantile_matching_refuses_what_is_not_a_table_reader():
    class FakeTable:
        likelihood = "probit"

        def sigma_ratio(self, mu, sigma, y):  # pragma: no cover - never called
            return np.ones_like(mu)

    with pytest.raises(ValueError, match="^table must be a sigma\\* table .* got FakeTable"):
        QuantileMatching(PROBIT, FakeTable())


# --------------------------------------------------------------------------------------------
# evidence gradients
# --------------------------------------------------------------------------------------------
def test_ep_evidence_gradient_matches_finite_differences_of_the_converged_evidence(problem):
    """At an EP fixed point R&W eq. (5.27) is the total derivative of eq. (4)."""
    X, y, _, kern = problem
    proj = MomentMatching(PROBIT)
    r = run_ep(kern(X), y, proj, tol=1e-13, max_iter=5000)
    grad = log_evidence_gradient(kern, X, r)
    theta = kern.theta
    h = 1e-5
    fd = np.empty_like(theta)
    for j in range(theta.size):
        vals = []
        for sgn in (1, -1):
            t = theta.copy()
            t[j] += sgn * h
            k = kern.with_theta(t)
            vals.append(
                run_ep(
                    k(X), y, proj, tol=1e-13, max_iter=5000, init=(r.tau, r.nu)
                ).log_marginal_likelihood
            )
        fd[j] = (vals[0] - vals[1]) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("method", ["ep", "qp"])
def test_fixed_site_evidence_gradient_matches_finite_differences(problem, ep_and_qp, method):
    """Eq. (4) with the sites held fixed (QP's hyperparameter objective) and R&W eq. (5.27)."""
    X, _, _, kern = problem
    r = ep_and_qp[0] if method == "ep" else ep_and_qp[1]
    const = site_constant(r)
    theta = kern.theta
    value, grad = fixed_site_log_evidence(kern, X, theta, r.tau, r.nu, const)
    assert value == pytest.approx(r.log_marginal_likelihood, rel=1e-12)
    np.testing.assert_allclose(grad, log_evidence_gradient(kern, X, r), rtol=1e-10)
    h = 1e-6
    fd = np.empty_like(theta)
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        fp, _ = fixed_site_log_evidence(kern, X, theta + e, r.tau, r.nu, const, eval_gradient=False)
        fm, _ = fixed_site_log_evidence(kern, X, theta - e, r.tau, r.nu, const, eval_gradient=False)
        fd[j] = (fp - fm) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------------------------------------
# guards and the projection interface
# --------------------------------------------------------------------------------------------
def test_non_convergence_warns_and_returns_the_best_finite_state(problem):
    X, y, _, kern = problem
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        r = run_ep(kern(X), y, MomentMatching(PROBIT), max_iter=3, tol=1e-12)
    assert not r.converged
    assert r.rms_change == min(r.history)
    for a in (r.tau, r.nu, r.mean, r.var):
        assert np.all(np.isfinite(a))
    assert np.isfinite(r.log_marginal_likelihood)


class _InflatingProjection:
    """A projection whose std exceeds the cavity's: the site precision would be negative."""

    power = 1.0

    def project(self, cavity_mean, cavity_std, y):
        return cavity_mean + 0.1 * y, 1.5 * cavity_std

    def log_normalizer(self, cavity_mean, cavity_std, y):
        return PROBIT.log_z(cavity_mean, cavity_std, y)


@pytest.mark.parametrize("schedule", ["parallel", "sequential"])
def test_negative_site_precisions_are_clipped(problem, schedule):
    X, y, _, kern = problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        r = run_ep(kern(X), y, _InflatingProjection(), schedule=schedule, max_iter=5)
    assert r.n_clipped > 0
    assert np.all(r.tau >= MIN_SITE_PRECISION)
    assert np.all(np.isfinite(r.mean)) and np.all(np.isfinite(r.var))


class _NaNProjection(_InflatingProjection):
    def project(self, cavity_mean, cavity_std, y):
        m, s = PROBIT.tilted_moments(cavity_mean, cavity_std, y)
        s = np.where(np.arange(s.size) % 2 == 0, np.nan, s) if s.size > 1 else s * np.nan
        return m, s


@pytest.mark.parametrize("schedule", ["parallel", "sequential"])
def test_non_finite_projections_leave_sites_unchanged(problem, schedule):
    X, y, _, kern = problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        r = run_ep(kern(X), y, _NaNProjection(), schedule=schedule, max_iter=3)
    assert r.n_skipped > 0
    assert np.all(np.isfinite(r.tau)) and np.all(np.isfinite(r.log_marginal_likelihood))


def test_a_custom_projection_plugs_into_the_same_loop(problem):
    class Recorded(MomentMatching):
        calls = 0

        def project(self, cavity_mean, cavity_std, y):
            type(self).calls += 1
            return super().project(cavity_mean, cavity_std, y)

    X, y, _, kern = problem
    r = run_ep(kern(X), y, Recorded(PROBIT), tol=1e-9)
    ref = run_ep(kern(X), y, MomentMatching(PROBIT), tol=1e-9)
    assert Recorded.calls == r.n_iter  # parallel: one vectorised call per sweep
    np.testing.assert_allclose(r.tau, ref.tau)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"schedule": "random"}, "schedule"),
        ({"damping": 0.0}, "damping"),
        ({"damping": 1.5}, "damping"),
        ({"max_iter": 0}, "max_iter"),
        ({"tol": -1.0}, "tol"),
    ],
)
def test_run_ep_rejects_bad_arguments(problem, kwargs, match):
    X, y, _, kern = problem
    with pytest.raises(ValueError, match=match):
        run_ep(kern(X), y, MomentMatching(PROBIT), **kwargs)


def test_run_ep_rejects_mismatched_shapes(problem):
    X, y, _, kern = problem
    with pytest.raises(ValueError, match="y must have shape"):
        run_ep(kern(X), y[:-1], MomentMatching(PROBIT))
    with pytest.raises(ValueError, match="square"):
        run_ep(kern(X)[:, :-1], y, MomentMatching(PROBIT))


# --------------------------------------------------------------------------------------------
# kernel
# --------------------------------------------------------------------------------------------
def test_ard_kernel_is_the_papers_squared_exponential():
    rng = np.random.default_rng(0)
    X, Z = rng.normal(size=(5, 3)), rng.normal(size=(4, 3))
    gamma, alpha = 1.7, np.array([0.5, 1.0, 2.0])
    k = ARDSquaredExponential(gamma, alpha)
    ref = gamma * np.exp(-0.5 * (((X[:, None, :] - Z[None, :, :]) / alpha) ** 2).sum(-1))
    np.testing.assert_allclose(k(X, Z), ref, rtol=1e-14)
    np.testing.assert_allclose(k.diag(X), np.diag(k(X)))
    assert isinstance(k, Kernel)
    np.testing.assert_allclose(k.theta, np.log([gamma, *alpha]))
    np.testing.assert_allclose(k.with_theta(k.theta)(X, Z), k(X, Z), rtol=1e-14)
    assert k.hyperparameter_names == [
        "variance",
        "length_scale_0",
        "length_scale_1",
        "length_scale_2",
    ]


@pytest.mark.parametrize("length_scale", [0.8, np.array([0.5, 1.0, 2.0])])
def test_kernel_gradient_contraction_matches_finite_differences(length_scale):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(12, 3))
    W = rng.normal(size=(12, 12))
    W = W + W.T
    k = ARDSquaredExponential(1.3, length_scale)
    g = k.gradient_contract(X, W)
    h = 1e-6
    fd = np.array(
        [
            (
                np.sum(W * k.with_theta(k.theta + h * e)(X))
                - np.sum(W * k.with_theta(k.theta - h * e)(X))
            )
            / (2 * h)
            for e in np.eye(k.theta.size)
        ]
    )
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_kernel_rejects_bad_hyperparameters():
    with pytest.raises(ValueError, match="variance"):
        ARDSquaredExponential(-1.0)
    with pytest.raises(ValueError, match="length_scale"):
        ARDSquaredExponential(1.0, [1.0, 0.0])
    with pytest.raises(ValueError, match="features"):
        ARDSquaredExponential(1.0, [1.0, 2.0])(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="theta"):
        ARDSquaredExponential(1.0, [1.0, 2.0]).with_theta(np.zeros(2))

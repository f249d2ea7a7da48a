"""The site update's Jacobian and the chord warm start of QP's searches
(:mod:`qpinfer.inference.site_chord`): GMRES against a direct solve, ``M d`` against central
differences of the site update, ``M^T`` as its transpose, and chord starts that land on the site
loop's own fixed point in fewer site updates than the loop's sweeps."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from qpinfer import GPClassifier
from qpinfer.inference.dense_posterior import posterior_from_sites
from qpinfer.inference.ep import run_ep
from qpinfer.inference.site_chord import ChordStart, chord_start, gmres, site_update_jacobian
from qpinfer.inference.site_update import site_proposal
from qpinfer.inference.total_gradient import qp_objective_gradient

#: the site loop's tolerance here (RMS change of the sites per sweep)
TOL = 1e-9


@pytest.fixture(scope="module")
def fitted():
    X, y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = rng.choice(y.size, 150, replace=False)
    X = X[idx, :4]
    X = (X - X.mean(0)) / X.std(0)
    est = GPClassifier("qp", optimizer=None, tol=TOL).fit(X, y[idx])
    return est, X


def _site_update(K, y, projection, s):
    n = y.size
    post = posterior_from_sites(K, s[:n], s[n:])
    tau, nu, ok, _ = site_proposal(projection, post.mean, post.var, s[:n], s[n:], y)
    assert np.all(ok)
    return np.concatenate([tau, nu])


@pytest.mark.parametrize("n", [3, 40, 300])
def test_gmres_solves_to_its_tolerance(n):
    rng = np.random.default_rng(n)
    A = np.eye(n) + 0.4 * rng.standard_normal((n, n)) / np.sqrt(n)
    b = rng.standard_normal(n)
    x = gmres(lambda v: A @ v, b, 1e-12, n)
    # the residual norm is what GMRES bounds; rounding adds ~cond(A) eps
    assert np.linalg.norm(A @ x - b) <= 1e-12 * np.linalg.norm(b) * 10 + 1e-14 * np.linalg.cond(A)
    assert np.allclose(x, np.linalg.solve(A, b), rtol=0, atol=1e-9)


def test_gmres_of_zero_is_zero():
    assert np.array_equal(gmres(lambda v: 2 * v, np.zeros(4), 1e-10, 4), np.zeros(4))


def test_jacobian_is_the_site_updates_derivative(fitted):
    est, X = fitted
    K, y, proj = est.kernel_(X), est.y_train_, est.projection_
    res = est.result_
    s = np.concatenate([res.tau, res.nu])
    jac = site_update_jacobian(K, y, proj, res.tau, res.nu)
    d = np.random.default_rng(1).standard_normal(s.size) * np.concatenate([res.tau, res.tau])
    # central differences of G; relative step 1e-5 of the sites: truncation ~1e-10, rounding of
    # G (~1e-15 relative, amplified 1/h) ~1e-10, the table's derivative ~1e-12 relative
    h = 1e-5
    fd = (_site_update(K, y, proj, s + h * d) - _site_update(K, y, proj, s - h * d)) / (2 * h)
    md = jac.matvec(d)
    assert np.max(np.abs(md - fd)) <= 1e-6 * np.max(np.abs(fd))
    # M^T by the dot-product test, to rounding of the O(N^2) products
    e = np.random.default_rng(2).standard_normal(s.size)
    assert e @ md == pytest.approx(d @ jac.rmatvec(e), rel=1e-12)
    # the gradient's adjoint uses the same Jacobian
    _, _, adjoint_jac = qp_objective_gradient(est.kernel_, X, K, y, res, proj, return_jacobian=True)
    assert np.allclose(adjoint_jac.matvec(d), md, rtol=0, atol=1e-12 * np.max(np.abs(md)))


@pytest.mark.parametrize("step", [0.01, 0.1, 0.5])
def test_chord_start_lands_on_the_loops_fixed_point(fitted, step):
    est, X = fitted
    y, proj = est.y_train_, est.projection_
    res = est.result_
    K0 = est.kernel_(X)
    jac = site_update_jacobian(K0, y, proj, res.tau, res.nu)
    theta = est.kernel_.theta + step * np.array([1.0, -0.5])
    K = est.kernel_.with_theta(theta)(X)
    plain = run_ep(K, y, proj, init=(res.tau, res.nu), tol=TOL)
    (tau, nu), n_updates = chord_start(K, y, proj, (res.tau, res.nu), jac, TOL)
    chord = run_ep(K, y, proj, init=(tau, nu), tol=TOL)
    assert plain.converged and chord.converged
    print(f"step {step}: plain {plain.n_iter} sweeps, chord {n_updates} + {chord.n_iter}")
    assert n_updates + chord.n_iter < plain.n_iter
    # the same fixed point: both stop within TOL of it (a damped sweep's change bounds the
    # distance by ~ TOL / (1 - rate)), and the evidence agrees to that order
    scale = np.max(np.abs(np.concatenate([plain.tau, plain.nu])))
    assert np.max(np.abs(chord.tau - plain.tau)) <= 1e3 * TOL * scale
    assert np.max(np.abs(chord.nu - plain.nu)) <= 1e3 * TOL * scale
    assert chord.log_marginal_likelihood == pytest.approx(plain.log_marginal_likelihood, abs=1e-6)


def test_chord_start_refuses_a_step_that_does_not_help(fitted):
    """Far from the old fixed point (the kernel's variance 100x), the stale Jacobian's step is
    dropped and the start is the old sites (or a state with a smaller residual)."""
    est, X = fitted
    y, proj = est.y_train_, est.projection_
    res = est.result_
    jac = site_update_jacobian(est.kernel_(X), y, proj, res.tau, res.nu)
    K = est.kernel_.with_theta(est.kernel_.theta + np.array([np.log(100.0), 0.0]))(X)
    s0 = np.concatenate([res.tau, res.nu])
    (tau, nu), n_updates = chord_start(K, y, proj, (res.tau, res.nu), jac, TOL, max_refreshes=0)
    r0 = _site_update(K, y, proj, s0) - s0
    s1 = np.concatenate([tau, nu])
    r1 = _site_update(K, y, proj, s1) - s1
    assert np.linalg.norm(r1) <= np.linalg.norm(r0)
    assert 1 <= n_updates


def test_qp_search_with_the_chord_reaches_the_same_optimum(fitted, monkeypatch):
    """QP's own search (chord warm starts) against the same search with the site loop alone."""
    import qpinfer.inference.site_chord as site_chord

    est, X = fitted
    y = est.classes_[(est.y_train_ > 0).astype(int)]
    with_chord = GPClassifier("qp", tol=TOL).fit(X, y)
    monkeypatch.setattr(
        site_chord,
        "chord_start",
        lambda K, y, projection, init, *a, **kw: ChordStart(init, 0, None, np.inf),
    )
    without = GPClassifier("qp", tol=TOL).fit(X, y)
    assert with_chord.n_inner_iter_total_ < without.n_inner_iter_total_
    assert with_chord.log_marginal_likelihood_ == pytest.approx(
        without.log_marginal_likelihood_, abs=1e-6
    )
    assert np.allclose(with_chord.kernel_.theta, without.kernel_.theta, rtol=0, atol=1e-3)


def test_chord_start_takes_newtons_step_where_the_stale_one_stalls(fitted):
    """The kernel's variance 10x: the old fixed point's Jacobian stops helping after a step
    (the residual stays above a tenth of the start's), and the Jacobian recomputed at the best
    sites (Newton's steps) takes the residual down by more than 4 orders of magnitude."""
    est, X = fitted
    y, proj = est.y_train_, est.projection_
    res = est.result_
    jac = site_update_jacobian(est.kernel_(X), y, proj, res.tau, res.nu)
    K = est.kernel_.with_theta(est.kernel_.theta + np.array([np.log(10.0), 0.0]))(X)

    def residual(tau, nu):
        s = np.concatenate([tau, nu])
        return np.linalg.norm(_site_update(K, y, proj, s) - s)

    r0 = residual(res.tau, res.nu)
    stale, _ = chord_start(K, y, proj, (res.tau, res.nu), jac, TOL, max_refreshes=0)
    newton, _ = chord_start(K, y, proj, (res.tau, res.nu), jac, TOL)
    assert residual(*stale) > 0.1 * r0
    assert residual(*newton) < 1e-4 * r0


def test_a_converged_chord_start_is_the_loops_result_without_a_sweep(fitted):
    """A chord start whose residual is below the tolerance is a converged result: the loop
    from there stops after one sweep, at the same evidence to the tolerance's order, and the
    chord's own sites and posterior are those of its last residual."""
    from qpinfer.inference.site_chord import chord_result

    est, X = fitted
    y, proj, res = est.y_train_, est.projection_, est.result_
    jac = site_update_jacobian(est.kernel_(X), y, proj, res.tau, res.nu)
    K = est.kernel_.with_theta(est.kernel_.theta + np.array([0.01, -0.005]))(X)
    start = chord_start(K, y, proj, (res.tau, res.nu), jac, TOL)
    assert start.rms < TOL
    got = chord_result(y, proj, start, TOL)
    loop = run_ep(K, y, proj, init=start.sites, tol=TOL)
    assert got.converged and loop.converged and loop.n_iter == 1
    assert got.log_marginal_likelihood == pytest.approx(loop.log_marginal_likelihood, abs=1e-7)
    post = posterior_from_sites(K, *start.sites)
    assert np.array_equal(got.posterior.mean, post.mean)
    assert np.array_equal(got.posterior.var, post.var)
    with pytest.raises(ValueError, match="not below tol"):
        chord_result(y, proj, start, start.rms)


def test_ep_search_with_the_chord_reaches_the_same_optimum(monkeypatch):
    """EP's search on EP_CHORD_MIN_SITES or more sites takes chord starts (the Jacobian of EP's
    site update at each fixed point): the same optimum as with the site loop alone, in fewer
    site updates."""
    import qpinfer.estimators.base as base

    X, y = load_breast_cancer(return_X_y=True)
    idx = np.random.default_rng(1).choice(y.size, base.EP_CHORD_MIN_SITES + 20, replace=False)
    X = X[idx, :4]
    X, y = (X - X.mean(0)) / X.std(0), y[idx]
    with_chord = GPClassifier("ep", tol=TOL).fit(X, y)
    monkeypatch.setattr(base, "EP_CHORD_MIN_SITES", 10**9)
    without = GPClassifier("ep", tol=TOL).fit(X, y)
    assert with_chord.n_inner_iter_total_ < without.n_inner_iter_total_
    assert with_chord.log_marginal_likelihood_ == pytest.approx(
        without.log_marginal_likelihood_, abs=1e-6
    )
    assert np.allclose(with_chord.kernel_.theta, without.kernel_.theta, rtol=0, atol=1e-3)

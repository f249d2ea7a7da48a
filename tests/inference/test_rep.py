"""Relaxed EP (Qi and Guo, 2012): objective (5) decreases at every site update; large c is EP."""

import numpy as np
import pytest

from qpinfer.inference.ep import MomentMatching, run_ep
from qpinfer.inference.relaxed_ep import RelaxedMomentMatching, rep_objective
from qpinfer.likelihoods.probit import Probit
from qpinfer.likelihoods.step_noise import StepNoise


def _data(n=40, seed=0, flip=0.2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] + 0.5 * np.sin(2 * X[:, 1]) > 0, 1.0, -1.0)
    y[rng.random(n) < flip] *= -1
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    K = 4.0 * np.exp(-0.5 * d2 / 0.5**2) + 1e-8 * np.eye(n)
    return K, y


def _objective_quadrature(lik, m_c, tau_c, m_i, b, y, c):
    """KL(t r_b q^\\i / Z || N(mu_b, sigma_b^2)) + c b by brute-force quadrature (objective (5))."""
    tau_r = tau_c + b
    m_r = (tau_c * m_c + b * m_i) / tau_r
    sd = 1 / np.sqrt(tau_r)
    f = np.linspace(m_r - 14 * sd, m_r + 14 * sd, 200001)
    f = np.union1d(f, [-1e-12, 0.0])
    p = np.exp(lik.log_pdf(f, y) - 0.5 * (f - m_r) ** 2 * tau_r) * np.sqrt(tau_r / (2 * np.pi))
    z = np.trapezoid(p, f)
    p /= z
    mu = np.trapezoid(f * p, f)
    s2 = np.trapezoid((f - mu) ** 2 * p, f)
    logn = -0.5 * np.log(2 * np.pi * s2) - 0.5 * (f - mu) ** 2 / s2
    with np.errstate(divide="ignore", invalid="ignore"):
        integrand = np.where(p > 0, p * (np.log(p) - logn), 0.0)
    return np.trapezoid(integrand, f) + c * b


class _Recorder(RelaxedMomentMatching):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.log = []

    def project_with_site(self, cavity_mean, cavity_std, y, site_tau, site_nu):
        out = super().project_with_site(cavity_mean, cavity_std, y, site_tau, site_nu)
        self.log.append(
            (
                float(cavity_mean[0]),
                float(cavity_std[0]) ** -2,
                float(self.last_site_mean[0]),
                float(self.last_b[0]),
                float(y[0]),
            )
        )
        return out


def test_bad_inputs():
    for bad in (-1.0, np.nan, np.inf, "a", None):
        with pytest.raises(ValueError, match="c "):
            RelaxedMomentMatching(StepNoise(0.2), c=bad)
    with pytest.raises(
        ValueError, match=r"REP needs a likelihood with E_q\[log p\(y \| f\)\].* got 'probit'"
    ):
        RelaxedMomentMatching(Probit(), c=1.0)


def test_closed_form_objective_matches_quadrature():
    lik = StepNoise(0.2)
    for m_c, tau_c, m_i, b, y in [
        (0.3, 1.0, -2.0, 0.5, 1.0),
        (-1.0, 0.2, 3.0, 2.0, 1.0),
        (2.0, 4.0, 0.0, 0.0, -1.0),
        (0.1, 0.5, 1.0, 10.0, -1.0),
    ]:
        q, _, _ = rep_objective(
            lik,
            np.array([m_c]),
            np.array([tau_c]),
            np.array([m_i]),
            np.array([b]),
            np.array([y]),
            0.7,
        )
        assert abs(q[0] - _objective_quadrature(lik, m_c, tau_c, m_i, b, y, 0.7)) < 1e-6


@pytest.mark.filterwarnings("ignore::qpinfer.inference.ep.ConvergenceWarning")
def test_every_site_update_decreases_objective():
    K, y = _data(n=20)
    lik = StepNoise(0.2)
    proj = _Recorder(lik, c=0.5)
    run_ep(K, y, proj, schedule="sequential", max_iter=3, tol=1e-300)
    assert len(proj.log) == 3 * y.size
    n_relaxed = 0
    for m_c, tau_c, m_i, b, yy in proj.log:
        q_star = _objective_quadrature(lik, m_c, tau_c, m_i, b, yy, 0.5)
        q_ep = _objective_quadrature(lik, m_c, tau_c, m_i, 0.0, yy, 0.5)
        assert q_star <= q_ep + 1e-7
        # and b* is a minimiser along the line: no probe does better
        for g in (0.1, 0.5, 2.0):
            assert (
                q_star
                <= _objective_quadrature(lik, m_c, tau_c, m_i, b * g + 0.05 * tau_c, yy, 0.5) + 1e-6
            )
        n_relaxed += b > 0
    assert n_relaxed > 0  # the test is not vacuous: some sites are relaxed


def test_large_c_is_ep():
    K, y = _data(seed=3)
    lik = StepNoise(0.2)
    proj = _Recorder(lik, c=1e6)
    rep = run_ep(K, y, proj, schedule="sequential", max_iter=200)
    ep = run_ep(K, y, MomentMatching(lik), schedule="sequential", max_iter=200)
    assert all(rec[3] == 0.0 for rec in proj.log)  # b* = 0 at every update
    assert rep.n_iter == ep.n_iter
    # same updates up to round-off (the cavity goes through the relaxed-cavity formulas)
    np.testing.assert_allclose(rep.tau, ep.tau, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(rep.nu, ep.nu, rtol=1e-9, atol=1e-12)

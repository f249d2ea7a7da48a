"""The probit sigma* kernel over the whole float64 range, held to the mpmath reference.

Regimes (see :mod:`qpinfer.likelihoods.probit.limits`): quadrature with graded edges for wide
cavities, the flat-likelihood and Gaussian limits, and the truncated-normal limit of very wide
cavities.
"""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import qpinfer
from qpinfer.likelihoods.probit.limits import SIGMA_WIDE
from qptables.reference.sigma import sigma_qp_reference

TOL = 1e-12


def _rel_err(mu, sigma, y):
    ref = float(sigma_qp_reference("probit", mu, sigma, y))
    got = float(qpinfer.sigma_qp("probit", mu, sigma, y))
    return abs(got - ref) / ref


@pytest.mark.parametrize("sigma", [1e2, 1e3, 1e4])
@pytest.mark.parametrize("mu", [-50.0, 0.0, 50.0])
@pytest.mark.parametrize("y", [-1, 1])
def test_wide_cavities_match_mpmath(mu, sigma, y):
    """Was 5e-8 at sigma = 1e3 and 7e-7 at 1e4 (panels too long next to the probit step)."""
    assert _rel_err(mu, sigma, y) <= TOL


@pytest.mark.slow
@pytest.mark.parametrize("sigma", [2e2, 5e2, 2e3, 5e3])
@pytest.mark.parametrize("mu", [-30.0, -5.0, 5.0, 30.0])
def test_wide_cavities_match_mpmath_dense(mu, sigma):
    assert _rel_err(mu, sigma, 1) <= TOL


@pytest.mark.parametrize(
    ("mu", "sigma"),
    [
        (0.0, 1e6),
        (0.0, 1e7),
        (2e8, 1e8),  # tau = 2: level sets left of the mode cannot follow Phi's fall
        (-1e12, 1e6),  # c = -1: q ~ Phi(f) e^(-f), f - mu ~ 1e12 (anchored Gaussian term)
        (1e12, 3e11),
        (0.0, 0.9999 * SIGMA_WIDE),  # either side of the wide limit
        (0.0, 1.0001 * SIGMA_WIDE),
    ],
)
def test_very_wide_and_far_cavities_match_mpmath(mu, sigma):
    assert _rel_err(mu, sigma, 1) <= TOL


@pytest.mark.slow  # the reference takes 15-40 s on each
@pytest.mark.parametrize(
    ("mu", "sigma"),
    [
        (-3e7, 1e7),  # tau = -3: the tilted mean overshoots the mode; Newton starts at c
        (-1e12, 3e11),
        (-1e14, 1e10),
        (-1e13, 1e11),
    ],
)
def test_very_wide_cavities_left_of_the_step_match_mpmath(mu, sigma):
    assert _rel_err(mu, sigma, 1) <= TOL


@pytest.mark.parametrize(
    ("mu", "sigma"),
    [
        (8.5 + 9 * 2.3 + 1e-9, 2.3),  # the flat limit's boundary, both sides
        (8.5 + 9 * 2.3 - 1e-9, 2.3),
        (-100.0, 0.5),  # tilted nearly Gaussian, below and above the threshold
        (-300.0, 0.5),
        (-1000.0, 0.5),
        (-100.0, 0.05),
        (0.0, 1e-3),
        (-3.0, 2e-3),
        (5.0, 1e-3),
    ],
)
def test_limits_and_their_boundaries_match_mpmath(mu, sigma):
    assert _rel_err(mu, sigma, 1) <= TOL


def _half_normal_sigma_qp() -> float:
    """sigma* of the half-normal, the probit ratio's limit at mu = 0 (mpmath, 30 digits)."""
    with mpmath.workdps(30):

        def g(x):
            u = 2 * mpmath.ncdf(x) - 1  # the half-normal's CDF
            z = -mpmath.sqrt(2) * mpmath.erfinv(1 - 2 * u) if u < 0.5 else None
            if z is None:
                z = mpmath.sqrt(2) * mpmath.erfinv(2 * u - 1)
            return mpmath.npdf(z)

        return float(mpmath.quad(g, [0, 0.5, 2, 5, 10, 40]))


def test_large_sigma_ratio_tends_to_the_half_normal():
    limit = _half_normal_sigma_qp()
    assert abs(limit - 0.5803636136229251) < 1e-15
    sigmas = np.array([1e5, 1e6, 1e8, 1e10, 1e20, 1e50, 1e100, 1e300])
    ratio = qpinfer.sigma_qp("probit", 0.0, sigmas, 1) / sigmas
    assert np.all(np.abs(ratio - limit) <= 1e-9)
    assert np.all(np.abs(ratio[1:] - limit) <= 1e-11)  # O(1/sigma^2): 2e-12 at 1e6


@pytest.mark.parametrize("m", [1e3, 1e5, 1e8, 1e10, 1e12, 1e16, 1e300])
def test_far_cavity_mean_gives_the_cavity(m):
    """Phi(y f) = 1 over the whole cavity: sigma* = sigma (was 1.3e-3 off at 1e14)."""
    assert abs(qpinfer.sigma_qp("probit", m, 0.5, 1) - 0.5) <= 0.5 * TOL
    assert abs(qpinfer.sigma_qp("probit", -m, 0.5, -1) - 0.5) <= 0.5 * TOL


finite = st.floats(allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=5e-324, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mu=finite, sigma=positive, y=st.sampled_from([-1.0, 1.0]))
def test_every_finite_query_is_answered_within_theorem_2(mu, sigma, y):
    """Any float64 mu, any sigma > 0: finite, positive, <= the EP std (Theorem 2)."""
    got = float(qpinfer.sigma_qp("probit", mu, sigma, y))
    _, ep = qpinfer.tilted_moments("probit", mu, sigma, y)
    assert math.isfinite(got) and got > 0
    assert got <= float(ep) * (1 + 1e-13)
    assert got <= sigma * (1 + 1e-15)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    log_sigma=st.floats(min_value=-3, max_value=6),
    tau=st.floats(min_value=-8, max_value=8),
    y=st.sampled_from([-1, 1]),
)
def test_property_matches_mpmath(log_sigma, tau, y):
    """Over tau = mu / sqrt(1 + sigma^2) in [-8, 8], sigma in [1e-3, 1e6] (``-m slow`` and
    ``tests/sigma/test_sigma_wide.py`` parameters go further)."""
    sigma = 10.0**log_sigma
    mu = y * tau * math.hypot(1.0, sigma)
    # the reference's own adaptive quadrature does not converge in the deep left tail
    assume(not (tau < 0 and abs(mu) / (1 + sigma * sigma) > 300 * min(sigma, 1.0)))
    assert _rel_err(mu, sigma, y) <= TOL


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((1 + 2j, 1.0, 1), "mu must be real"),
        ((0.0, 1.0, "a"), "y must be real numbers"),
        ((0.0, "x", 1), "sigma must be real numbers"),
        ((np.nan, 1.0, 1), "mu must be finite"),
        ((0.0, np.inf, 1), "sigma must be finite"),
        ((0.0, -1e-300, 1), "sigma must be > 0"),
        ((0.0, 1.0, 0), "y must be -1 or \\+1"),
    ],
)
def test_bad_queries_name_the_argument(args, match):
    with pytest.raises(ValueError, match=match):
        qpinfer.sigma_qp("probit", *args)


# ----------------------------------------------------------------------------- step_noise


@pytest.mark.parametrize(
    ("eps", "mu", "sigma", "slow"),
    [
        (0.0, -1e3, 1.0, False),  # a normal truncated 1000 sd into its tail: (f - mu)^2 lost all
        (0.2, -8.9, 1.0, False),  # just inside the closed form's boundary (|z| > 9)
        (1e-200, -30.0, 1.0, False),  # both sides of the step carry mass
        (0.0, -1e4, 2.0, True),
        (0.2, 3e4, 1e4, True),
        (0.1, -1e-3, 1e-5, True),
        (0.0, -5e3, 0.1, True),
    ],
)
def test_step_noise_far_from_the_step_matches_mpmath(eps, mu, sigma, slow, request):
    from qptables.reference.step_noise import step_noise_sigma_reference

    if slow and "slow" not in request.config.getoption("-m"):
        pytest.skip("slow reference point (run with -m slow)")
    ref = float(step_noise_sigma_reference(eps, mu, sigma, 1, dps=25))
    got = float(qpinfer.sigma_qp(f"step_noise(eps={eps})", mu, sigma, 1))
    assert abs(got - ref) / ref <= TOL


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mu=finite,
    sigma=positive,
    y=st.sampled_from([-1.0, 1.0]),
    eps=st.sampled_from([0.0, 1e-300, 0.01, 0.2, 0.49]),
)
def test_step_noise_every_finite_query_is_answered_or_refused(mu, sigma, y, eps):
    """Answered: finite, positive, <= the EP std; refused only where sigma* underflows (eps = 0,
    a cavity truncated so far into its tail that the tilted width is below 5e-324, or a
    subnormal sigma) or overflows (sigma near the largest float64: the tilted is wider)."""
    lik = f"step_noise(eps={eps})"
    try:
        got = float(qpinfer.sigma_qp(lik, mu, sigma, y))
    except ValueError as err:
        if "overflows" in str(err):  # a cavity near the largest float, wider once tilted
            assert sigma > 1e307
            return
        assert "underflows" in str(err)
        assert eps == 0.0 or sigma < np.finfo(float).tiny  # else sigma* is a normal float
        return
    _, ep = qpinfer.tilted_moments(lik, mu, sigma, y)
    assert math.isfinite(got) and got > 0
    if float(ep) > 0:  # the EP std itself underflows for eps = 0 at |mu| ~ 1e308
        assert got <= float(ep) * (1 + 1e-13)  # Theorem 2 (a step is not log-concave: EP's
        # std may exceed the cavity's)


def test_normal_ratio_terms_match_mpmath():
    """r = phi/Phi, z + r and 1 - r (z + r) (EP's probit moments): the direct formulas lost
    1.5e-12 of the variance factor at z = -5 before the continued fraction took over."""
    from qpinfer.quadrature.normal_ratios import normal_ratio_terms as _normal_ratio_terms

    z = np.concatenate([np.linspace(-40.0, 5.0, 181), [-5.0000001, -4.9999999, -1.5000001]])
    r, z_plus_r, var_factor = _normal_ratio_terms(z)
    with mpmath.workdps(40):
        for i, zi in enumerate(z):
            zm = mpmath.mpf(float(zi))
            rm = mpmath.npdf(zm) / mpmath.ncdf(zm)
            for got, want in (
                (r[i], rm),
                (z_plus_r[i], zm + rm),
                (var_factor[i], 1 - rm * (zm + rm)),
            ):
                assert abs(float(got / want - 1)) <= 5e-14, zi

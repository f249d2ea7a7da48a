"""Poisson square link at every finite cavity.

``qpinfer.sigma_qp`` and ``qpinfer.tilted_moments`` for ``poisson_square`` answer every finite
mu, every sigma > 0 and every count 0..1e8 within 1e-12 of the mpmath reference, or raise a
``ValueError`` naming the cavity (sigma* under- or overflowing float64). Before: mu = 1e12 was
~1.5e-5 off (absolute node positions), sigma <= ~1e-154 raised numpy's "need at least one array
to concatenate" (sigma^2 underflowed). ``docs/development/robustness_inputs.md`` lists the cases.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mpmath import mp

import qpinfer
from qpinfer.likelihoods.poisson_square.moments import GAUSSIAN_SKEW, MAX_COUNT
from qptables.reference.sigma import reference_point

TOL = 1e-12

#: far (|b| up to 7e4 widths), narrow (sigma 1e-100, 1e-200) and wide (sigma 1e100, 1e300)
#: cavities where the 30-digit reference converges; counts 1, 7, 1000, 1e4 and beyond
CONVERGING = [
    (1e12, 1e5, 1),
    (1e12, 1e5, 10**4),
    (1e6, 1.0, 1),
    (1e4, 1.0, 7),
    (1e4, 0.1, 1000),
    (2e3, 1.0, 10**4),
    (3e4, 1.0, 10**6),
    (1e5, 1.0, MAX_COUNT),
    (1e-100, 1e-100, 7),
    (3e-100, 1e-100, 1000),
    (1e-200, 1e-200, 1000),
    (-2e-200, 1e-200, 1),
    (0.5, 1e100, 1),
    (1e100, 1e100, 7),
    (0.0, 1e100, 10**4),
    (2.0, 1e300, 7),
    (1e300, 1e300, 1),
    (1e6, 1e3, 10**4),
]


@pytest.mark.parametrize(("mu", "sigma", "count"), CONVERGING)
def test_far_narrow_and_wide_cavities_match_mpmath(mu, sigma, count):
    """Worst seen: sigma* 1.8e-15, mean 1.9e-16, std 2e-15 (was 1.5e-5 at mu = 1e12, and an
    exception at sigma = 1e-200)."""
    r = reference_point("poisson_square", mu, sigma, count, dps=30)
    s_qp = float(qpinfer.sigma_qp("poisson_square", mu, sigma, count))
    mean, std = (float(v) for v in qpinfer.tilted_moments("poisson_square", mu, sigma, count))
    assert abs(s_qp - r.sigma_qp) <= TOL * r.sigma_qp
    assert abs(mean - r.mean) <= TOL * max(abs(r.mean), r.std)
    assert abs(std - r.std) <= TOL * r.std


def _main_lobe_mp(mu, sigma, count):
    """(mean, std) of |f|^(2y) N(f | beta, sv^2) for a cavity so far out that only the main lobe
    counts, by mpmath about the lobe's mode (40 digits): the reference's panels do not
    converge there, this integrand is O(1) near the mode."""
    with mp.workdps(40):
        m, s = mp.mpf(mu), mp.mpf(sigma)
        a = 1 + 2 * s * s
        beta, sv = m / a, s / mp.sqrt(a)
        b, n = abs(beta / sv), 2 * count
        u = (b + mp.sqrt(b * b + 4 * n)) / 2
        w = 1 / mp.sqrt(1 + n / u**2)

        def q(h, k):
            return h**k * mp.exp(n * (mp.log1p(h / u) - h / u) - h * h / 2)

        pts = [max(-u, -60 * w), -5 * w, 0, 5 * w, 60 * w]
        z0, z1, z2 = (mp.quad(lambda h, k=k: q(h, k), pts) for k in range(3))
        mean_h, var_h = z1 / z0, z2 / z0 - (z1 / z0) ** 2
        mean = mp.sign(beta) * (b + (u - b) + mean_h) * sv
        return mean, sv * mp.sqrt(var_h)


@pytest.mark.parametrize("count", [1, 7, 1000, 10**4])
@pytest.mark.parametrize(("mu", "sigma"), [(1e12, 1.0), (-1e12, 0.3), (1.0, 1e-100)])
def test_gaussian_regime_matches_mpmath(mu, sigma, count):
    """Far out (|b| >= 1e12 widths) the main lobe's skewness is below 1e-9, so sigma* is the
    tilted std (sigma*/std - 1 = -gamma^2/36 < 3e-20); both match mpmath to ~1e-16."""
    mean_ref, std_ref = _main_lobe_mp(mu, sigma, count)
    s_qp = float(qpinfer.sigma_qp("poisson_square", mu, sigma, count))
    mean, std = (float(v) for v in qpinfer.tilted_moments("poisson_square", mu, sigma, count))
    assert abs(std - std_ref) <= TOL * std_ref
    assert abs(mean - mean_ref) <= TOL * abs(mean_ref)
    assert s_qp == std


def test_mode_relative_regime_is_continuous_at_the_gaussian_threshold():
    """Either side of the skewness threshold (quadrature about the mode below, the tilted std
    above) sigma* agrees with the std to within gamma^2/36 + 1e-15."""
    count = 1000
    n = 2.0 * count
    for gamma in (GAUSSIAN_SKEW * 0.5, GAUSSIAN_SKEW * 2, 1e-7, 1e-6):
        u = (2 * n / gamma) ** (1 / 3)  # gamma ~ 2n/u^3 for u >> sqrt(n)
        mu = (u - n / u) * np.sqrt(3.0)  # b = u - n/u; at sigma = 1, b = mu / sqrt(3)
        s_qp = float(qpinfer.sigma_qp("poisson_square", mu, 1.0, count))
        _, std = qpinfer.tilted_moments("poisson_square", mu, 1.0, count)
        assert 0 <= 1 - s_qp / float(std) <= gamma**2 / 36 * 1.1 + 4e-15  # 2e-15 seen


@pytest.mark.parametrize(
    ("mu", "sigma", "count"),
    [(1.7976931348623157e308, 1.0, 7), (1e300, 1e-300, 1), (0.0, 1.7976931348623157e308, MAX_COUNT),
     (-1.7976931348623157e308, 1.7976931348623157e308, 1), (0.3, 1e-200, 3), (1e-310, 1e-310, 5)],
)  # fmt: skip
def test_extreme_floats_are_answered(mu, sigma, count):
    s_qp = float(qpinfer.sigma_qp("poisson_square", mu, sigma, count))
    mean, std = (float(v) for v in qpinfer.tilted_moments("poisson_square", mu, sigma, count))
    assert np.isfinite(mean) and 0 < s_qp <= std < np.inf


def test_the_smallest_sigma_gives_the_nearest_subnormal():
    """sigma = 5e-324: sigma* = sv * sigma*_x with sigma*_x >= ~0.7 (a lobe's width in units of
    sv; more for two lobes), so it rounds to a subnormal, never to 0 (the kernel would refuse a
    0 with "sigma* underflows float64 for mu=..., sigma=...")."""
    for mu, count in ((1e-323, 10**6), (1.0, 7), (1e300, 0)):
        assert float(qpinfer.sigma_qp("poisson_square", mu, 5e-324, count)) == 5e-324
    assert float(qpinfer.sigma_qp("poisson_square", 0.0, 5e-324, 1)) == 1e-323  # two lobes


_COUNTS = [0, 1, 2, 7, 64, 65, 1000, 10**4, 10**6, MAX_COUNT]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    mu=st.floats(allow_nan=False, allow_infinity=False),
    sigma=st.floats(min_value=0.0, exclude_min=True, allow_infinity=False),
    count=st.sampled_from(_COUNTS),
)
def test_every_finite_cavity_is_answered_or_refused(mu, sigma, count):
    """Whole float64 range: answered -> finite, > 0 and <= sigma_EP (Theorem 2; a subnormal
    answer may sit one subnormal step above), moments finite; refused -> ValueError naming mu
    and sigma (sigma* not a positive finite float64)."""
    mean, std = (float(v) for v in qpinfer.tilted_moments("poisson_square", mu, sigma, count))
    assert np.isfinite(mean) and np.isfinite(std) and std >= 0
    try:
        s_qp = float(qpinfer.sigma_qp("poisson_square", mu, sigma, count))
    except ValueError as err:
        assert str(err).startswith("sigma* underflows float64 for mu=")
        return
    assert np.isfinite(s_qp) and s_qp > 0
    assert s_qp <= max(std * (1 + 1e-13), np.nextafter(std, np.inf))
    assert float(qpinfer.sigma_qp("poisson_square", -mu, sigma, count)) == s_qp

"""The logit and poisson_log likelihoods: sigma* (Zhang et al., 2020, eq. (7)) and EP's tilted
moments (eq. (5)) against the independent mpmath reference (:mod:`qptables.reference.logit`) on
stratified points, Theorem 2 and the symmetries with hypothesis, and input refusal."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qpinfer
from qptables.reference.sigma import reference_point

REF_DPS = 20
TOL = 1e-12
HYPOTHESIS = settings(max_examples=60, deadline=None, derandomize=True)


def _strata(seed: int, labels) -> list[tuple[float, float, int]]:
    """Corners, edges and random points over mu in [-30, 30], log10 sigma in [-2.5, 3], plus
    the regime boundaries; labels cycle."""
    rng = np.random.default_rng(seed)
    locs = [(m, s) for m in (-30.0, -3.0, 0.0, 3.0, 30.0) for s in (3e-3, 0.3, 3.0, 30.0, 300.0)]
    locs += [
        (float(m), float(10.0**ls))
        for m, ls in zip(rng.uniform(-30, 30, 30), rng.uniform(-2.5, 3, 30))
    ]
    labels = list(labels)
    return [(m, s, labels[i % len(labels)]) for i, (m, s) in enumerate(locs)]


POINTS = {
    "logit": _strata(151, (1, -1))
    + [(-41.0, 1.0, 1), (-45.0, 2.5, 1), (38.0, 1.5, 1), (-1e3, 40.0, 1), (2e3, 100.0, -1)]
    # wide cavities with the mass at the step (the mode's Newton cycled; left level sets short)
    + [(-3.184216488363486, 1488.7968081886372, 1), (-5221188.194786136, 9015.711376059571, 1)]
    + [(-92589.48775225302, 1202.2644346174131, 1), (1121.870853212802, 133.04544179780913, -1)],
    "poisson_log": _strata(152, (0, 1, 3, 10, 100, 1000))
    + [
        (-39.0, 1.0, 0),
        (-200.0, 50.0, 0),
        (3.0, 1.0, 100_000),
        (-2e5, 1.0, 100_000),
        (0.0, 1e3, 2),
    ],
}


def _errors(name, points):
    rows = []
    for mu, s, y in points:
        ref = reference_point(name, mu, s, y, dps=REF_DPS)
        q = float(qpinfer.sigma_qp(name, mu, s, y))
        mean, std = (float(v) for v in qpinfer.tilted_moments(name, mu, s, y))
        lz = float(qpinfer.get_likelihood(name).log_z(mu, s, y))
        r_std, r_mean, r_lz = float(ref.std), float(ref.mean), float(ref.log_z)
        rows.append(
            (
                abs(q / float(ref.sigma_qp) - 1.0),
                abs(mean - r_mean) / max(abs(r_mean), r_std),
                abs(std / r_std - 1.0),
                abs(lz - r_lz) / max(1.0, abs(r_lz)),
            )
        )
    return np.array(rows)


def _assert_accurate(name, points):
    worst = _errors(name, points).max(axis=0)
    assert worst[0] <= TOL, f"sigma* {worst[0]:.3g}"
    assert worst[1] <= TOL, f"mean {worst[1]:.3g}"
    assert worst[2] <= TOL, f"std {worst[2]:.3g}"
    # log Z: 1e-11 relative (counts of 1e5 put y log y ~ 1e6 nats into it)
    assert worst[3] <= 1e-11, f"log Z {worst[3]:.3g}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["logit", "poisson_log"])
def test_sigma_qp_and_moments_match_mpmath_on_stratified_points(name):
    assert len(POINTS[name]) >= 60
    _assert_accurate(name, POINTS[name])


@pytest.mark.parametrize("name", ["logit", "poisson_log"])
def test_sigma_qp_and_moments_match_mpmath_on_every_fourth_point(name):
    """The default suite's share of the stratified sample (the whole of it: -m slow)."""
    _assert_accurate(name, POINTS[name][::4] + POINTS[name][-4:])


mus = st.floats(-60.0, 60.0, allow_nan=False)
sigmas = st.floats(-3.0, 3.5).map(lambda e: 10.0**e)


@HYPOTHESIS
@given(mu=mus, sigma=sigmas, y=st.sampled_from([-1, 1]))
def test_logit_theorem2_and_mirror(mu, sigma, y):
    s = float(qpinfer.sigma_qp("logit", mu, sigma, y))
    _, std = qpinfer.tilted_moments("logit", mu, sigma, y)
    assert math.isfinite(s) and 0 < s <= float(std) * (1 + 1e-14)
    assert s == float(qpinfer.sigma_qp("logit", -mu, sigma, -y))
    # the second exact symmetry: sigma(f) N(f | mu, s^2) mirrored is the tilt at -mu - s^2
    if abs(mu) < 30 and sigma < 5:
        other = float(qpinfer.sigma_qp("logit", -mu - y * sigma * sigma, sigma, y))
        assert other == pytest.approx(s, rel=1e-13)


@HYPOTHESIS
@given(mu=mus, sigma=st.floats(-3.0, 3.0).map(lambda e: 10.0**e), y=st.integers(0, 100_000))
def test_poisson_log_theorem2_and_count_shift(mu, sigma, y):
    s = float(qpinfer.sigma_qp("poisson_log", mu, sigma, y))
    _, std = qpinfer.tilted_moments("poisson_log", mu, sigma, y)
    assert math.isfinite(s) and 0 < s <= float(std) * (1 + 1e-14)
    # every count is the y = 0 tilt at m' = mu + y sigma^2 (same sigma* and std)
    m2 = mu + y * sigma * sigma
    s0 = float(qpinfer.sigma_qp("poisson_log", m2, sigma, 0))
    assert s0 == pytest.approx(s, rel=1e-13)


def test_logit_narrow_regime_is_gaussian_to_double_precision():
    """1 - sigma*/sigma_EP ~ 2.5e-4 s^6 (the closed form below s = 1e-3 is exact there)."""
    import qpinfer.likelihoods.logit as lg

    mu = np.array([-3.0, -1.3, 0.0, 1.3, 3.0])
    for s, bound in ((0.1, 5e-10), (0.03, 5e-13)):
        rho = qpinfer.sigma_qp("logit", mu, s, 1) / qpinfer.tilted_moments("logit", mu, s, 1)[1]
        assert np.all(1 - rho < bound) and np.max(1 - rho) > bound / 20
    assert 2.5e-4 * lg._NARROW**6 < 1e-17


def test_poisson_log_gaussian_regime_scaling():
    """1 - rho ~ gamma^2 / 36 (gamma the standardized skewness), so gamma < 1e-8 is exact."""
    from qpinfer.likelihoods.poisson_log import mode_frame

    for mu, s, y in ((3.0, 1.0, 1e5), (5.0, 0.05, 1e4)):
        _, _, alpha, _ = mode_frame(np.array(mu), np.array(s), np.array(y))
        prec = alpha + 1 / s**2
        gamma = alpha / prec**1.5
        rho = (
            qpinfer.sigma_qp("poisson_log", mu, s, y)
            / qpinfer.tilted_moments("poisson_log", mu, s, y)[1]
        )
        assert (1 - rho) / gamma**2 == pytest.approx(1 / 36, rel=2e-3)


@pytest.mark.parametrize(
    "name, y, argument",
    [
        ("logit", 0, "y"),
        ("logit", 2, "y"),
        ("logit", 0.5, "y"),
        ("logit", np.nan, "y"),
        ("poisson_log", -1, "y"),
        ("poisson_log", 1.5, "y"),
        ("poisson_log", 2e6, "y"),
        ("poisson_log", np.inf, "y"),
    ],
)
def test_bad_labels_are_refused_naming_y(name, y, argument):
    for func in (qpinfer.sigma_qp, qpinfer.tilted_moments):
        with pytest.raises(ValueError, match=rf"^{argument}\b"):
            func(name, 0.0, 1.0, y)


@pytest.mark.parametrize("name, y", [("logit", 1), ("poisson_log", 3)])
def test_bad_cavities_are_refused_naming_the_argument(name, y):
    lik = qpinfer.get_likelihood(name)
    for mu, sigma, arg in ((np.nan, 1.0, "mu"), (0.0, -1.0, "sigma"), (0.0, 1e7, "sigma")):
        for func in (qpinfer.sigma_qp, qpinfer.tilted_moments):
            with pytest.raises(ValueError, match=rf"^{arg}\b"):
                func(name, mu, sigma, y)
        with pytest.raises(ValueError, match=rf"^{arg}\b"):
            lik.log_z(mu, sigma, y)


def test_extreme_but_finite_cavities_are_answered():
    """Closed forms answer far cavities; the kernel the rest, inside the accepted range."""
    for name, y in (("logit", 1), ("logit", -1), ("poisson_log", 0), ("poisson_log", 10**5)):
        mu = np.array([-1e300, -1e6, -50.0, 0.0, 50.0, 1e6, 1e300])
        for s in (1e-300, 1e-8, 1.0, 1e3):
            if name == "poisson_log" and s == 1e-300:  # the tilt at mu = 1e300 is narrower
                with pytest.raises(ValueError, match="underflows float64 for mu="):
                    qpinfer.sigma_qp(name, 1e300, s, y)  # than the smallest float64
                mu = mu[:-1]
            q = qpinfer.sigma_qp(name, mu, s, y)
            _, std = qpinfer.tilted_moments(name, mu, s, y)
            assert np.all(np.isfinite(q) & (q > 0) & (q <= std * (1 + 1e-14))), (name, s, q)

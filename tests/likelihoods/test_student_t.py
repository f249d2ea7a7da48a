"""StudentT likelihood: exact sigma* (Zhang et al., 2020, eq. (7)) and EP tilted moments
(eq. (5)) against the independent mpmath reference (qptables.reference.student_t), Theorem 2,
symmetries, bad input.

The 80 stratified reference points (4 nu x 15 strata of (|mu - y|/s, sigma/s) with random
scales and observations, plus 20 bimodal tilts with both lobes holding mass) are computed by
mpmath at 30 digits and stored in ``tests/data/student_t_reference.json`` (~3 min to compute);
``test_fixture_is_the_mpmath_reference`` (slow) recomputes every one of them, a fast test
recomputes three live.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qpinfer
from qpinfer import get_likelihood
from qpinfer.likelihoods.student_t import StudentT
from qpinfer.likelihoods.student_t.canonical import lobes, stationary_points

FIXTURE = Path(__file__).parents[1] / "data" / "student_t_reference.json"
NUS = (0.5, 1.0, 4.0, 30.0)
#: the keys of a reference point (the rest of a fixture row is mpmath's values there)
POINT_KEYS = ("nu", "scale", "mu", "sigma", "y", "bimodal")
D_EDGES = (0.0, 0.5, 2.0, 6.0, 20.0, 100.0)
S_EDGES = (0.05, 0.3, 1.0, 4.0, 20.0, 200.0)


def stratified_points(seed: int = 15) -> list[dict]:
    """(nu, scale, mu, sigma, y) in strata of d = |mu - y|/s and log sigma/s, plus bimodal."""
    rng = np.random.default_rng(seed)
    pts = []
    for nu in NUS:
        cells = [(i, j) for i in range(5) for j in range(5)]
        for k in rng.permutation(len(cells))[:15]:
            i, j = cells[k]
            d = rng.uniform(D_EDGES[i], D_EDGES[i + 1])
            s = np.exp(rng.uniform(np.log(S_EDGES[j]), np.log(S_EDGES[j + 1])))
            pts.append(_point(rng, nu, d, s, False))
        n_bimodal = 0
        while n_bimodal < 5:
            s = np.exp(rng.uniform(np.log(0.5), np.log(50.0)))
            d = s * rng.uniform(2.0, 14.0) + rng.uniform(0.0, 10.0)
            (m1, w1, _, _), (m2, w2, _, _) = lobes(np.array([d]), np.array([s]), nu)
            if not w2[0] > 0:
                continue
            lik = StudentT(nu)
            l1 = lik._log_tilted(m1, np.array([d]), np.array([s]), 0)[0] + np.log(w1)
            l2 = lik._log_tilted(m2, np.array([d]), np.array([s]), 0)[0] + np.log(w2)
            if abs(float(l1[0] - l2[0])) < 8.0:  # both lobes carry mass
                pts.append(_point(rng, nu, d, s, True))
                n_bimodal += 1
    return pts


def _point(rng, nu, d, s, bimodal):
    scale = float(np.exp(rng.uniform(np.log(0.2), np.log(5.0))))
    y = float(rng.uniform(-3.0, 3.0))
    sign = rng.choice([-1.0, 1.0])
    return {
        "nu": nu,
        "scale": scale,
        "mu": float(y + sign * d * scale),
        "sigma": float(s * scale),
        "y": y,
        "bimodal": bool(bimodal),
    }


def compute_fixture(points: list[dict]) -> list[dict]:
    import mpmath

    from qptables.reference.student_t import student_t_reference

    out = []
    for p in points:
        r = student_t_reference(p["nu"], p["scale"], p["mu"], p["sigma"], p["y"], dps=30)
        values = {k: mpmath.nstr(getattr(r, k), 25) for k in ("sigma_qp", "log_z", "mean", "std")}
        out.append(dict(p, **values))
    return out


def _fixture() -> list[dict]:
    return json.loads(FIXTURE.read_text())


def _columns(rows, nu):
    rows = [r for r in rows if r["nu"] == nu]
    return {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}


def test_fixture_covers_the_strata_and_bimodal_tilts():
    rows = _fixture()
    assert len(rows) >= 60
    pts = stratified_points()
    # the fixture is of these points: the draws are seeded, but exp/log of another CPU's SIMD
    # path may move a drawn float by a few ulp (4 u allowed per operation, 16 in all)
    assert len(rows) == len(pts)
    for r, p in zip(rows, pts, strict=True):
        assert (r["nu"], r["bimodal"]) == (p["nu"], p["bimodal"])
        for k in ("scale", "mu", "sigma", "y"):
            assert r[k] == pytest.approx(p[k], rel=16 * np.finfo(float).eps, abs=1e-300)
    for nu in NUS:
        c = _columns(rows, nu)
        d, s = np.abs(c["mu"] - c["y"]) / c["scale"], c["sigma"] / c["scale"]
        bim = stationary_points(d, s, nu)[3]
        assert np.array_equal(bim[c["bimodal"] > 0], np.ones(5, bool))
        assert len(np.unique(np.digitize(d, D_EDGES))) >= 4


@pytest.mark.parametrize("nu", NUS)
def test_sigma_qp_and_moments_match_mpmath(nu):
    """sigma* and the EP moments within 1e-12 of mpmath on every stratified point."""
    c = _columns(_fixture(), nu)
    for scale in np.unique(c["scale"]):
        sel = c["scale"] == scale
        lik = StudentT(nu, scale)
        args = c["mu"][sel], c["sigma"][sel], c["y"][sel]
        s_qp = qpinfer.sigma_qp(lik, *args)
        mean, std = lik.tilted_moments(*args)
        np.testing.assert_allclose(s_qp, c["sigma_qp"][sel], rtol=1e-12, atol=0)
        np.testing.assert_allclose(std, c["std"][sel], rtol=1e-12, atol=0)
        assert np.all(np.abs(mean - c["mean"][sel]) <= 1e-12 * c["std"][sel])
        np.testing.assert_allclose(lik.log_z(*args), c["log_z"][sel], rtol=0, atol=1e-12)


def test_live_mpmath_points_unimodal_bimodal_and_narrow():
    from qptables.reference.student_t import student_t_reference

    for nu, scale, mu, sigma, y in [
        (4.0, 0.7, 70.3, 14.0, 0.3),  # bimodal, both lobes
        (1.0, 2.0, -1.0, 3.0, 0.5),
        (4.0, 1.0, 4.0, 1e-3, 0.0),  # narrow cavity far out, just outside the Gaussian regime
    ]:
        r = student_t_reference(nu, scale, mu, sigma, y, dps=25)
        lik = StudentT(nu, scale)
        assert abs(float(qpinfer.sigma_qp(lik, mu, sigma, y)) / float(r.sigma_qp) - 1) < 1e-12
        mean, std = lik.tilted_moments(mu, sigma, y)
        assert abs(float(std) / float(r.std) - 1) < 1e-12
        assert abs(float(mean) - float(r.mean)) < 1e-12 * float(r.std)


@pytest.mark.slow
def test_fixture_is_the_mpmath_reference():
    rows = _fixture()
    fresh = compute_fixture([{k: r[k] for k in POINT_KEYS} for r in rows])
    for old, new in zip(rows, fresh, strict=True):
        for k in ("sigma_qp", "log_z", "mean", "std"):
            assert abs(float(old[k]) - float(new[k])) <= 1e-20 * max(1.0, abs(float(new[k])))


@settings(max_examples=150, deadline=None)
@given(
    nu=st.sampled_from([0.3, 1.0, 2.0, 4.0, 10.0, 100.0]),
    d=st.floats(-200.0, 200.0),
    log_s=st.floats(-4.0, 3.0),
    scale=st.floats(0.01, 100.0),
)
def test_theorem2_sigma_qp_at_most_sigma_ep(nu, d, log_s, scale):
    lik = StudentT(nu, scale)
    mu, sigma = 1.5 + d * scale, 10**log_s * scale
    s_qp = float(qpinfer.sigma_qp(lik, mu, sigma, 1.5))
    _, s_ep = lik.tilted_moments(mu, sigma, 1.5)
    assert 0 < s_qp <= float(s_ep) * (1 + 1e-14)


def test_symmetries_shift_mirror_scale():
    lik, lik2 = StudentT(3.0, 1.0), StudentT(3.0, 2.5)
    mu, sigma = np.array([-7.0, 0.2, 3.0, 25.0]), np.array([2.0, 0.5, 4.0, 6.0])
    a = qpinfer.sigma_qp(lik, mu, sigma, 0.0)
    np.testing.assert_array_equal(a, qpinfer.sigma_qp(lik, -mu, sigma, 0.0))
    np.testing.assert_allclose(qpinfer.sigma_qp(lik, mu + 4.0, sigma, 4.0), a, rtol=1e-15)
    np.testing.assert_allclose(qpinfer.sigma_qp(lik2, 2.5 * mu, 2.5 * sigma, 0.0), 2.5 * a, 1e-14)


def test_registry_names():
    lik = get_likelihood("student_t")
    assert isinstance(lik, StudentT) and (lik.nu, lik.scale) == (4.0, 1.0)
    assert get_likelihood(lik.name) == lik
    assert get_likelihood("student_t(nu=2.5, scale=0.3)") == StudentT(2.5, 0.3)


@pytest.mark.parametrize(
    "kwargs, name",
    [({"nu": 0.0}, "nu"), ({"nu": -1}, "nu"), ({"nu": np.inf}, "nu"), ({"nu": "4"}, "nu")]
    + [({"scale": 0.0}, "scale"), ({"scale": np.nan}, "scale"), ({"scale": -2}, "scale")],
)
def test_bad_nu_or_scale_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        StudentT(**kwargs)
    if isinstance(kwargs.get("nu"), str):
        return
    with pytest.raises(ValueError, match=name):
        get_likelihood(f"student_t(nu={kwargs.get('nu', 4)}, scale={kwargs.get('scale', 1)})")


def test_bad_y_mu_sigma_name_the_argument():
    lik = StudentT()
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="y"):
            qpinfer.sigma_qp(lik, 0.0, 1.0, bad)
        with pytest.raises(ValueError, match="y"):
            lik.check_y([0.0, bad])
        with pytest.raises(ValueError, match="mu"):
            qpinfer.sigma_qp(lik, bad, 1.0, 0.0)
    with pytest.raises(ValueError, match="sigma"):
        qpinfer.sigma_qp(lik, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="sigma"):
        qpinfer.sigma_qp(lik, 0.0, 1e11, 0.0)  # beyond 1e10 * scale
    with pytest.raises(ValueError, match="sigma"):
        lik.tilted_moments(0.0, 1e11, 0.0)


def test_extreme_but_finite_cavities_are_answered():
    lik = StudentT(4.0, 1.0)
    mu = np.array([0.0, 1e300, -1e15, 3.0, 1e8, 0.0])
    sigma = np.array([1e10, 1.0, 1e-200, 1e-300, 1e9, 1e-5])
    s_qp = qpinfer.sigma_qp(lik, mu, sigma, 0.0)
    _, s_ep = lik.tilted_moments(mu, sigma, 0.0)
    assert np.all(np.isfinite(s_qp)) and np.all(s_qp > 0)
    assert np.all(s_qp <= s_ep * (1 + 1e-14))

"""The step-noise sigma* kernel from the closed-form tilted quantile function (
:mod:`qpinfer.likelihoods.step_noise.closed`) against mpmath, its scale invariance and its
continuity where regimes meet.

Reference: an mpmath evaluation written here, independent of the kernel's numerics -- eq. (7) in
its quantile form ``sigma*/sigma = sum over the two sides of int_0^m Phi^-1(u / c) Phi^-1(u) du``
(``c = eps / Z``, ``(1 - eps) / Z``; ``m`` the side's mass), in ``u`` rather than the kernel's
``x`` / ``t``, by tanh-sinh (``mpmath.quad``) at 30 digits, ``Phi^-1`` by a Halley step on
``mpmath.ncdf`` from a float64 start. Each side is split at ``m / 2``; its upper half runs in
``w = m - u`` with ``1 - u / c = Phi(-side) + w / c`` and ``1 - u = (1 - m) + w`` carried exactly,
so the (near-)singular upper end is resolved however close to 1 it is. Agrees with
:mod:`qptables.reference.step_noise` (x-space, erfinv) to its 15 printed digits where checked.

Tolerance, ``TOL = 1e-14`` relative, from the kernel's numerics (the reference's own error at 30
digits is ~1e-25):

* truncation: each side is cut where phi is e^-42 below its largest value on the side; the
  dropped integrand is a polynomial of degree <= 2 times that Gaussian tail, < 1e-17 of sigma*;
* discretization: every panel is <= 9.2 long and gets 20 / 28 / 36 Gauss-Legendre nodes by
  length, the side's one knee sits at a panel end; Gauss-Legendre's error on a panel decays like
  ``rho^-2n`` with ``rho >= 1.4`` for the nearest complex singularity (``~pi / |knee|`` off the
  axis at the panel end, ``>= 2`` away elsewhere), below 1e-16 of the panel's mass for n >= 20;
* rounding: ``sigma*/sigma`` is three closed-form terms plus two sums of <= 108 node terms each
  (3 panels x 36), each term a product of ~8 correctly rounded (<= 2 ulp) operations. With the
  Gaussian part of the centre lobe summed in closed form the terms' magnitudes add to at most ~3
  sigma*/sigma, so the worst-case bound is ``3 (16 + 108) u = 4e-14`` and the probabilistic one
  (Higham & Mary 2019, ``lambda sqrt(n) u`` with lambda = 6, n = 216 + 16): ``3 * 6 * 15.2 u =
  3e-14`` at 1 - 1e-8 confidence per point; typical errors are ``sqrt(n) u ~ 2e-15``.
  ``TOL = 1e-14`` sits between the typical and the worst case, 10x inside the issue's 1e-13.

Continuity: where the computation switches (closed form <-> quadrature, which lobe holds the
centre, the tail lobe's Newton step, the panel layout and node counts) both sides are within the
error bound of the same exact sigma*, so a jump is <= 2 TOL; the test holds it to that.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from mpmath import mp, mpf
from scipy.special import log_ndtr, ndtri

import qpinfer.likelihoods.step_noise.closed as closed
from qpinfer import sigma_qp
from qpinfer.likelihoods.step_noise import StepNoise

TOL = 1e-14
DPS = 30


# -- the mpmath reference ------------------------------------------------------------------------


def _ppf_lower(p):
    """Phi^-1(p), 0 < p <= 1/2, to the working precision: a float64 start (or the tail
    asymptote where p underflows float64), Newton steps, a final Halley step."""
    fp = float(p)
    if fp > 1e-300:
        x = mpf(float(ndtri(fp)))
    else:
        big_l = -mpmath.log(p)
        x = -mpmath.sqrt(2 * big_l - mpmath.log(4 * mpmath.pi * big_l))
        for _ in range(50):
            dx = (mpmath.ncdf(x) - p) / mpmath.npdf(x)
            x -= dx
            if abs(dx) < mpf(10) ** (-8):
                break
    f = (mpmath.ncdf(x) - p) / mpmath.npdf(x)
    return x - f / (1 + x * f / 2)


def _ppf(lo, hi):
    """Phi^-1 of the probability ``lo`` whose complement is ``hi`` (lo + hi = 1)."""
    return _ppf_lower(lo) if lo <= hi else -_ppf_lower(hi)


def reference_ratio(eps, z, dps=DPS):
    """sigma* / sigma at canonical z = mu / sigma (y = +1), by mpmath (module docstring)."""
    with mp.workdps(dps):
        e, z = mpf(eps), mpf(z)
        left, right = e * mpmath.ncdf(-z), (1 - e) * mpmath.ncdf(z)
        big_z = left + right
        total = mpf(0)
        sides = [((1 - e) / big_z, right / big_z, left / big_z, mpmath.ncdf(z), mpmath.ncdf(-z))]
        if e > 0:
            sides.append((e / big_z, left / big_z, right / big_z, mpmath.ncdf(-z), mpmath.ncdf(z)))
        for c, m, m_c, top, top_c in sides:  # m / c = top, 1 - m / c = top_c, 1 - m = m_c

            def lower(u, c=c):
                return _ppf_lower(u / c) * _ppf_lower(u) if u > 0 else mpf(0)

            def upper(w, c=c, m=m, m_c=m_c, top=top, top_c=top_c):
                r = w / c
                return _ppf(top - r, top_c + r) * _ppf(m - w, m_c + w)

            total += mpmath.quad(lower, [0, m / 2]) + mpmath.quad(upper, [0, m / 2])
        return total


def z_low(eps):
    """Where the kernel's left closed form starts: log(eps / (1 - eps)) - log Phi(z) = 40."""
    from scipy.optimize import brentq

    return brentq(lambda z: np.log(eps / (1 - eps)) - log_ndtr(z) - 40.0, -60.0, 0.0)


def _kernel_ratio(eps, z):
    z = np.atleast_1d(np.asarray(z, dtype=np.float64))
    return sigma_qp(StepNoise(eps), z, np.ones_like(z), 1.0)


# -- against mpmath ------------------------------------------------------------------------------


def _points():
    """Seeded: per eps, 12 z where both lobes matter (from 1 below the left closed form, or -12
    for eps = 0, to 9.5), 3 over [-40, 40]; and a few chosen ones."""
    rng = np.random.default_rng(27)
    pts = []
    for eps in (0.0, 1e-10, 1e-3, 0.2, 0.45):
        lo = min(z_low(eps), -9.0) - 1.0 if eps > 0 else -12.0
        pts += [(eps, float(z)) for z in rng.uniform(lo, 9.5, 12)]
        pts += [(eps, float(z)) for z in rng.uniform(-40.0, 40.0, 3)]
    pts += [(1e-10, -6.4), (1e-10, 3.0), (0.2, 8.99), (0.2, -8.5)]  # balanced lobes; near seams
    pts += [(0.0, -1e4), (0.0, -1e8), (1e-200, -30.0), (0.4999, 0.3)]  # deep tails; eps -> 1/2
    return pts


POINTS = _points()


@pytest.mark.parametrize(("eps", "z"), POINTS, ids=[f"{e:g}-{z:.4g}" for e, z in POINTS])
def test_sigma_qp_matches_mpmath(eps, z):
    ref = reference_ratio(eps, z)
    got = _kernel_ratio(eps, z)[0]
    assert abs(got / float(ref) - 1.0) <= TOL, (eps, z, got, mpmath.nstr(ref, 20))


def test_sigma_qp_is_scale_invariant_from_tiny_to_huge_sigma():
    """sigma*(z s, s) = s sigma*(z, 1) exactly for s = 2^-990 ~ 1e-298 and 2^990 ~ 1e298 (z s is
    then exact), and within TOL of mpmath's s R(z); both labels (the mirror)."""
    eps = 0.2
    z = np.array([-8.7, -3.1, -0.4, 0.0, 1.3, 6.2, 12.0])
    unit = _kernel_ratio(eps, z)
    ref = float(reference_ratio(eps, -3.1))
    for s in (2.0**-990, 2.0**990):
        for y in (1.0, -1.0):
            got = sigma_qp(StepNoise(eps), y * z * s, np.full(z.shape, s), y)
            assert np.array_equal(got, unit * s), (s, y)
        assert abs(sigma_qp(StepNoise(eps), -3.1 * s, s, 1.0) / (ref * s) - 1.0) <= TOL


# -- continuity ----------------------------------------------------------------------------------


def _straddle(pred, lo, hi):
    """Adjacent floats ``(lo, hi)`` with ``pred(lo) != pred(hi)``, by bisection."""
    want = pred(lo)
    assert pred(hi) != want
    while True:
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            return lo, hi
        lo, hi = (mid, hi) if pred(mid) == want else (lo, mid)


def _assert_continuous(ratio, lo, hi, what):
    """Across adjacent floats lo < hi: |R(hi) - R(lo)| <= 2 TOL R, plus R's own change."""
    r = ratio(np.array([lo, hi, lo - 1e-6, hi + 1e-6]))
    slope = abs(r[3] - r[2]) / (hi - lo + 2e-6)
    assert abs(r[1] - r[0]) <= 2 * TOL * r[0] + 2 * slope * (hi - lo), (what, lo, r[:2])


@pytest.mark.parametrize("eps", [0.0, 1e-10, 1e-3, 0.2, 0.45])
def test_continuous_where_the_closed_forms_meet_the_quadrature(eps):
    """At the right closed form (z > 9), the left one (eps > 0: z below z_low(eps) and -9),
    eps = 0's deep tail (z < -1e8, computed at -1e8 and scaled), where the centre lobe changes
    sides (z = 0) and where the right tail lobe gets its Newton step (z = -1.5)."""
    lik = StepNoise(eps)

    def closed_form(z):
        return bool(lik._sigma_closed_form(np.array([z]), np.ones(1), np.ones(1))[0][0])

    def ratio(z):
        return _kernel_ratio(eps, z)

    seams = [
        ("right closed form", _straddle(closed_form, 8.0, 10.0)),
        ("centre lobe side", (0.0, 5e-324)),
        ("tail Newton step", (np.nextafter(-1.5, -np.inf), -1.5)),
    ]
    if eps > 0:
        seams.append(("left closed form", _straddle(closed_form, -60.0, -8.0)))
    else:
        seams.append(("deep tail", (np.nextafter(-1e8, -np.inf), -1e8)))
    for what, (lo, hi) in seams:
        _assert_continuous(ratio, lo, hi, what)


def _layout(eps, z):
    """Each point's quadrature layout: per side, whether the knee cuts it and the panels' node
    counts (recorded from :func:`qpinfer.likelihoods.step_noise.closed._panel_jobs`)."""
    records = []
    original = closed._panel_jobs

    def spy(lo, hi, knee):
        inside = (knee > lo) & (knee < hi)
        counts = [[] for _ in range(lo.size)]
        for rows, pa, pb, n in original(lo, hi, knee):
            for r in rows:
                counts[r].append(n)
            yield rows, pa, pb, n
        records.append([(bool(i), tuple(c)) for i, c in zip(inside, counts)])

    closed._panel_jobs = spy
    try:
        closed.sigma_ratio(np.asarray(z, dtype=np.float64), eps)
    finally:
        closed._panel_jobs = original
    return [tuple(side[i] for side in records) for i in range(np.size(z))]


@pytest.mark.parametrize("eps", [0.0, 1e-10, 0.2])
def test_continuous_where_the_quadrature_layout_changes(eps):
    """Every change of panel layout (knee in or out, node counts) on a 0.02 grid of z over
    [-11, 9] is bisected to adjacent floats and R compared on both sides of it."""
    z = np.arange(-11.0, 9.0, 0.02)
    assert z.size <= closed._BATCH  # one block: the spy's records are per side
    layout = _layout(eps, z)
    changes = np.flatnonzero([a != b for a, b in zip(layout[:-1], layout[1:])])
    assert changes.size >= 3  # the scan does cross layout changes
    for i in changes:
        want = layout[i]
        lo, hi = _straddle(lambda v, want=want: _layout(eps, [v])[0] != want, z[i], z[i + 1])
        _assert_continuous(lambda v: closed.sigma_ratio(v, eps), lo, hi, ("layout", eps))

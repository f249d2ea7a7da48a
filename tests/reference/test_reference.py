"""Self-consistency of the mpmath reference (``qptables.reference.sigma``) that judges the kernel.

The reference is checked against facts it does not use:

* exact Gaussian cases (Poisson ``y = 0`` is exactly Gaussian; a probit tilt with the label
  agreeing with a far-away cavity mean is Gaussian up to ``Phi(-30) ~ 1e-197``), where
  sigma* equals the tilted standard deviation;
* Zhang et al. (2020) Theorem 2 (sigma_QP <= sigma_EP, strictly for non-Gaussian tilts);
* closed-form log Z, mean and standard deviation (App. C.1, C.2) against the same quadrature;
* a different discretisation (panel degree and working precision) agreeing to 1e-30;
* the mirror symmetries of both likelihoods;
* (slow) a naive nested ``mpmath.quad`` evaluation of eq. (7).
"""

from __future__ import annotations

import mpmath
import pytest
from mpmath import mp, mpf

from qptables.reference.sigma import (
    reference_point,
    sigma_qp_reference,
    tilted_moments_reference,
)

NON_GAUSSIAN = [
    ("probit", 0.0, 1.0, 1),
    ("probit", -10.0, 10.0, 1),
    ("probit", 2.5, 3.0, -1),
    ("probit", -50.0, 100.0, 1),
    ("poisson_square", 0.0, 1.0, 3),
    ("poisson_square", 0.0, 0.01, 200),
    ("poisson_square", -10.0, 10.0, 50),
    ("poisson_square", 0.5, 10.0, 1),
]


def rel(a: mpf, b: mpf) -> mpf:
    with mp.workdps(80):
        return abs(a / b - 1)


@pytest.mark.parametrize(("mu", "sigma"), [(0.0, 1.0), (-7.5, 0.1), (50.0, 100.0), (3.0, 0.01)])
def test_poisson_zero_count_tilt_is_gaussian_so_sigma_qp_equals_std(mu, sigma):
    # p(0|f) N(f|mu, s^2) = exp(-f^2) N(f|mu, s^2) is Gaussian with variance s^2/(1+2s^2)
    with mp.workdps(60):
        exact = mpf(sigma) / mpmath.sqrt(1 + 2 * mpf(sigma) ** 2)
    p = reference_point("poisson_square", mu, sigma, 0)
    assert rel(p.sigma_qp, exact) < mpf("1e-35")
    assert rel(p.std, exact) < mpf("1e-35")


@pytest.mark.parametrize(("mu", "sigma", "y"), [(30.0, 1.0, 1), (-45.0, 2.0, -1), (20.0, 0.05, 1)])
def test_probit_tilt_far_from_the_boundary_is_gaussian(mu, sigma, y):
    p = reference_point("probit", mu, sigma, y)
    assert rel(p.sigma_qp, mpf(sigma)) < mpf("1e-35")
    assert rel(p.std, mpf(sigma)) < mpf("1e-35")
    assert rel(p.mean, mpf(mu)) < mpf("1e-35")


@pytest.mark.parametrize("point", NON_GAUSSIAN)
def test_theorem2_sigma_qp_strictly_below_ep_std(point):
    p = reference_point(*point)
    assert 0 < p.sigma_qp < p.std * (1 - mpf("1e-6"))


@pytest.mark.parametrize(
    "point",
    [
        *NON_GAUSSIAN,
        ("probit", -50.0, 0.01, 1),  # log Z ~ -1250, extreme tilt
        ("probit", 10.0, 0.1, -1),
        ("poisson_square", 50.0, 0.01, 100),
        ("poisson_square", -3.0, 0.3, 10),
    ],
)
def test_quadrature_moments_match_closed_forms(point):
    log_z, mean, std = tilted_moments_reference(*point)
    log_z_c, mean_c, std_c = tilted_moments_reference(*point, method="closed_form")
    with mp.workdps(80):
        assert abs(log_z - log_z_c) <= mpf("1e-33") * max(1, abs(log_z_c))
        assert abs(mean - mean_c) <= mpf("1e-33") * max(abs(mean_c), std_c)
        assert rel(std, std_c) < mpf("1e-33")


@pytest.mark.parametrize(
    "point",
    [
        ("probit", -10.0, 10.0, 1),
        ("probit", 3.0, 0.3, -1),
        ("poisson_square", 0.0, 0.01, 200),
        ("poisson_square", 2.0, 1.0, 3),
        ("poisson_square", 46.9, 8.0, 20),
    ],
)
def test_independent_discretisations_agree_to_1e30(point):
    # different panel degree (so different nodes, panels and adaptivity) and working precision
    a = reference_point(*point, dps=40, nodes=64)
    b = reference_point(*point, dps=50, nodes=40)
    assert rel(a.sigma_qp, b.sigma_qp) < mpf("1e-30")
    assert rel(a.std, b.std) < mpf("1e-30")


@pytest.mark.parametrize(("mu", "sigma"), [(1.7, 0.4), (-4.0, 3.0)])
def test_probit_mirror_symmetry(mu, sigma):
    a = sigma_qp_reference("probit", mu, sigma, -1)
    b = sigma_qp_reference("probit", -mu, sigma, 1)
    assert rel(a, b) < mpf("1e-35")


@pytest.mark.parametrize(("mu", "sigma", "y"), [(1.7, 0.4, 1), (-4.0, 3.0, 10)])
def test_poisson_symmetry_in_mu(mu, sigma, y):
    a = sigma_qp_reference("poisson_square", mu, sigma, y)
    b = sigma_qp_reference("poisson_square", -mu, sigma, y)
    assert rel(a, b) < mpf("1e-35")


def test_results_are_cached_and_accept_numpy_scalars():
    import numpy as np

    a = reference_point("probit", np.float64(0.25), np.float64(2.0), np.int64(1))
    b = reference_point("probit", 0.25, 2.0, 1)
    assert a is b


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("cauchit", 0.0, 1.0, 1), "likelihood_name"),  # not a likelihood qpinfer has
        (("probit", float("nan"), 1.0, 1), "mu"),
        (("probit", 0.0, float("inf"), 1), "sigma"),
        (("probit", 0.0, 0.0, 1), "sigma"),
        (("probit", 0.0, 1.0, 0), "y"),
        (("poisson_square", 0.0, 1.0, -1), "y"),
        (("poisson_square", 0.0, 1.0, 1.5), "y"),
    ],
)
def test_reference_rejects_bad_input(args, needle):
    with pytest.raises(ValueError, match=needle):
        sigma_qp_reference(*args)


def _nested_quad_sigma_qp(name: str, mu: float, sigma: float, y: int, cuts, dps: int = 20):
    """Eq. (7) the naive way: F by mpmath.quad inside the outer mpmath.quad."""
    with mp.workdps(dps):
        m, s = mpf(mu), mpf(sigma)
        if name == "probit":

            def dens(f):
                return mpmath.ncdf(y * f) * mpmath.npdf(f, m, s)
        else:

            def dens(f):
                return f ** (2 * y) * mpmath.exp(-f * f) * mpmath.npdf(f, m, s)

        cuts = [mpf(c) for c in cuts]
        z = mpmath.quad(dens, [-mpmath.inf, *cuts, mpmath.inf])

        def integrand(x):
            left = [-mpmath.inf, *[c for c in cuts if c < x], x]
            right = [x, *[c for c in cuts if c > x], mpmath.inf]
            u = min(mpmath.quad(dens, left), mpmath.quad(dens, right)) / z
            if u <= 0:
                return mpf(0)
            start = (
                -mpmath.sqrt(-2 * mpmath.log(u))
                if u < 1e-8
                else mpmath.sqrt(2) * mpmath.erfinv(2 * u - 1)
            )
            return mpmath.npdf(mpmath.findroot(lambda t: mpmath.ncdf(t) - u, start))

        return mpmath.quad(integrand, [-mpmath.inf, *cuts, mpmath.inf])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "cuts"),
    [
        (("probit", 0.0, 1.0, 1), [-5, -2, 0, 2, 5]),
        (("poisson_square", 0.0, 1.0, 3), [-4, -1.2, 0, 1.2, 4]),
    ],
)
def test_nested_mpmath_quad_agrees(point, cuts):
    naive = _nested_quad_sigma_qp(*point, cuts)
    assert rel(sigma_qp_reference(*point), naive) < mpf("1e-14")

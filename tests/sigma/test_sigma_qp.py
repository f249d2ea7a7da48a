"""The exact QP kernel ``qpinfer.sigma_qp`` / ``tilted_moments``.

Accuracy is judged against the independent mpmath reference :mod:`qptables.reference.sigma`
(evaluated here at 30 significant digits, far beyond the 1e-12 asserted):

* a stratified sample of >= 60 points per likelihood over the paper domain
  ``mu in [-10, 10]``, ``sigma in [0.1, 10]`` (Zhang et al., 2020, App. I): the four corners, points on
  every edge, the centre ``(0, 1)``, random interior points (fixed seed); both probit labels;
  Poisson counts 0, 1, 3, 10, 50 -- relative error of sigma* <= 1e-12;
* points beyond the domain (``|mu|`` up to 50, ``sigma`` 0.01 .. 100, counts up to 100) --
  relative error <= ``BEYOND_TOL`` = 1e-12 as well (the issue sets no number there);
* tilted mean / standard deviation (EP's projection) and log Z against the reference.

Invariants (hypothesis, over the whole paper domain): Theorem 2 ``sigma_QP <= sigma_EP``
(up to 1e-14 relative), probit mirror symmetry, Poisson ``mu -> -mu`` symmetry, positivity and
finiteness, QP's mean equal to EP's. Bad input raises ``ValueError`` naming the argument.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mpmath import mp

import qpinfer
from qptables.reference.sigma import reference_point, tilted_moments_reference

REF_DPS = 30
DOMAIN_TOL = 1e-12  # relative error of sigma* on the paper domain
# Beyond the paper domain (|mu| <= 50, sigma in [0.01, 100], y <= 100) the issue asks for
# correct handling but sets no number; the kernel meets the same 1e-12 there (worst seen ~6e-14;
# the widest tilts, sigma = 100, are the hardest), so we hold it to that.
BEYOND_TOL = 1e-12
MOMENT_TOL = 1e-12
POISSON_COUNTS = (0, 1, 3, 10, 50)

HYPOTHESIS = settings(max_examples=60, deadline=None, derandomize=True)


# ----------------------------------------------------------------------------- sample points


def _domain_locations(seed: int, n_random: int) -> list[tuple[float, float]]:
    corners = [(m, s) for m in (-10.0, 10.0) for s in (0.1, 10.0)]
    edges = [(m, s) for m in (-10.0, 10.0) for s in (0.3, 1.0, 3.0)]
    edges += [(m, s) for s in (0.1, 10.0) for m in (-5.0, 0.0, 5.0)]
    centre = [(0.0, 1.0)]
    rng = np.random.default_rng(seed)
    mus = rng.uniform(-10.0, 10.0, n_random)
    sigmas = 10.0 ** rng.uniform(-1.0, 1.0, n_random)
    interior = [(float(m), float(s)) for m, s in zip(mus, sigmas)]
    return corners + edges + centre + interior


def probit_domain_points() -> list[tuple[float, float, int]]:
    locs = _domain_locations(seed=20240601, n_random=14)  # 31 locations x 2 labels = 62
    return [(m, s, y) for m, s in locs for y in (-1, 1)]


def poisson_domain_points() -> list[tuple[float, float, int]]:
    locs = _domain_locations(seed=20240602, n_random=24)
    fixed, interior = locs[:17], locs[17:]
    points = []
    for m, s in fixed[:4] + fixed[16:17]:  # corners and centre: every count
        points += [(m, s, y) for y in POISSON_COUNTS]
    for i, (m, s) in enumerate(fixed[4:16]):  # edges: two counts each, cycling
        points += [(m, s, POISSON_COUNTS[i % 5]), (m, s, POISSON_COUNTS[(i + 2) % 5])]
    for i, (m, s) in enumerate(interior):
        points.append((m, s, POISSON_COUNTS[i % 5]))
    return points  # 25 + 24 + 24 = 73


BEYOND = {
    "probit": [
        (m, s, y) for m in (-50.0, -20.0, 0.0, 35.0, 50.0) for s in (0.01, 100.0) for y in (-1, 1)
    ]
    + [(-50.0, 1.0, 1), (50.0, 1.0, 1), (-50.0, 1.0, -1), (12.0, 0.5, -1), (-0.3, 30.0, 1)],
    "poisson_square": [
        (m, s, y) for m in (-50.0, 0.0, 50.0) for s in (0.01, 100.0) for y in (0, 3, 100)
    ]
    + [(0.0, 0.01, 1), (1e-3, 0.05, 100), (25.0, 1.0, 20), (-7.0, 0.02, 100), (0.0, 1.0, 100)],
}

DOMAIN = {"probit": probit_domain_points(), "poisson_square": poisson_domain_points()}


def _ref(name: str, point: tuple[float, float, int]):
    return reference_point(name, point[0], point[1], point[2], dps=REF_DPS)


def _relative_errors(name, points, values, attr):
    errs = []
    with mp.workdps(REF_DPS):
        for p, v in zip(points, values):
            ref = getattr(_ref(name, p), attr)
            errs.append(float(abs((v - ref) / ref)))
    return np.array(errs)


def _report(name, points, values, errs, tol) -> str:
    bad = [i for i in np.argsort(errs)[::-1] if errs[i] > tol][:10]
    lines = [f"{name}: {int((errs > tol).sum())}/{len(errs)} points above {tol:g}"]
    for i in bad:
        mu, sigma, y = points[i]
        ref = float(_ref(name, points[i]).sigma_qp)
        lines.append(
            f"  mu={mu!r} sigma={sigma!r} y={y}: got {values[i]!r} ref {ref!r} rel {errs[i]:.3g}"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- accuracy


def test_stratified_samples_have_at_least_60_points_per_likelihood():
    assert len(DOMAIN["probit"]) >= 60
    assert len(DOMAIN["poisson_square"]) >= 60
    assert {y for _, _, y in DOMAIN["poisson_square"]} == set(POISSON_COUNTS)
    assert {y for _, _, y in DOMAIN["probit"]} == {-1, 1}


@pytest.mark.parametrize("name", ["probit", "poisson_square"])
@pytest.mark.parametrize("region", ["domain", "beyond"])
def test_sigma_qp_matches_mpmath_reference(name, region):
    points = DOMAIN[name] if region == "domain" else BEYOND[name]
    tol = DOMAIN_TOL if region == "domain" else BEYOND_TOL
    mu, sigma, y = (np.array(c) for c in zip(*points))
    got = qpinfer.sigma_qp(name, mu, sigma, y)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == mu.shape
    errs = _relative_errors(name, points, got, "sigma_qp")
    assert errs.max() <= tol, _report(name, points, got, errs, tol)


@pytest.mark.parametrize("name", ["probit", "poisson_square"])
@pytest.mark.parametrize("region", ["domain", "beyond"])
def test_tilted_moments_match_mpmath_reference(name, region):
    points = DOMAIN[name] if region == "domain" else BEYOND[name]
    mu, sigma, y = (np.array(c) for c in zip(*points))
    mean, std = qpinfer.tilted_moments(name, mu, sigma, y)
    assert mean.dtype == np.float64 and std.dtype == np.float64
    std_errs = _relative_errors(name, points, std, "std")
    assert std_errs.max() <= MOMENT_TOL, _report(name, points, std, std_errs, MOMENT_TOL)
    # the mean can be 0 (Poisson, mu = 0): measure its error on the scale max(|mean|, std)
    with mp.workdps(REF_DPS):
        mean_errs = np.array(
            [
                float(abs(m - r.mean) / max(abs(r.mean), r.std))
                for m, r in zip(mean, (_ref(name, p) for p in points))
            ]
        )
    worst = int(mean_errs.argmax())
    assert mean_errs.max() <= MOMENT_TOL, (
        f"{name} mean: worst at {points[worst]}: got {mean[worst]!r}, "
        f"ref {float(_ref(name, points[worst]).mean)!r}, error {mean_errs[worst]:.3g}"
    )


@pytest.mark.parametrize("name", ["probit", "poisson_square"])
def test_log_z_matches_mpmath_reference(name):
    lik = qpinfer.get_likelihood(name)
    points = DOMAIN[name][::3] + BEYOND[name][::3]
    mu, sigma, y = (np.array(c) for c in zip(*points))
    got = lik.log_z(mu, sigma, y)
    with mp.workdps(REF_DPS):
        errs = [
            float(abs(g - _ref(name, p).log_z) / max(1, abs(_ref(name, p).log_z)))
            for g, p in zip(got, points)
        ]
    assert max(errs) <= 1e-12, points[int(np.argmax(errs))]


def test_likelihood_objects_and_names():
    assert qpinfer.get_likelihood("probit").name == "probit"
    assert qpinfer.get_likelihood("poisson_square").name == "poisson_square"
    lik = qpinfer.get_likelihood("probit")
    assert qpinfer.get_likelihood(lik) is lik
    # an object and its name give identical results
    args = (np.array([-1.0, 0.5]), np.array([0.7, 2.0]), np.array([1, -1]))
    np.testing.assert_array_equal(qpinfer.sigma_qp(lik, *args), qpinfer.sigma_qp("probit", *args))


def test_log_pdf_matches_mpmath():
    import mpmath

    probit = qpinfer.get_likelihood("probit")
    poisson = qpinfer.get_likelihood("poisson_square")
    f = np.array([-40.0, -3.0, 0.0, 0.2, 5.0, 8.0])
    got = probit.log_pdf(f, np.ones_like(f))
    with mp.workdps(50):  # log Phi(5) = log(1 - 2.9e-7) needs more than double precision
        ref = [float(mpmath.log(mpmath.ncdf(v))) for v in f]
    np.testing.assert_allclose(got, ref, rtol=1e-13)
    f = np.array([-4.0, 0.3, 2.0, 7.5])
    y = np.array([0, 1, 3, 50])
    got = poisson.log_pdf(f, y)
    with mp.workdps(50):
        ref = [
            float(2 * k * mpmath.log(abs(v)) - v * v - mpmath.loggamma(k + 1)) for v, k in zip(f, y)
        ]
    np.testing.assert_allclose(got, ref, rtol=1e-13)


def test_broadcasting_matches_pointwise_evaluation():
    mu = np.linspace(-3.0, 3.0, 4)[:, None]  # (4, 1)
    sigma = np.array([0.2, 1.0, 5.0])  # (3,)
    grid = qpinfer.sigma_qp("poisson_square", mu, sigma, 3)
    assert grid.shape == (4, 3)
    for i in range(4):
        for j in range(3):
            one = qpinfer.sigma_qp("poisson_square", float(mu[i, 0]), float(sigma[j]), 3)
            assert float(one) == pytest.approx(grid[i, j], rel=1e-15)
    mean, std = qpinfer.tilted_moments("probit", mu, sigma, -1)
    assert mean.shape == std.shape == (4, 3)


# ----------------------------------------------------------------------------- invariants

mus = st.floats(-10.0, 10.0, allow_nan=False)
sigmas = st.floats(-1.0, 1.0).map(lambda t: 10.0**t)
labels = st.sampled_from([-1, 1])
counts = st.integers(0, 60)


@HYPOTHESIS
@given(mu=mus, sigma=sigmas, y=labels)
def test_probit_theorem2_positivity_and_mean(mu, sigma, y):
    s = float(qpinfer.sigma_qp("probit", mu, sigma, y))
    mean, std = (float(v) for v in qpinfer.tilted_moments("probit", mu, sigma, y))
    assert math.isfinite(s) and s > 0
    assert s <= std * (1 + 1e-14)
    ep_mean, ep_std = (
        float(v) for v in qpinfer.get_likelihood("probit").tilted_moments(mu, sigma, y)
    )
    _, cf_mean, cf_std = tilted_moments_reference(
        "probit", mu, sigma, y, dps=25, method="closed_form"
    )
    assert mean == pytest.approx(float(cf_mean), rel=1e-12, abs=1e-12 * std)
    assert std == pytest.approx(float(cf_std), rel=1e-12)
    assert mean == pytest.approx(ep_mean, rel=1e-14, abs=1e-14 * std)
    assert std == pytest.approx(ep_std, rel=1e-14)


@HYPOTHESIS
@given(mu=mus, sigma=sigmas, y=counts)
def test_poisson_theorem2_positivity_and_mean(mu, sigma, y):
    s = float(qpinfer.sigma_qp("poisson_square", mu, sigma, y))
    mean, std = (float(v) for v in qpinfer.tilted_moments("poisson_square", mu, sigma, y))
    assert math.isfinite(s) and s > 0
    assert s <= std * (1 + 1e-14)
    ep_mean, ep_std = (
        float(v) for v in qpinfer.get_likelihood("poisson_square").tilted_moments(mu, sigma, y)
    )
    _, cf_mean, cf_std = tilted_moments_reference(
        "poisson_square", mu, sigma, y, dps=25, method="closed_form"
    )
    assert mean == pytest.approx(float(cf_mean), rel=1e-12, abs=1e-12 * std)
    assert std == pytest.approx(float(cf_std), rel=1e-12)
    assert mean == pytest.approx(ep_mean, rel=1e-14, abs=1e-14 * std)
    assert std == pytest.approx(ep_std, rel=1e-14)


@HYPOTHESIS
@given(mu=mus, sigma=sigmas)
def test_probit_mirror_symmetry(mu, sigma):
    # sigma*(mu, sigma, -1) == sigma*(-mu, sigma, +1): the tilted densities are mirror images
    a = float(qpinfer.sigma_qp("probit", mu, sigma, -1))
    b = float(qpinfer.sigma_qp("probit", -mu, sigma, 1))
    assert a == pytest.approx(b, rel=1e-15)


@HYPOTHESIS
@given(mu=mus, sigma=sigmas, y=counts)
def test_poisson_symmetry_in_mu(mu, sigma, y):
    a = float(qpinfer.sigma_qp("poisson_square", mu, sigma, y))
    b = float(qpinfer.sigma_qp("poisson_square", -mu, sigma, y))
    assert a == pytest.approx(b, rel=1e-15)


@HYPOTHESIS
@given(
    mu=st.lists(mus, min_size=1, max_size=20),
    sigma=sigmas,
    y=st.sampled_from([0, 1, 3, 10, 50]),
)
def test_vectorised_poisson_outputs_positive_finite_and_below_ep(mu, sigma, y):
    mu = np.array(mu)
    s = qpinfer.sigma_qp("poisson_square", mu, sigma, y)
    _, std = qpinfer.tilted_moments("poisson_square", mu, sigma, y)
    assert s.shape == mu.shape
    assert np.all(np.isfinite(s)) and np.all(s > 0)
    assert np.all(s <= std * (1 + 1e-14))


# ----------------------------------------------------------------------------- bad input

NAN, INF = float("nan"), float("inf")
BAD_INPUTS = [
    # (likelihood, mu, sigma, y, argument named in the message, fragment of the bad value)
    ("probit", NAN, 1.0, 1, "mu", "nan"),
    ("probit", INF, 1.0, 1, "mu", "inf"),
    ("probit", np.array([0.0, -INF]), 1.0, 1, "mu", "inf"),
    ("poisson_square", NAN, 1.0, 2, "mu", "nan"),
    ("probit", 0.0, NAN, 1, "sigma", "nan"),
    ("probit", 0.0, INF, 1, "sigma", "inf"),
    ("probit", 0.0, 0.0, 1, "sigma", "0"),
    ("poisson_square", 0.0, -2.0, 1, "sigma", "-2"),
    ("probit", 0.0, np.array([1.0, -0.5]), 1, "sigma", "-0.5"),
    ("probit", 0.0, 1.0, 0, "y", "0"),
    ("probit", 0.0, 1.0, 2, "y", "2"),
    ("probit", 0.0, 1.0, 0.5, "y", "0.5"),
    ("probit", 0.0, 1.0, np.array([1, -1, 3]), "y", "3"),
    ("poisson_square", 0.0, 1.0, -1, "y", "-1"),
    ("poisson_square", 0.0, 1.0, 1.5, "y", "1.5"),
    ("poisson_square", 0.0, 1.0, np.array([2.0, NAN]), "y", "nan"),
]


@pytest.mark.parametrize("func", [qpinfer.sigma_qp, qpinfer.tilted_moments])
@pytest.mark.parametrize(("name", "mu", "sigma", "y", "argument", "value"), BAD_INPUTS)
def test_bad_input_raises_value_error_naming_argument(func, name, mu, sigma, y, argument, value):
    with pytest.raises(ValueError) as info:
        func(name, mu, sigma, y)
    message = str(info.value)
    assert argument in message
    assert value in message.lower()


@pytest.mark.parametrize("func", [qpinfer.sigma_qp, qpinfer.tilted_moments])
def test_unknown_likelihood_name_raises(func):
    with pytest.raises(ValueError, match="cauchit"):  # (not a likelihood qpinfer has)
        func("cauchit", 0.0, 1.0, 1)
    with pytest.raises(ValueError, match="cauchit"):
        qpinfer.get_likelihood("cauchit")


@pytest.mark.parametrize("func", [qpinfer.sigma_qp, qpinfer.tilted_moments])
def test_non_broadcastable_shapes_raise(func):
    with pytest.raises(ValueError) as info:
        func("probit", np.zeros(3), np.ones(2), 1)
    message = str(info.value)
    assert "shape" in message.lower() or "broadcast" in message.lower()
    assert "(3,)" in message and "(2,)" in message  # the bad values: the shapes
    assert "mu" in message or "sigma" in message  # the arguments

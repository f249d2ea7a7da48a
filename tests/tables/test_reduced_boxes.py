"""v2 boxes of the Poisson (square link) and step-noise likelihoods
(qpinfer.likelihoods.poisson_square.boxes)."""

from __future__ import annotations

import numpy as np
import pytest

import qpinfer
from qpinfer.likelihoods.poisson_square.boxes import (
    MAX_COUNT,
    PoissonSquareLobe,
    lobe_s_range,
    poisson_boxes,
    poisson_r,
)
from qpinfer.likelihoods.step_noise.boxes import step_noise_boxes, step_noise_z_range
from qpinfer.tables.chebyshev import coefficients, evaluate

POISSON = qpinfer.get_likelihood("poisson_square")
STEP = qpinfer.get_likelihood("step_noise(eps=0.2)")


def _ratio(lik, mu, sigma, y):
    q = qpinfer.sigma_qp(lik, mu, sigma, y)
    _, ep = qpinfer.tilted_moments(lik, mu, sigma, y)
    return q / ep


SIGMAS = np.array([1e-3, 1e-2, 0.1, 0.5, 1.0, 3.0, 10.0, 100.0, 1e3])


@pytest.mark.parametrize("y", [1.0, 5.0, 40.0, 1000.0])
@pytest.mark.parametrize("r", [0.0, 0.7, -2.3, 15.0])
def test_poisson_depends_on_r_only(y, r):
    """sigma* in the tilted density's own units, sigma* sqrt(1 + 2 sigma^2) / sigma, and the
    ratio to the EP std depend on (y, r) only; the EP std of the moment formulas for counts
    <= 64 carries ~1e-14 of cancellation, hence the looser tolerance on the ratio."""
    a = np.sqrt(1.0 + 2.0 * SIGMAS**2)
    mu = r * SIGMAS * a
    q = qpinfer.sigma_qp(POISSON, mu, SIGMAS, y) * a / SIGMAS
    np.testing.assert_allclose(q, q[4], rtol=3e-15, atol=0)
    rho = _ratio(POISSON, mu, SIGMAS, y)
    np.testing.assert_allclose(rho, rho[4], rtol=1e-13, atol=0)
    np.testing.assert_array_equal(rho, _ratio(POISSON, -mu, SIGMAS, y))  # even in r


@pytest.mark.parametrize("z", [-8.7, -1.3, 0.0, 0.4, 5.5])
def test_step_noise_depends_on_z_only(z):
    rho = _ratio(STEP, z * SIGMAS, SIGMAS, 1.0)
    np.testing.assert_allclose(rho, rho[4], rtol=1e-15, atol=0)
    np.testing.assert_array_equal(_ratio(STEP, -z * SIGMAS, SIGMAS, -1.0), rho)  # mirror


@pytest.mark.parametrize("beta", [5.0, 10.0])
def test_poisson_main_lobe_shape_law(beta):
    """1 - rho = C kappa^3 / y, kappa = exp(-2 asinh beta), C = 0.0556: the law that places the
    end of the lobe box (rho = 1 to 1e-17)."""
    y = np.array([1.0, 2.0, 10.0, 65.0, 300.0, 1000.0])
    r = beta * np.sqrt(8.0 * y)
    kappa = np.exp(-2.0 * np.arcsinh(beta))
    c = (1.0 - _ratio(POISSON, 6.0 * r, 2.0, y)) * y / kappa**3
    np.testing.assert_allclose(c, 0.0556, rtol=0.05 if beta == 5.0 else 0.02)


def test_poisson_lobe_box_ends_where_rho_is_one():
    y = np.array([1.0, 7.0, 100.0, 1000.0])
    _, s_end = lobe_s_range(y)
    r = np.sinh(s_end) * np.sqrt(8.0 * y)
    assert (r < 6000).all()
    # the kernel loses ~1e-17 |r| at large |r| (node positions), i.e. < 6e-14 here
    np.testing.assert_allclose(_ratio(POISSON, 6.0 * r, 2.0, y), 1.0, rtol=1e-13, atol=0)


def _random_poisson_cavities(rng, n):
    y = np.concatenate([[1.0, 2.0, 3.0, 64.0, 65.0, 1000.0], rng.integers(1, 1001, n - 6)])
    r = np.concatenate([[0.0] * 3, 10.0 ** rng.uniform(-3, 4, n - 3)])
    sigma = 10.0 ** rng.uniform(-4, 4, n)
    return r * sigma * np.sqrt(1.0 + 2.0 * sigma**2), sigma, y


def test_poisson_boxes_cover_and_round_trip():
    rng = np.random.default_rng(3)
    boxes = poisson_boxes()
    assert [b.name for b in boxes] == ["near", "far", "lobe"]
    mu, sigma, y = _random_poisson_cavities(rng, 3000)
    todo = np.ones(mu.size, dtype=bool)
    for box in boxes:
        inside, index, (x,) = box.locate(mu, sigma, y)
        sel = inside & todo
        assert (index[sel] == y[sel] - 1).all()
        assert np.asarray(box.labels)[index[sel]].tolist() == y[sel].tolist()
        # back to a cavity at the node sd, then located again: the same coordinates
        mu2, sigma2 = box.cavity(y[sel], x[sel])
        r = poisson_r(mu[sel], sigma[sel])
        if isinstance(box, PoissonSquareLobe):  # clipped where rho = 1 to 1e-17
            r = np.minimum(r, np.sinh(lobe_s_range(y[sel])[1]) * np.sqrt(8.0 * y[sel]))
        np.testing.assert_allclose(poisson_r(mu2, sigma2), r, rtol=1e-13)
        inside2, index2, (x2,) = box.locate(mu2, sigma2, y[sel])
        assert inside2.all() and (index2 == index[sel]).all()
        np.testing.assert_allclose(x2, x[sel], rtol=1e-12, atol=1e-14)
        todo &= ~inside
    assert not todo.any()  # every count 1..1000 and every r lies in a box


def test_poisson_boxes_edges():
    boxes = poisson_boxes()
    mu = np.array([1.0, 1e300, 1.0, 1.0, 1e-300])
    sigma = np.array([1e-300, 1e-300, 1e300, 1.0, 1.0])
    y = np.array([5.0, 5.0, 5.0, 1001.0, 1000.0])
    near, far, lobe = (b.locate(mu, sigma, y) for b in boxes)
    assert lobe[0].tolist() == [True, True, False, False, False]
    assert lobe[2][0][:2].tolist() == [1.0, 1.0]  # clipped: rho = 1 to 1e-17
    assert near[0].tolist() == [False, False, True, False, True]
    assert not (near[0][3] or far[0][3] or lobe[0][3])  # count above the table: the kernel
    assert len(boxes[0].labels) == MAX_COUNT


def test_step_noise_box_round_trip_and_range():
    (box,) = step_noise_boxes(0.2)
    (ax,) = box.axes
    assert (ax.start, ax.stop) == (-9.5, 9.5)
    assert step_noise_z_range(1e-3)[0] <= -9.4 and step_noise_z_range(1e-10)[0] <= -10.9
    with pytest.raises(ValueError, match="eps"):
        step_noise_boxes(0.0)
    z = np.linspace(-9.5, 9.5, 101)
    mu, sigma = box.cavity(1.0, z)
    inside, index, (z2,) = box.locate(mu, sigma, np.ones_like(z))
    assert inside.all() and (index == 0).all()
    np.testing.assert_array_equal(z2, z)
    # everything outside the box is the kernel's closed form for eps = 0.2
    zz = np.array([-9.5001, -30.0, 9.5001, 40.0])
    mask, _ = STEP._sigma_closed_form(zz, np.ones_like(zz), np.ones_like(zz))
    assert mask.all()


def _max_error(lik, box, labels, n_points, seed):
    (ax,) = box.axes
    rng = np.random.default_rng(seed)
    worst = 0.0
    for label in labels:
        mu, sigma = box.cavity(label, ax.nodes())
        coef = coefficients(_ratio(lik, mu, sigma, label), box.axes)
        x = rng.uniform(ax.start, ax.stop, n_points)
        mu, sigma = box.cavity(label, x)
        err = np.abs(evaluate(coef, box.axes, (x,)) / _ratio(lik, mu, sigma, label) - 1.0)
        worst = max(worst, err.max())
    return worst


@pytest.mark.parametrize("k", [0, 1, 2])
def test_poisson_interpolation_accuracy(k):
    box = poisson_boxes()[k]
    assert _max_error(POISSON, box, [1.0, 2.0, 65.0, 1000.0], 500, k) <= 1e-13


def test_step_noise_interpolation_accuracy():
    assert _max_error(STEP, step_noise_boxes(0.2)[0], [1.0], 4000, 0) <= 1e-13


@pytest.mark.slow
def test_full_random_check():
    """The probe's check: 2e5 random points per box, counts log-uniform on 1..1000. The bounds
    are the kernel's own noise (see docs/development/tables-v2.md): its EP std for counts 13..64 (moment
    formulas, ~1e-13) and a misplaced panel edge at y = 3, w ~ 12.02 (1.8e-12 against mpmath)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "probe_v2_boxes.py"
    spec = importlib.util.spec_from_file_location("probe_v2_boxes", path)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    rng = np.random.default_rng(0)
    for lik, boxes in ((POISSON, poisson_boxes()), (STEP, step_noise_boxes(0.2))):
        for box in boxes:
            (ax,) = box.axes
            values = probe.box_values(lik, box)
            coef = np.stack([coefficients(v, box.axes) for v in values])
            labels = np.asarray(box.labels)
            li = probe.random_labels(rng, box, 200_000)
            x = rng.uniform(ax.start, ax.stop, li.size)
            mu, sigma = probe._cavities(box, labels, li, x)
            exact = _ratio(lik, mu, sigma, labels[li])
            err = np.abs(probe.interpolate(coef, box, li, x) / exact - 1.0)
            assert err.max() <= 2e-12, box.name
            assert np.quantile(err, 0.999) <= 2e-13, box.name
            assert err[labels[li] != 3].max() <= 4e-13, box.name

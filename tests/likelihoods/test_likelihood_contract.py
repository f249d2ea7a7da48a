"""Every registered likelihood keeps the likelihood protocol (:class:`qpinfer.Likelihood`): EP's
moments and sigma* against its mpmath reference (:data:`qptables.reference.sigma.REFERENCES`),
Theorem 2 (sigma* <= sigma_EP), a cell-table layout whose boxes survive a store's attributes and
find their own nodes, and the hooks the kernel's derivatives ask for. A likelihood added to the
registry is picked up here without a line of this file changing."""

from __future__ import annotations

import numpy as np
import pytest

from qpinfer.likelihoods.registry import box_from_attrs, get_likelihood, registered
from qpinfer.sigma import sigma_qp
from qptables.reference.sigma import REFERENCES, reference_point

NAMES = sorted(registered())
#: observations tried on every likelihood; each keeps those its check_y accepts
CANDIDATE_Y = (-1.0, 1.0, 0.0, 3.0, 0.7)
DPS = 20  # digits of the reference: ample for a 1e-9 check
EPS = np.finfo(np.float64).eps


def _observations(lik) -> list[float]:
    out = []
    for y in CANDIDATE_Y:
        try:
            lik.check_y(np.array([y]))
        except ValueError:
            continue
        out.append(y)
    return out


@pytest.fixture(params=NAMES)
def lik(request):
    return get_likelihood(request.param)


def test_every_registered_likelihood_has_a_reference_module():
    assert set(NAMES) <= set(REFERENCES)


def test_moments_and_sigma_star_match_the_mpmath_reference(lik):
    ys = _observations(lik)[:1]
    assert ys, f"{lik!r} accepts none of {CANDIDATE_Y}"
    mu, s = 0.3, 1.7
    for y in ys:
        ref = reference_point(lik.name, mu, s, y, dps=DPS)
        log_z, mean, std = (
            float(v[0]) for v in lik.ep_moments(np.array([mu]), np.array([s]), np.array([y]))
        )
        # the kernel and the moments are accurate to ~1e-13 (tests/sigma); 1e-9 leaves room
        # for any CPU's rounding
        assert abs(log_z - float(ref.log_z)) <= 1e-9 * max(1.0, abs(float(ref.log_z)))
        assert abs(mean - float(ref.mean)) <= 1e-9 * s
        assert abs(std / float(ref.std) - 1.0) <= 1e-9
        got = float(sigma_qp(lik, mu, s, y))
        assert abs(got / float(ref.sigma_qp) - 1.0) <= 1e-9


def test_sigma_star_is_at_most_ep_std(lik):
    mu, s = np.meshgrid(np.linspace(-4.0, 4.0, 9), np.logspace(-1.0, 1.0, 5))
    for y in _observations(lik):
        star = sigma_qp(lik, mu, s, y)
        _, std = lik.tilted_moments(mu, s, y)
        assert np.all(star <= std * (1.0 + 16.0 * EPS)), y  # Theorem 2, within rounding


def test_the_table_layout_survives_its_attributes_and_finds_its_nodes(lik):
    boxes = lik.table_boxes()
    assert boxes and len({b.name for b in boxes}) == len(boxes)
    for box in boxes:
        assert box_from_attrs(box.to_attrs()) == box
        # the cavity at the centre of the box's first cell is inside it, at those coordinates
        coords = tuple(np.array([ax.start + 0.5 * ax.width]) for ax in box.axes)
        for k, label in enumerate(box.labels[:2]):
            mu, sigma = box.cavity(label, *coords)
            inside, index, found = box.locate(mu, sigma, np.array([label]))
            assert inside.all() and (index == k).all(), (box.name, label)
            for want, got in zip(coords, found, strict=True):
                assert np.allclose(got, want, rtol=1e-9, atol=1e-9 * box.axes[0].width)


def test_the_canonical_slope_is_the_derivative_of_canonical(lik):
    mu = np.array([-2.3, -0.4, 0.7, 3.1])
    h = 1e-6
    for y in _observations(lik):
        yy = np.full(mu.shape, y)
        slope = lik._canonical_slope(mu, yy)
        if slope is None:
            continue  # (the kernel then differentiates numerically)
        diff = (lik.canonical(mu + h, yy)[0] - lik.canonical(mu - h, yy)[0]) / (2.0 * h)
        assert np.allclose(slope, diff, atol=1e-6)


def test_the_baselines_derivatives_are_those_of_log_pdf(lik):
    f = np.array([-1.3, 0.4, 2.2])
    h = 1e-5
    for y in _observations(lik):
        yy = np.full(f.shape, y)
        try:
            lp, d1, d2, _ = lik.log_lik_derivatives(f, yy)
        except ValueError as exc:  # a likelihood without the baselines says so, naming itself
            assert repr(lik) in str(exc)
            return
        assert np.allclose(lp, lik.log_pdf(f, yy), rtol=1e-12, atol=1e-12)
        num = (lik.log_pdf(f + h, yy) - lik.log_pdf(f - h, yy)) / (2.0 * h)
        assert np.allclose(d1, num, rtol=1e-6, atol=1e-7)
        num2 = (lik.log_lik_derivatives(f + h, yy)[1] - lik.log_lik_derivatives(f - h, yy)[1]) / (
            2.0 * h
        )
        assert np.allclose(d2, num2, rtol=1e-6, atol=1e-7)

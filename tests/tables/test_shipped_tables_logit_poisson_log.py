"""The logit and poisson_log v2 tables (boxes: qpinfer.likelihoods.logit.boxes and
qpinfer.likelihoods.poisson_log.boxes): every cavity the kernel accepts is answered by a closed form or
a box, within 1e-12 of the exact kernel, with no fallback to the kernel; the log-link table serves
every count with no count axis; the stored mpmath verification; the estimators' default use.

Two kinds of tests. The box layout itself (``boxes_for``), with no store: coordinates round
trip, every cavity of the former gaps (logit 10^0.5 < s < 20; poisson_log s > 1 and modes a > 16)
lies in a box (the reader's own lookup path on a table of the layout), and the hardest cells
of the new boxes hold 1e-12 against the kernel; ``-m slow``: the whole layout's interpolant
against the kernel on 60,000 random cavities each. And the shipped stores (``_shipped``), which
see the new boxes once ``qptables ship`` has rebuilt them. (The bit-for-bit tile rebuild is
tests/tables/test_shipped_tables.py, parametrized over SHIPPED.)"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import qpinfer
from qpinfer.likelihoods.layout import CellAxis
from qpinfer.likelihoods.poisson_log import mode_frame
from qpinfer.likelihoods.registry import boxes_for, get_likelihood
from qpinfer.tables.chebyshev import coefficients, evaluate
from qpinfer.tables.reduced import ReducedTable, open_reduced
from qpinfer.tables.shipped import open_shipped, shipped_path
from tests._helpers import blobs, coal

NEW_BOXES = {
    "logit": ("mid",),
    "poisson_log": ("high", "wall", "wall_wide", "near", "kappa", "kappa_far"),
}


def _rho(name, mu, sigma, y):
    _, ep = qpinfer.tilted_moments(name, mu, sigma, y)
    return qpinfer.sigma_qp(name, mu, sigma, y) / ep


def _layout_table(name, values=None) -> ReducedTable:
    """A reader on the layout of ``boxes_for(name)`` with no store: node values rho from the
    kernel (``values="kernel"``: every node of every box) or all 1 (the lookup path and its
    fallback count only)."""
    boxes = boxes_for(name)
    coefs = []
    for box in boxes:
        grids = np.meshgrid(*(ax.nodes() for ax in box.axes), indexing="ij")
        if values == "kernel":
            mu, s = box.cavity(box.labels[0], *(g.ravel() for g in grids))
            rho = _rho(name, mu, s, np.full(mu.shape, box.labels[0])).reshape(grids[0].shape)
        else:
            rho = np.ones(grids[0].shape)
        coefs.append(coefficients(rho[None], box.axes))
    return ReducedTable(Path("<layout>"), {"likelihood": name}, get_likelihood(name), boxes, coefs)


def _gap_cavities(name, n, seed):
    """Random cavities of the former gaps, a third each with |mu| uniform on [0, 1e4], |mu|
    log-uniform on [1e-3, 1e4] and near the likelihood's features; logit: s log-uniform on
    [10^0.5, 20], labels +-1; poisson_log: s log-uniform on [1, 1e4] (the kernel refuses
    wider) and counts 0..1000, plus a mode a uniform on [16, 37] at any s in [1e-8, 1e4]."""
    rng = np.random.default_rng(seed)
    k = n // 3
    sign = rng.choice([-1.0, 1.0], 3 * k)
    mag = np.concatenate([rng.uniform(0, 1e4, k), 10.0 ** rng.uniform(-3, 4, k), np.zeros(k)])
    if name == "logit":
        sigma = 10.0 ** rng.uniform(0.5, np.log10(20.0), 3 * k)
        y = rng.choice([-1.0, 1.0], 3 * k)
        s = sigma[2 * k :]
        near = -(s**2) * rng.random(k) + s * rng.normal(0.0, 4.0, k)  # fold line .. flat
        return np.concatenate([sign[: 2 * k] * mag[: 2 * k], near]), sigma, y
    sigma = 10.0 ** rng.uniform(0.0, 4.0, 3 * k)
    y = np.floor(rng.uniform(0, 1001, 3 * k))
    y[::3] = 0.0
    s, yy = sigma[2 * k :], y[2 * k :]
    near = s * rng.normal(0.0, 5.0, k) - yy * s * s  # the wall within a few cavity widths
    mu = np.concatenate([sign[: 2 * k] * mag[: 2 * k], near])
    s_high = 10.0 ** rng.uniform(-8, 4, k)  # modes a > 16, every s
    a = rng.uniform(16.0, 37.0, k)
    mu_high = a + s_high**2 * np.exp(a)
    return (
        np.concatenate([mu, mu_high]),
        np.concatenate([sigma, s_high]),
        np.concatenate([y, np.zeros(k)]),
    )


# -- the layout (no store) -----------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(NEW_BOXES))
def test_new_box_coordinates_round_trip(name):
    rng = np.random.default_rng(3)
    for box in boxes_for(name):
        if box.name not in NEW_BOXES[name]:
            continue
        coords = [rng.uniform(ax.start, ax.stop, 500) for ax in box.axes]
        mu, s = box.cavity(box.labels[0], *coords)
        inside, label, back = box.locate(mu, s, np.full(mu.shape, box.labels[0]))
        assert inside.mean() > 0.99 and np.all(label == 0), box.name
        for ax, x, x_back in zip(box.axes, coords, back, strict=True):
            np.testing.assert_allclose(x_back, x, rtol=1e-12, atol=1e-11 * ax.width)


@pytest.mark.parametrize("name", sorted(NEW_BOXES))
def test_every_cavity_of_the_former_gaps_is_in_a_box(name):
    """The reader's lookup path (closed forms, then the boxes in order) on a table of the new
    layout: no cavity of the former gaps falls back to the kernel."""
    table = _layout_table(name)
    mu, sigma, y = _gap_cavities(name, 6000, seed=27)
    assert table.contains(mu, sigma, y).all()


# the hardest cells found by benchmarks/probe_issue15_boxes.py, plus one random cell per box
HARD_CELLS = {
    "mid": [(12, 12), (13, 11), (5, 0)],
    "high": [(0, 4), (0, 5)],
    "wall": [(0, 1), (1, 2)],
    "wall_wide": [(0, 1), (0, 3)],
    "near": [(12, 0), (11, 1), (12, 4)],
    "kappa": [(0, 2), (1, 3), (8, 6)],
    "kappa_far": [(0, 0), (0, 6)],
}


@pytest.mark.parametrize("name", sorted(NEW_BOXES))
def test_the_hardest_cells_of_the_new_boxes_hold_1e12(name):
    """Per cell, the kernel at its 12 x 12 nodes, the Chebyshev interpolant, and the kernel at
    40 random cavities of the cell looked up through ``Box.locate``."""
    rng = np.random.default_rng(9)
    for box in boxes_for(name):
        if box.name not in NEW_BOXES[name]:
            continue
        a0, a1 = box.axes
        cells = HARD_CELLS[box.name] + [(rng.integers(a0.n_cells), rng.integers(a1.n_cells))]
        for i, j in cells:
            sub = (
                CellAxis(a0.name, a0.start + i * a0.width, a0.width, 1, a0.n),
                CellAxis(a1.name, a1.start + j * a1.width, a1.width, 1, a1.n),
            )
            grids = np.meshgrid(*(ax.nodes() for ax in sub), indexing="ij")
            label = box.labels[0]
            mu, s = box.cavity(label, *(g.ravel() for g in grids))
            coef = coefficients(_rho(name, mu, s, label).reshape(grids[0].shape), sub)
            pts = [rng.uniform(ax.start, ax.stop, 40) for ax in sub]
            mu, s = box.cavity(label, *pts)
            inside, _, coords = box.locate(mu, s, np.full(mu.shape, label))
            got = evaluate(
                coef,
                sub,
                tuple(np.clip(c, ax.start, ax.stop) for c, ax in zip(coords, sub, strict=True)),
            )
            err = np.abs(got / _rho(name, mu, s, label) - 1.0)
            assert inside.all() and err.max() <= 1e-12, (box.name, i, j, err.max())


def test_mpmath_verifies_the_kernel_at_large_modes():
    """The build's mpmath check reaches the ``high`` and ``kappa_far`` boxes: the reference
    integrates the log-link tilt without its log density at the mode, ~ -(s alpha)^2 / 2 (-4.7e17
    at a = 20, s = 2, where it did not converge)."""
    from qptables.reference.sigma import reference_point

    for a, s, y in ((20.0, 2.0, 0), (25.0, 0.5, 0), (22.0, 100.0, 0), (16.0, 1e-4, 3)):
        mu = a + s * s * np.exp(a) - y * s * s
        ref = reference_point("poisson_log", mu, s, y, dps=30)
        lz = get_likelihood("poisson_log").log_z(mu, s, y)
        assert abs(qpinfer.sigma_qp("poisson_log", mu, s, y) / float(ref.sigma_qp) - 1.0) <= 2e-15
        assert abs(lz / float(ref.log_z) - 1.0) <= 1e-13  # (the kernel claims 1e-11)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NEW_BOXES))
def test_the_layout_matches_the_kernel_on_60000_random_cavities(name):
    """Every node of every box from the kernel (~2 min each), then the reader against the kernel
    on the former gaps and on the whole domain (|mu| uniform and log-uniform up to 1e4, sigma
    log-uniform on [1e-4, 1e6], poisson_log [1e-4, 1e4]): <= 1e-12, no fallback."""
    table = _layout_table(name, values="kernel")
    rng = np.random.default_rng(28)
    n = 30_000
    mu = rng.choice([-1.0, 1.0], n) * np.where(
        rng.random(n) < 0.5, rng.uniform(0, 1e4, n), 10.0 ** rng.uniform(-3, 4, n)
    )
    if name == "logit":
        sigma, y = 10.0 ** rng.uniform(-4, 6, n), rng.choice([-1.0, 1.0], n)
    else:
        sigma, y = 10.0 ** rng.uniform(-4, 4, n), np.floor(rng.uniform(0, 1001, n))
    gap = _gap_cavities(name, 30_000, seed=29)
    for m, s, yy in ((mu, sigma, y), gap):
        got = table.sigma_qp(m, s, yy)
        err = np.abs(got / qpinfer.sigma_qp(name, m, s, yy) - 1.0)
        assert err.max() <= 1e-12
    assert table.fallback_count == 0


# -- the shipped stores (the new boxes once rebuilt by `qptables ship`) ------------------------
def _shipped(name):
    return open_reduced(shipped_path(name))


def _check(name, mu, sigma, y):
    table = _shipped(name)
    got = table.sigma_qp(mu, sigma, y)
    exact = qpinfer.sigma_qp(name, mu, sigma, y)
    return np.max(np.abs(got / exact - 1.0)), table.fallback_count


def test_stores_record_their_mpmath_verification():
    for name in ("logit", "poisson_log"):
        ver = _shipped(name).attrs["verification"]
        assert ver["passed"] and ver["mpmath_points"] >= 24
        assert ver["mpmath_max_rel_err"] <= 1e-12 and ver["kernel_max_rel_err"] <= 1e-12
        assert set(ver["mpmath_boxes"]) == {b.name for b in boxes_for(name)}


def test_logit_lookups_match_the_kernel_everywhere():
    """Every s in [1e-5, 1e6] (below 1e-3 and far out the closed forms), mu and label."""
    rng = np.random.default_rng(11)
    n = 40_000
    sigma = 10.0 ** rng.uniform(-5, 6, n)
    mu = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-3, 13, n)
    mu = np.where(rng.random(n) < 0.5, mu, rng.normal(0, 3, n) * sigma - sigma**2 * rng.random(n))
    y = rng.choice([-1.0, 1.0], n)
    err, fallbacks = _check("logit", mu, sigma, y)
    assert err <= 1e-12 and fallbacks == 0
    mu, sigma, y = _gap_cavities("logit", 6000, seed=12)
    err, fallbacks = _check("logit", mu, sigma, y)
    assert err <= 1e-12 and fallbacks == 0
    with pytest.raises(ValueError, match="^sigma must be <= 1e"):
        _shipped("logit").sigma_qp(0.0, 2e6, 1.0)


def test_poisson_log_table_serves_counts_0_to_1e5_like_the_kernel():
    """No count axis: every count maps to y = 0 at m' = mu + y s^2. Every s the kernel accepts
    (<= 1e4) and every mode."""
    rng = np.random.default_rng(12)
    n = 40_000
    y = np.floor(10.0 ** rng.uniform(0, 5, n))
    y[: n // 10] = 0.0
    y[n // 10 : n // 5] = 100_000.0
    sigma = 10.0 ** rng.uniform(-9, 4, n)
    mu = np.where(
        rng.random(n) < 0.5,
        rng.uniform(-30, 15, n) - np.log1p(y) * rng.random(n),
        sigma * rng.normal(0, 5, n) - y * sigma**2,
    )
    err, fallbacks = _check("poisson_log", mu, sigma, y)
    assert err <= 1e-12 and fallbacks == 0
    mu, sigma, y = _gap_cavities("poisson_log", 6000, seed=13)
    assert np.max(mode_frame(mu, sigma, y)[1]) > 30.0
    err, fallbacks = _check("poisson_log", mu, sigma, y)
    assert err <= 1e-12 and fallbacks == 0


def test_poisson_log_refuses_what_the_kernel_refuses():
    table = _shipped("poisson_log")
    for bad, arg in (((0.0, 1.0, 1.5), "y"), ((0.0, 1.0, -1.0), "y"), ((0.0, 2e4, 1.0), "sigma")):
        with pytest.raises(ValueError, match=rf"^{arg}\b"):
            table.sigma_qp(*bad)


def test_estimators_use_the_shipped_tables_and_match_exact_qp(monkeypatch, tmp_path):
    monkeypatch.setenv("QPINFER_TABLES", str(tmp_path / "no-tables"))
    X, y = blobs(n=40, seed=2)
    kw = {"likelihood": "logit", "variance": 2.0, "length_scale": 0.8, "optimizer": None}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "no table" warning
        tab = qpinfer.GPClassifier("qp", **kw).fit(X, y)
    exact = qpinfer.GPClassifier("qp", table="exact", **kw).fit(X, y)
    assert type(tab.table_).__name__ == "ReducedTable"
    assert abs(tab.log_marginal_likelihood_ - exact.log_marginal_likelihood_) <= 1e-9
    Xc, yc = coal()
    kw = {"link": "log", "variance": 0.6, "length_scale": 1.9, "optimizer": None}
    # the shipped table is opened once per process, its fallback count shared by every fit in
    # it: this fit's own fallbacks are the difference
    before = open_shipped("poisson_log").fallback_count
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tab = qpinfer.GPPoissonRegressor("qp", **kw).fit(Xc, yc)
    exact = qpinfer.GPPoissonRegressor("qp", table="exact", **kw).fit(Xc, yc)
    assert tab.table_ is open_shipped("poisson_log")
    assert tab.table_.fallback_count - before == 0
    assert abs(tab.log_marginal_likelihood_ - exact.log_marginal_likelihood_) <= 1e-9

"""Grid specifications, the layouts a build takes, the resume record, tiling and the verification
sample (no cluster, fast)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qpinfer.tables.schema import grid_axis
from qptables.grid import (
    AxisSpec,
    GridError,
    GridSpec,
    default_tile_mu,
    paper_grid,
    validate_y,
)
from qptables.pipeline.plan import resolve_grid
from qptables.pipeline.resume import build_record, resume_refusal
from qptables.pipeline.tiles import evaluate_rows
from qptables.pipeline.tiles import mirror_rows as _mirror_rows
from qptables.reference.verify import sample_indices


def test_axis_values_follow_the_store_contract_and_include_both_ends():
    ax = AxisSpec(-2.0, 2.0, 0.1, "mu")
    assert ax.n == 41
    np.testing.assert_array_equal(ax.values(), grid_axis(-2.0, 2.0, 0.1))
    assert ax.values()[0] == -2.0
    assert math.isclose(ax.values()[-1], 2.0, abs_tol=1e-12)


def test_paper_grid_is_appendix_j():
    g = paper_grid("probit")
    assert g.shape == (2, 20001, 2001)
    assert g.y == (-1, 1)
    assert g.to_attrs() == {
        "mu": [-10.0, 10.0, 0.001],
        "log10_sigma": [-1.0, 1.0, 0.001],
        "y": [-1, 1],
    }
    assert g.tile_mu == 75 and g.tiles_per_y == 267
    assert g.chunk_shape == (1, 75, 2001)
    assert g.store_nbytes() == 2 * 2 * 267 * 75 * 2001 * 8
    assert paper_grid("poisson_square", y_max=3).y == (0, 1, 2, 3)


def test_a_layout_is_the_paper_preset_a_gridspec_or_the_cells():
    assert resolve_grid("probit", "paper", None) == resolve_grid("probit", None, None)
    assert resolve_grid("probit", "paper", None) == paper_grid("probit")
    assert resolve_grid("probit", "cells", None) == "cells"
    with pytest.raises(GridError, match="--grid: unknown layout 'v2'; expected 'paper' or 'cells'"):
        resolve_grid("probit", "v2", None)
    with pytest.raises(GridError, match="--y-max: only for the grid layout"):
        resolve_grid("poisson_square", "cells", 3)


def test_one_resume_record_serves_both_layouts():
    grid = GridSpec((-1, 1, 0.5), (-1, 1, 0.5), (-1, 1))
    record = build_record("grid", "probit", grid=grid, fingerprint="f", mirror=True)
    assert record["grid"] == grid.to_attrs() and record["probit_mirror"] is True
    assert resume_refusal("grid", {"build": record}, record) is None
    other = {**record, "kernel_fingerprint": "g"}
    assert "kernel_fingerprint" in resume_refusal("grid", {"build": other}, record)
    assert resume_refusal("grid", {}, record) == "it has no build record"
    with pytest.raises(ValueError, match="layout: expected 'grid' or 'cells'"):
        build_record("v2", "probit")


@pytest.mark.parametrize(
    ("triple", "message"),
    [
        ((-1.0, 1.0, 0.0), "step must be > 0"),
        ((-1.0, 1.0, -0.1), "step must be > 0"),
        ((1.0, 1.0, 0.1), "start must be < stop"),
        ((2.0, 1.0, 0.1), "start must be < stop"),
        ((float("nan"), 1.0, 0.1), "must be finite"),
        ((0.0, float("inf"), 0.1), "must be finite"),
        ((-1.0, 1.0, 0.3), "whole number of steps"),
        ((-1e9, 1e9, 1e-9), "too many"),
    ],
)
def test_invalid_axis_is_refused_naming_the_flag(triple, message):
    with pytest.raises(GridError, match=message) as info:
        GridSpec(triple, (-1, 1, 0.5), (1,))
    assert "--mu" in str(info.value)
    with pytest.raises(GridError, match="--log10-sigma"):
        GridSpec((-1, 1, 0.5), triple, (1,))


def test_labels_are_validated_per_likelihood():
    assert validate_y("probit", [1, -1]) == (-1, 1)
    assert validate_y("poisson_square", [3, 0]) == (0, 3)
    for lik, bad in [("probit", [0]), ("probit", [2, 1]), ("poisson_square", [-1])]:
        with pytest.raises(GridError, match="--y"):
            validate_y(lik, bad)
    with pytest.raises(GridError, match="duplicate"):
        validate_y("probit", [1, 1])
    with pytest.raises(GridError, match="integers"):
        validate_y("poisson_square", [0.5])


def test_attrs_round_trip():
    g = GridSpec((-2, 2, 0.25), (-1, 1, 0.1), (1, -1), tile_mu=3)
    h = GridSpec.from_attrs(g.to_attrs(), g.tile_mu)
    assert h == g and h.y == (-1, 1)


@settings(max_examples=60, deadline=None)
@given(n_mu=st.integers(1, 30000), n_ls=st.integers(1, 3000))
def test_default_tiling_is_bounded(n_mu, n_ls):
    t = default_tile_mu(n_mu, n_ls)
    assert 1 <= t <= max(1, n_mu)
    assert t * n_ls <= 150_000 + n_ls  # ~150k points per tile at most
    assert t <= -(-n_mu // 16)  # small grids still get ~16 tiles per label


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 400), tile=st.integers(1, 50))
def test_tiles_cover_every_row_exactly_once(n, tile):
    g = GridSpec((0.0, float(n - 1), 1.0), (0.0, 1.0, 0.5), (0,), tile_mu=tile)
    covered = np.zeros(g.mu.n, int)
    for iy, k in g.tiles():
        a, b = g.tile_rows(k)
        assert iy == 0 and 0 <= a < b <= g.mu.n
        covered[a:b] += 1
    assert (covered == 1).all()


@pytest.mark.parametrize(
    ("mu_axis", "all_exact"),
    # grid_axis makes a grid whose start is a whole number of steps exactly symmetric
    [((-2, 2, 0.25), True), ((-2, 2, 0.1), True), ((-10, 10, 0.001), True)],
)
def test_mirror_rows_are_exact_negations(mu_axis, all_exact):
    g = GridSpec(mu_axis, (-1, 1, 0.5), (-1, 1), tile_mu=3 if mu_axis[2] > 0.01 else 2000)
    mu = g.mu_values()
    n = len(mu)
    seen_exact = []
    for k in range(g.tiles_per_y):
        a, b = g.tile_rows(k)
        (lo, hi), exact = _mirror_rows(g, k)
        src = mu[lo:hi][::-1]
        assert len(src) == b - a
        np.testing.assert_array_equal(exact, src == -mu[a:b])
        np.testing.assert_array_equal(src, mu[n - 1 - np.arange(a, b)])
        seen_exact.extend(exact)
    assert all(seen_exact) == all_exact
    assert any(seen_exact)


def test_kernel_mirror_symmetry_is_bit_exact_per_row():
    """The property the probit mirror relies on: a row at (mu, y=-1) is bit-identical to the
    row at (-mu, y=+1) when the kernel is called one row at a time."""
    sigma = 10 ** np.linspace(-1, 1, 9)
    mu = np.array([-3.7, -0.2, 0.0, 1.3, 9.9])
    neg = evaluate_rows("probit", mu, sigma, -1)
    pos = evaluate_rows("probit", -mu, sigma, 1)
    for var in ("sigma_qp", "sigma_ratio"):
        assert np.array_equal(neg[var], pos[var])


def test_verification_sample_has_corners_and_edge_midpoints_of_every_slice():
    g = GridSpec((-2, 2, 0.1), (-1, 1, 0.1), (-1, 1))
    pts = sample_indices(g, samples=5, seed=1)
    for iy in (0, 1):
        for i, j in [(0, 0), (0, 20), (40, 0), (40, 20), (0, 10), (40, 10), (20, 0), (20, 20)]:
            assert (iy, i, j) in pts
    assert len(pts) <= 16 + 5
    assert sample_indices(g, 5, seed=1) == pts
    with pytest.raises(ValueError, match="--samples"):
        sample_indices(g, -1)

"""Verification at scale: stratified sample, fan-out over dask workers, the build's estimate."""

from __future__ import annotations

import numpy as np
import pytest

from qptables import GridSpec
from qptables.pipeline.estimate import estimate_build
from qptables.reference.fanout import fan_out
from qptables.reference.verify import sample_indices


def _square(x: int) -> int:
    return x * x


def test_random_points_are_a_latin_hypercube_in_every_label_slice():
    g = GridSpec((-5, 5, 0.01), (-1, 1, 0.01), (-1, 1))
    n_y, n_mu, n_ls = g.shape
    m = 50
    pts = sample_indices(g, samples=2 * m, seed=3)
    corners = set(sample_indices(g, samples=0))
    for iy in range(n_y):
        rand = [(i, j) for y, i, j in pts if y == iy and (y, i, j) not in corners]
        assert len(rand) == m
        # exactly one point in each of the m bands of mu and of log10_sigma
        assert sorted(i * m // n_mu for i, _ in rand) == list(range(m))
        assert sorted(j * m // n_ls for _, j in rand) == list(range(m))


def test_fan_out_keeps_input_order_and_says_where_points_ran(dask_client):
    out, where = fan_out(_square, [list(range(40))], client=dask_client, progress=False)
    assert out == [x * x for x in range(40)]
    assert sum(where.values()) == 40 and all(":" in k for k in where)
    inline, where1 = fan_out(_square, [[1, 2, 3]], workers=1)
    assert inline == [1, 4, 9] and len(where1) == 1
    with pytest.raises(ValueError, match="--workers"):
        fan_out(_square, [[1]], workers=0)


def test_estimate_counts_every_phase_and_scales_with_workers():
    g = GridSpec((-10, 10, 0.001), (-1, 1, 0.001), (-1, 1))
    one = estimate_build(g, points=40_000_000, tiles=534, n_verify=40, n_workers=1, rate=40_000)
    two = estimate_build(g, points=40_000_000, tiles=534, n_verify=40, n_workers=2, rate=40_000)
    assert one.tiles == pytest.approx(2 * two.tiles)
    assert all(x > 0 for x in (two.scan, two.verify, two.publish))
    assert two.total == pytest.approx(two.tiles + two.scan + two.verify + two.publish)
    assert "mpmath checks" in two.describe() and two.to_dict()["workers"] == 2
    with pytest.raises(ValueError, match="rate"):
        estimate_build(g, points=1, tiles=1, n_verify=0, n_workers=1, rate=np.nan)

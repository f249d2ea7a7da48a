"""Piecewise Chebyshev cells (qpinfer.tables.chebyshev): exact for polynomials, spectral
otherwise."""

import numpy as np
import pytest

from qpinfer.tables.chebyshev import (
    CellAxis,
    coefficients,
    evaluate,
    power_coefficients,
    power_rounding_bound,
    tail_size,
)


def test_tail_size_sees_unresolved_cells():
    ax = CellAxis("x", 0.0, 1.0, 2, 6)
    coef = coefficients(np.where(ax.nodes() < 1, 1.0, np.exp(8 * ax.nodes())), (ax,))
    tails = tail_size(coef, (ax,))
    assert tails[0] < 1e-14 and tails[1] > 1e-3  # constant cell resolved, exp(8x) is not


@pytest.mark.parametrize("n_points", [1000, 20000])  # gathered, and grouped by cell
def test_reproduces_polynomials_of_the_cell_degree_exactly(n_points):
    a = CellAxis("a", -1.0, 0.5, 4, 6)
    b = CellAxis("b", 0.0, 0.25, 8, 5)

    def f(x, y):
        return 1 + x**5 - 3 * x**2 * y**4 + y  # degree 5 in x, 4 in y

    g0, g1 = np.meshgrid(a.nodes(), b.nodes(), indexing="ij")
    coef = coefficients(f(g0, g1), (a, b))
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, n_points), rng.uniform(0, 2, n_points)
    np.testing.assert_allclose(evaluate(coef, (a, b), (x, y)), f(x, y), rtol=0, atol=1e-13)
    power = power_coefficients(coef, (a, b))  # the same polynomials in the power basis
    got = evaluate(power, (a, b), (x, y), power=True)
    np.testing.assert_allclose(got, f(x, y), rtol=0, atol=1e-13)


def test_one_axis_converges_spectrally():
    for n, tol in ((8, 3e-5), (14, 3e-10), (22, 5e-14)):
        ax = CellAxis("x", 0.0, 0.5, 6, n)
        coef = coefficients(np.exp(np.sin(3 * ax.nodes())), (ax,))
        x = np.linspace(0, 3, 2001)
        assert np.abs(evaluate(coef, (ax,), (x,)) - np.exp(np.sin(3 * x))).max() < tol


def test_nodes_never_touch_cell_ends():
    ax = CellAxis("u", 0.0, 0.25, 4, 12)
    x = ax.nodes().reshape(4, 12)
    left = 0.25 * np.arange(4)[:, None]
    assert np.all((x > left) & (x < left + 0.25)) and np.all(np.diff(ax.nodes()) > 0)


@pytest.mark.parametrize("bad", [{"width": 0.0}, {"width": np.nan}, {"n_cells": 0}, {"n": 1}])
def test_invalid_axes_are_refused(bad):
    kwargs = {"name": "x", "start": 0.0, "width": 1.0, "n_cells": 2, "n": 4} | bad
    with pytest.raises(ValueError, match="axis 'x'"):
        CellAxis(**kwargs)


@pytest.mark.parametrize("power", [False, True])
@pytest.mark.parametrize("n_points", [7, 300, 5000])  # small (inlined), and above _BATCH
def test_sweep_evaluator_is_evaluate_and_refuses_points_outside(n_points, power):
    """SweepEvaluator: the same values as evaluate with the same basis (2-D: bit for bit on
    small batches; 1-D and large batches go through evaluate's own paths), times the factor;
    None if any point is outside the axes or not finite."""
    from qpinfer.tables.sweep_evaluator import SweepEvaluator

    a = CellAxis("a", -1.0, 0.5, 4, 6)
    b = CellAxis("b", 0.0, 0.25, 8, 6)
    g0, g1 = np.meshgrid(a.nodes(), b.nodes(), indexing="ij")
    rng = np.random.default_rng(n_points)
    for axes, values in (((a, b), np.exp(np.sin(g0) * g1)), ((a,), np.cos(3 * a.nodes()))):
        coef = coefficients(values, axes)
        if power:
            coef = power_coefficients(coef, axes)
        pts = [rng.uniform(ax.start, ax.stop, n_points) for ax in axes]
        factor = rng.uniform(0.5, 2.0, n_points)
        want = evaluate(coef, axes, tuple(pts), power=power) * factor
        got = SweepEvaluator(coef, axes, power)(np.array(pts), factor)
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
        if len(axes) == 2 and n_points <= 4096:
            assert np.array_equal(got, want)
        for bad in (np.nan, np.inf, axes[0].start - 1e-9, axes[0].stop):
            u = np.array(pts)
            u[0, n_points // 2] = bad
            with np.errstate(invalid="ignore"):
                assert SweepEvaluator(coef, axes, power)(u, factor) is None


def test_chebyshev_to_power_matrix_is_numpys_conversion():
    from numpy.polynomial import Chebyshev, Polynomial

    from qpinfer.tables.chebyshev import _chebyshev_to_power

    for n in (2, 5, 12, 16):
        p = _chebyshev_to_power(n)
        for i in range(n):  # T_i(2t - 1) in powers of t; integers, exact in float64
            want = Chebyshev.basis(i, domain=[0, 1]).convert(kind=Polynomial).coef
            assert np.array_equal(p[i, : i + 1], want) and not p[i, i + 1 :].any()


@pytest.mark.parametrize("n_points", [300, 20000])  # gathered, and grouped by cell
def test_power_basis_is_the_chebyshev_interpolant_within_its_bound(n_points):
    """The same polynomials in the power basis: every value within power_rounding_bound (and
    that bound small), plus the evaluations' own rounding, of the Chebyshev evaluation, on 1-D
    and 2-D cells."""
    a = CellAxis("a", -1.0, 0.5, 4, 12)
    b = CellAxis("b", 0.0, 0.25, 8, 12)
    g0, g1 = np.meshgrid(a.nodes(), b.nodes(), indexing="ij")
    rng = np.random.default_rng(n_points)
    for axes, values in (((a, b), 2 + np.sin(g0) * np.cos(3 * g1)), ((a,), 2 + np.cos(a.nodes()))):
        coef = coefficients(values, axes)
        bound = power_rounding_bound(coef, axes)
        assert bound < 1e-14
        pts = tuple(rng.uniform(ax.start, ax.stop, n_points) for ax in axes)
        want = evaluate(coef, axes, pts)
        got = evaluate(power_coefficients(coef, axes), axes, pts, power=True)
        # the conversion's rounding, plus each evaluation's own (a few eps)
        assert np.max(np.abs(got / want - 1.0)) <= bound + 8 * np.finfo(float).eps

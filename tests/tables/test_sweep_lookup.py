"""The v2 reader's sweep path (ReducedTable.sigma_qp_core, sweep_cells.SweepEvaluator): what EP/QP
sweeps call once per sweep. It must give what the general lookup gives, hand every batch it cannot
answer whole to the general lookup (which checks the inputs), and stay within 1e-12 of the
exact kernel."""

import warnings

import numpy as np
import pytest

import qpinfer
from qpinfer.inference.projections import QuantileMatching
from qpinfer.tables.shipped import open_shipped


def _sweep_batch(n=208, seed=0):
    """Cavities like a probit fit's (Sonar: sigma 0.3 .. 3), all in the core box (canonical
    tau = y mu / sqrt(1 + sigma^2) in [-8, 12.5]), labels +-1."""
    rng = np.random.default_rng(seed)
    sigma = 10.0 ** rng.uniform(-0.6, 0.5, n)
    y = rng.choice([-1.0, 1.0], n)
    mu = y * rng.uniform(-7.9, 12.4, n) * np.hypot(1.0, sigma)
    return mu, sigma, y


def test_sweep_path_is_the_general_lookup_bit_for_bit():
    table = open_shipped("probit")
    for seed in range(5):
        mu, sigma, y = _sweep_batch(seed=seed)
        fast = table.sigma_qp_core(mu, sigma, y)
        assert fast is not None  # every cavity in the core box: the sweep path answered
        general, _, _, rest = table._lookup(mu, sigma, y)
        assert rest.size == 0
        assert np.array_equal(fast, general)


def test_sweep_path_matches_the_exact_kernel():
    table = open_shipped("probit")
    mu, sigma, y = _sweep_batch(n=2000, seed=7)
    got = table.sigma_qp(mu, sigma, y)
    want = qpinfer.sigma_qp("probit", mu, sigma, y)
    assert np.max(np.abs(got / want - 1.0)) <= 1e-12


def test_a_batch_with_one_cavity_outside_the_core_goes_to_the_general_lookup():
    table = open_shipped("probit")
    mu, sigma, y = _sweep_batch(n=50, seed=3)
    mu[7], sigma[7] = -500.0, 2.0  # tau ~ -224: the tail box
    mu[9], sigma[9] = 1.0, 1e-6  # log10 sigma = -6: below the core
    assert table.sigma_qp_core(mu, sigma, y) is None
    got = table.sigma_qp(mu, sigma, y)
    want = qpinfer.sigma_qp("probit", mu, sigma, y)
    assert np.max(np.abs(got / want - 1.0)) <= 1e-12


@pytest.mark.parametrize(
    ("index", "mu", "sigma", "match"),
    [
        (3, np.nan, 1.0, "mu must be finite"),
        (3, np.inf, 1.0, "mu must be finite"),
        (5, 0.5, 0.0, "sigma must be > 0"),
        (5, 0.5, -1.0, "sigma must be > 0"),
        (5, 0.5, np.inf, "sigma"),
        (5, 0.5, np.nan, "sigma"),
    ],
)
def test_bad_cavities_in_a_sweep_batch_are_refused_without_warnings(index, mu, sigma, match):
    table = open_shipped("probit")
    m, s, y = _sweep_batch(n=40, seed=1)
    m[index], s[index] = mu, sigma
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the sweep path silences its own NaN/inf arithmetic
        with pytest.raises(ValueError, match=match):
            table.sigma_qp(m, s, y)


def test_bad_labels_are_refused():
    table = open_shipped("probit")
    mu, sigma, y = _sweep_batch(n=10)
    y[4] = 0.5
    with pytest.raises(ValueError, match="y must be -1 or \\+1"):
        table.sigma_qp(mu, sigma, y)


def test_huge_means_take_no_warning_and_the_kernel_answer():
    table = open_shipped("probit")
    mu = np.array([1e308, -1e308, 3.0])
    sigma = np.array([0.5, 0.5, 1.0])
    y = np.array([1.0, 1.0, -1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert table.sigma_qp_core(mu, sigma, y) is None
    got = table.sigma_qp(mu, sigma, y)
    want = qpinfer.sigma_qp("probit", mu, sigma, y)
    assert np.max(np.abs(got / want - 1.0)) <= 1e-12


def test_quantile_matching_takes_sigma_star_from_the_table_with_ep_moments():
    """QP's projection with a v2 table: EP's mean, the table's sigma* (not ratio * sigma_EP)."""
    lik = qpinfer.get_likelihood("probit")
    table = open_shipped("probit")
    mu, sigma, y = _sweep_batch(seed=11)
    mean, std = QuantileMatching(lik, table).project(mu, sigma, y)
    ep_mean, _ = lik.tilted_moments(mu, sigma, y)
    assert np.array_equal(mean, ep_mean)
    assert np.array_equal(std, table.sigma_qp(mu, sigma, y))
    exact = qpinfer.sigma_qp("probit", mu, sigma, y)
    assert np.max(np.abs(std / exact - 1.0)) <= 1e-12


def test_quantile_matching_outside_the_core_equals_the_general_path():
    """One cavity outside the core box: the projection falls back to EP's moments and
    ``table.sigma_qp`` for the whole batch, with the same values as each path alone."""
    lik = qpinfer.get_likelihood("probit")
    table = open_shipped("probit")
    mu, sigma, y = _sweep_batch(seed=12)
    mu[5], sigma[5] = -30.0 * y[5], 1.5  # canonical tau ~ -16.6: the tail box
    assert table.sigma_qp_core(mu, sigma, y) is None
    mean, std = QuantileMatching(lik, table).project(mu, sigma, y)
    ep_mean, ep_std = lik.tilted_moments(mu, sigma, y)
    assert np.array_equal(mean, ep_mean)
    assert np.array_equal(std, table.sigma_qp(mu, sigma, y, moments=(ep_mean, ep_std)))


@pytest.mark.parametrize("scale", [1e-3, 1.0, 30.0, 1e4])
def test_probit_tilted_mean_is_the_mean_of_tilted_moments_bit_for_bit(scale):
    """``tilted_mean`` (QP's projection when the table needs no EP std) runs the same operations
    as ``tilted_moments``: every regime, including the continued-fraction tail z < -1.5."""
    lik = qpinfer.get_likelihood("probit")
    rng = np.random.default_rng(13)
    sigma = scale * 10.0 ** rng.uniform(-1, 1, 500)
    y = rng.choice([-1.0, 1.0], 500)
    mu = rng.uniform(-12.0, 12.0, 500) * np.hypot(1.0, sigma)
    assert np.array_equal(lik.tilted_mean(mu, sigma, y), lik.tilted_moments(mu, sigma, y)[0])
    assert np.array_equal(lik.tilted_mean(0.3, 2.0, -1.0), lik.tilted_moments(0.3, 2.0, -1.0)[0])


def test_qp_moments_is_tilted_mean_and_sigma_qp_bit_for_bit():
    """ReducedTable.qp_moments (QP's projection with a v2 table: EP's mean and the table's
    sigma* in one pass) gives what tilted_mean and sigma_qp give apart: in the core box, with
    one cavity outside it, and for a single cavity."""
    lik = qpinfer.get_likelihood("probit")
    table = open_shipped("probit")
    for seed, outside in ((21, False), (22, True)):
        mu, sigma, y = _sweep_batch(seed=seed)
        if outside:
            mu[5], sigma[5] = -30.0 * y[5], 1.5  # canonical tau ~ -16.6: the tail box
        for sl in (slice(None), slice(3, 4)):
            mean, std = table.qp_moments(mu[sl], sigma[sl], y[sl])
            assert np.array_equal(mean, lik.tilted_mean(mu[sl], sigma[sl], y[sl]))
            assert np.array_equal(std, table.sigma_qp(mu[sl], sigma[sl], y[sl]))
    # and through the projection the site loop calls
    mean, std = QuantileMatching(lik, table).project(mu, sigma, y)
    assert np.array_equal(mean, lik.tilted_moments(mu, sigma, y)[0])
    exact = qpinfer.sigma_qp("probit", mu, sigma, y)
    assert np.max(np.abs(std / exact - 1.0)) <= 1e-12


def test_probit_z_is_the_core_coordinate_tau_bit_for_bit():
    """qp_moments takes the core box's first coordinate from the tilted mean's z."""
    lik = qpinfer.get_likelihood("probit")
    box = open_shipped("probit")._sweep_box
    mu, sigma, y = _sweep_batch(seed=23)
    _, z = lik.tilted_mean_and_z(mu, sigma, y)
    m, yy = lik.canonical(mu, y)
    assert np.array_equal(z, box.axis_array(m, sigma, yy)[0])
    assert np.array_equal(box.axis_array(None, sigma, None, z), box.axis_array(m, sigma, yy))


@pytest.mark.parametrize(
    ("mu", "sigma", "match"),
    [(np.nan, 1.0, "mu must be finite"), (0.5, 0.0, "sigma must be > 0"), (0.5, np.inf, "sigma")],
)
def test_qp_moments_refuses_bad_cavities_without_warnings(mu, sigma, match):
    table = open_shipped("probit")
    m, s, y = _sweep_batch(n=40, seed=24)
    m[6], s[6] = mu, sigma
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=match):
            table.qp_moments(m, s, y)


def test_qp_moments_refuses_bad_labels_without_warnings():
    table = open_shipped("probit")
    m, s, y = _sweep_batch(n=40, seed=24)
    y[2] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="y must be -1 or \\+1"):
            table.qp_moments(m, s, y)


def test_shipped_core_cells_in_the_power_basis_round_within_1e_14():
    """The reader holds the probit core's cells in the power basis (cheb_cells
    power_coefficients): the rounding bound of that conversion on the shipped cells."""
    from qpinfer.tables.chebyshev import cell_rows, power_rounding_bound
    from qpinfer.tables.reduced_store import read_array, store_files

    table = open_shipped("probit")
    box = table._sweep_box
    stored = read_array(table.path, store_files(table.path), f"rho_{box.name}", "test")
    assert power_rounding_bound(cell_rows(stored, box.axes), box.axes) <= 1e-14


def test_qp_moments_on_a_table_without_tilted_mean_passes_ep_moments_on():
    """Tables of likelihoods without ``tilted_mean`` (step_noise): EP's mean, and the lookup
    given EP's moments, which equals the lookup without them."""
    table = open_shipped("step_noise(eps=0.2)")
    lik = qpinfer.get_likelihood("step_noise(eps=0.2)")
    mu, sigma, y = _sweep_batch(n=30, seed=25)
    mean, std = table.qp_moments(mu, sigma, y)
    assert np.array_equal(mean, lik.tilted_moments(mu, sigma, y)[0])
    assert np.array_equal(std, table.sigma_qp(mu, sigma, y))

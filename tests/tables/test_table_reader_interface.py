"""One interface for every sigma* table (qpinfer.tables.reader.SigmaTableReader), and likelihood
objects -- not names -- passed down to the tables and to the baselines' log p(y | f) math."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from qpinfer.inference.projections import QuantileMatching
from qpinfer.likelihoods.probit import Probit
from qpinfer.likelihoods.step_noise import StepNoise
from qpinfer.likelihoods.student_t import StudentT
from qpinfer.sigma.exact import sigma_qp
from qpinfer.tables import open_table
from qpinfer.tables.reader import SigmaTableReader
from qpinfer.tables.scaled import ScaledTable, for_likelihood
from qpinfer.tables.shipped import open_shipped, shipped_table
from tests.tables.test_tables_reader import write_store

PROBIT = Probit()


@pytest.fixture(scope="module")
def v1_store(tmp_path_factory):
    return write_store(tmp_path_factory.mktemp("tables") / "probit.zarr")[0]


@pytest.fixture
def v1_table(v1_store):
    return open_table(v1_store)  # each test its own (fallback count, warned once)


def test_every_reader_is_a_sigma_table_reader_with_its_likelihood_object(v1_table):
    lik = StudentT(4.0, 2.5)
    for table, want in (
        (v1_table, PROBIT),
        (open_shipped("probit"), PROBIT),
        (shipped_table(lik), lik),
    ):
        assert isinstance(table, SigmaTableReader)
        assert table.likelihood_object.name == want.name == table.likelihood
        with table as same:
            assert same is table


def test_the_v1_projection_is_ep_moments_times_the_stored_ratio_bit_for_bit(v1_table):
    """QP with a v1 table: EP's mean and ``sigma_ratio * sigma_EP``, as before the interface."""
    mu = np.array([-0.55, 0.123, 0.77, 0.1])
    s = np.array([0.8, 1.0, 1.4, 1.0])
    y = np.array([1.0, -1.0, 1.0, 1.0])
    mean, std = QuantileMatching(PROBIT, v1_table).project(mu, s, y)
    m_ep, s_ep = PROBIT.tilted_moments(mu, s, y)
    assert np.array_equal(mean, m_ep)
    assert np.array_equal(std, v1_table.sigma_ratio(mu, s, y) * s_ep)


def test_v1_lookups_take_the_callers_ep_moments(v1_table):
    mu = np.array([-0.55, 0.123, 5.0])  # the last outside the grid: the exact kernel
    s = np.array([0.8, 1.0, 1.0])
    y = np.array([1.0, -1.0, 1.0])
    moments = PROBIT.tilted_moments(mu, s, y)
    with pytest.warns(RuntimeWarning, match="outside the table"):
        plain = v1_table.sigma_qp(mu, s, y)
    assert np.array_equal(v1_table.sigma_qp(mu, s, y, moments=moments), plain)
    assert plain[2] == sigma_qp(PROBIT, 5.0, 1.0, 1.0)
    ratio = v1_table.sigma_ratio(mu, s, y, moments=moments)
    assert np.array_equal(ratio, v1_table.sigma_ratio(mu, s, y))


def test_a_scaled_student_t_projection_passes_ep_moments_to_the_lookup_bit_for_bit():
    base = open_shipped("student_t(nu=4.0, scale=1.0)")
    lik = StudentT(4.0, 0.37).with_moment_table(base.moment_table)  # as an estimator's
    table = shipped_table(lik)
    rng = np.random.default_rng(5)
    mu, s, y = rng.normal(0, 2, 50), rng.uniform(0.05, 3.0, 50), rng.normal(0, 1, 50)
    mean, std = QuantileMatching(lik, table).project(mu, s, y)
    m_ep, s_ep = lik.tilted_moments(mu, s, y)
    assert np.array_equal(mean, m_ep)
    assert np.array_equal(std, table.sigma_qp(mu, s, y, moments=(m_ep, s_ep)))


def test_a_student_t_table_holds_the_likelihood_object_it_is_resolved_for():
    """No name parsed and no StudentT built on the way: the scaled table holds the very object
    (one taking its EP moments from the base table, as an estimator's does; a likelihood
    without it is held as a copy that does)."""
    base = open_shipped("student_t(nu=4.0, scale=1.0)")
    lik = StudentT(4.0, 2.5).with_moment_table(base.moment_table)
    table = shipped_table(lik)
    assert isinstance(table, ScaledTable) and table.likelihood_object is lik
    assert table.base is base
    plain = shipped_table(StudentT(4.0, 2.5)).likelihood_object
    assert plain == lik and plain._moment_table is base
    assert for_likelihood(table, lik) is table
    assert shipped_table(StudentT(4.0, 1.0)) is table.base
    assert shipped_table(PROBIT) is open_shipped("probit")
    assert shipped_table(StepNoise(0.1)) is None  # only eps = 0.2 ships
    copy = pickle.loads(pickle.dumps(table))
    assert copy.likelihood == table.likelihood and copy.likelihood_object == lik


def test_a_scaled_table_refuses_another_nu():
    base = open_shipped("student_t(nu=4.0, scale=1.0)")
    with pytest.raises(ValueError, match="^scale is StudentT\\(nu=3.0"):
        ScaledTable(base, StudentT(3.0, 2.0))


def test_the_baselines_dispatch_on_the_likelihood_class():
    class MyProbit(Probit):
        name = "my_probit"  # a subclass keeps its base class's math, whatever its name

    f, y = np.array([-1.0, 0.3, 2.0]), np.array([1.0, -1.0, 1.0])
    for a, b in zip(MyProbit().log_lik_derivatives(f, y), PROBIT.log_lik_derivatives(f, y)):
        assert np.array_equal(a, b)
    m, v = np.array([0.2, -1.0]), np.array([0.5, 2.0])
    for a, b in zip(MyProbit().expected_log_lik(m, v, y[:2]), PROBIT.expected_log_lik(m, v, y[:2])):
        assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="Laplace and VB need .* got StepNoise\\(eps=0.2\\)"):
        StepNoise(0.2).log_lik_derivatives(f, y)

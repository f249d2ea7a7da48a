"""A point's sigma* must not depend on the other points of the call (tables rely on it)."""

import numpy as np
import pytest

import qpinfer
from qpinfer.tables.schema import grid_axis


@pytest.mark.parametrize(
    ("likelihood", "labels"), [("probit", [-1, 1]), ("poisson_square", range(40))]
)
def test_sigma_qp_is_independent_of_batch_composition(likelihood, labels):
    rng = np.random.default_rng(11)
    n = 2000
    mu = rng.uniform(-12, 12, n)
    sigma = 10 ** rng.uniform(-1.5, 1.5, n)
    y = rng.choice(list(labels), n)
    whole = qpinfer.sigma_qp(likelihood, mu, sigma, y)
    singles = np.array(
        [qpinfer.sigma_qp(likelihood, m, s, v) for m, s, v in zip(mu[:200], sigma[:200], y[:200])]
    )
    odd_batches = np.concatenate(
        [
            qpinfer.sigma_qp(likelihood, mu[i : i + 7], sigma[i : i + 7], y[i : i + 7])
            for i in range(0, n, 7)
        ]
    )
    shuffled = rng.permutation(n)
    reordered = np.empty(n)
    reordered[shuffled] = qpinfer.sigma_qp(likelihood, mu[shuffled], sigma[shuffled], y[shuffled])
    np.testing.assert_array_equal(whole[:200], singles)
    np.testing.assert_array_equal(whole, odd_batches)
    np.testing.assert_array_equal(whole, reordered)
    np.testing.assert_array_equal(whole, qpinfer.sigma_qp(likelihood, mu, sigma, y, batch_size=333))


def test_paper_grid_is_exactly_symmetric_so_probit_mirror_is_bitwise():
    mu = grid_axis(-10.0, 10.0, 0.001)
    assert mu.size == 20001 and mu[0] == -10.0 and mu[-1] == 10.0 and mu[10000] == 0.0
    np.testing.assert_array_equal(mu[::-1], -mu)
    sigma = 10 ** grid_axis(-1.0, 1.0, 0.001)[::97]
    rows = np.arange(0, 20001, 1999)
    for i in rows:
        plus = qpinfer.sigma_qp("probit", mu[i], sigma, 1)
        minus = qpinfer.sigma_qp("probit", mu[20000 - i], sigma, -1)
        np.testing.assert_array_equal(plus, minus)

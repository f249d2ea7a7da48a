"""EP's moments from the tables: the shipped stores that hold them answer ``(log Z, mean, std)``
to 1e-12 against the exact quadrature and mpmath, with no fallback, and the estimators' site
updates take them from there by default (``table="exact"``: the quadrature)."""

import json

import numpy as np
import pytest

import qpinfer
from qpinfer.likelihoods.registry import get_likelihood
from qpinfer.tables.shipped import SHIPPED, open_shipped, shipped_path
from qptables.pipeline.v2_check import moment_errors, reference_values
from qptables.reference.fanout import fan_out
from tests._helpers import coal, load_ionosphere

#: the shipped tables that store EP's moments
WITH_MOMENTS = sorted(
    name
    for name in SHIPPED
    if "moments" in json.loads((shipped_path(name) / "zarr.json").read_text())["attributes"]
)
TOLERANCE = 1e-12


def _cavities(name, n, seed):
    """The random-cavity domain of ``benchmarks/bench_likelihood_tables.py``: |mu| up to 1e4
    (half uniform on [-10, 10]), sigma log-uniform on [1e-4, 1e6] (the log link: to 1e4, the most
    it accepts), labels +-1 or counts 0..1000."""
    rng = np.random.default_rng(seed)
    half = n // 2
    magnitude = 10.0 ** rng.uniform(-4, 4, n - half)
    mu = np.concatenate([rng.uniform(-10, 10, half), rng.choice([-1.0, 1.0], n - half) * magnitude])
    sigma = 10.0 ** rng.uniform(-4, 4 if name == "poisson_log" else 6, n)
    if name.startswith("poisson"):
        y = rng.integers(0, 1001, n).astype(np.float64)
    else:
        y = rng.choice([-1.0, 1.0], n)
    return rng.permutation(mu), sigma, y


def test_the_logit_and_log_link_tables_store_moments():
    assert {"logit", "poisson_log"} <= set(WITH_MOMENTS)
    assert open_shipped("logit").has_moments and not open_shipped("probit").has_moments


@pytest.mark.parametrize("name", WITH_MOMENTS)
def test_table_moments_match_the_exact_quadrature_on_20000_random_cavities(name):
    table = open_shipped(name)
    exact = get_likelihood(name)
    tabulated = exact.with_moment_table(table.moment_table)
    mu, sigma, y = _cavities(name, 20_000, seed=1)
    before = table.moment_fallback_count
    got = tabulated.ep_moments(mu, sigma, y)
    assert table.moment_fallback_count == before
    errors = moment_errors(got, exact.ep_moments(mu, sigma, y), sigma)
    assert max(errors.values()) <= TOLERANCE, errors
    # log_z and tilted_moments are the same lookups
    np.testing.assert_array_equal(tabulated.log_z(mu, sigma, y), got[0])
    np.testing.assert_array_equal(tabulated.tilted_moments(mu, sigma, y)[1], got[2])


@pytest.mark.parametrize("name", WITH_MOMENTS)
def test_table_moments_match_mpmath_at_20_cavities(name, dask_client):
    table = open_shipped(name)
    tabulated = get_likelihood(name).with_moment_table(table.moment_table)
    mu, sigma, y = _cavities(name, 400, seed=2)
    # 20 of them that no closed form answers (the table's cavities), spread over the boxes
    _, rest = table.stored_moments(*_canonical(name, mu, sigma, y))
    inside = np.setdiff1d(np.arange(mu.size), rest)
    pick = inside[np.linspace(0, inside.size - 1, 20).astype(int)]
    mu, sigma, y = mu[pick], sigma[pick], y[pick]
    refs, _ = fan_out(
        reference_values,
        [[name] * 20, list(mu), list(sigma), list(y), [None] * 20],
        client=dask_client,
    )
    refs = np.array(refs).T
    errors = moment_errors(tabulated.ep_moments(mu, sigma, y), refs[1:], sigma)
    assert max(errors.values()) <= TOLERANCE, errors


def _canonical(name, mu, sigma, y):
    lik = get_likelihood(name)
    m, yy = lik.canonical(mu, y)
    folded = np.maximum(m, -m - sigma * sigma) if name == "logit" else m
    return folded, sigma, yy


@pytest.mark.parametrize("name", WITH_MOMENTS)
def test_the_store_records_its_moment_verification(name):
    ver = json.loads((shipped_path(name) / "zarr.json").read_text())["attributes"]["verification"]
    assert ver["passed"] and ver["mpmath_points"] >= 20 and ver["kernel_points"] >= 20_000
    for key in ("moments_kernel_max_err", "moments_mpmath_max_err"):
        assert set(ver[key]) == {"log_z", "mean", "var"}
        assert max(ver[key].values()) <= ver["tolerance"] == TOLERANCE


def test_likelihoods_with_closed_form_moments_take_no_table():
    probit = qpinfer.get_likelihood("probit")
    assert probit.with_moment_table(open_shipped("logit")) is probit


def _ionosphere_logit():
    X, y = load_ionosphere()
    return qpinfer.GPClassifier, {"likelihood": "logit", "length_scale": 3.0}, X[:120, :6], y[:120]


def _coal_log_link():
    return qpinfer.GPPoissonRegressor, {"link": "log", "length_scale": 0.3}, *coal()


@pytest.mark.parametrize("problem", [_ionosphere_logit, _coal_log_link])
@pytest.mark.parametrize("method", ["ep", "qp"])
def test_a_fit_takes_its_moments_from_the_shipped_table(problem, method):
    """EP's and QP's site updates use the table's moments by default, and give the evidence and
    predictions of the quadrature path (``table="exact"``) to 1e-9 (the logit on Ionosphere,
    the log link on the coal-mining counts)."""
    cls, params, X, y = problem()
    fast = cls(method, optimizer=None, **params).fit(X, y)
    table = fast.likelihood_._moment_table
    assert table is open_shipped(fast.likelihood_.name)
    before = table.moment_fallback_count, table.fallback_count
    fast = cls(method, optimizer=None, **params).fit(X, y)
    assert (table.moment_fallback_count, table.fallback_count) == before
    exact = cls(method, table="exact", optimizer=None, **params).fit(X, y)
    assert exact.likelihood_._moment_table is None
    assert fast.log_marginal_likelihood_ == pytest.approx(exact.log_marginal_likelihood_, abs=1e-9)
    predict = "predict_proba" if hasattr(fast, "predict_proba") else "predict"
    np.testing.assert_allclose(
        getattr(fast, predict)(X), getattr(exact, predict)(X), rtol=1e-9, atol=1e-12
    )


def test_a_table_of_another_likelihood_or_without_moments_is_refused():
    logit = qpinfer.get_likelihood("logit")
    with pytest.raises(ValueError, match="table must be an open table of 'logit'"):
        logit.with_moment_table(open_shipped("poisson_log"))
    with pytest.raises(ValueError, match="stores EP's moments"):
        logit.with_moment_table(open_shipped("probit"))
    assert logit.with_moment_table(None) is logit

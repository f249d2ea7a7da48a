"""EP's moments from the tables: the shipped stores that hold them (logit, both Poisson links,
Student-t nu = 4 and 5) answer ``(log Z, mean, std)`` to 1e-12 against the exact computation and
mpmath, with no fallback, one Student-t table serves every noise scale, and the estimators' site
updates take them from there by default (``table="exact"``: without the table)."""

import json

import numpy as np
import pytest

import qpinfer
from qpinfer.likelihoods.poisson_square.moments import hermite_min_b, scaled_cavity
from qpinfer.likelihoods.registry import get_likelihood
from qpinfer.likelihoods.student_t import student_t_name
from qpinfer.tables.shipped import SHIPPED, open_shipped, shipped_path
from qptables.pipeline.cells_check import moment_errors, reference_values
from qptables.reference.fanout import fan_out
from tests._helpers import coal, load_ionosphere, mcycle

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
    it accepts), labels +-1, counts 0..1000 or observations on [-10, 10] (Student-t)."""
    rng = np.random.default_rng(seed)
    half = n // 2
    magnitude = 10.0 ** rng.uniform(-4, 4, n - half)
    mu = np.concatenate([rng.uniform(-10, 10, half), rng.choice([-1.0, 1.0], n - half) * magnitude])
    sigma = 10.0 ** rng.uniform(-4, 4 if name == "poisson_log" else 6, n)
    if name.startswith("poisson"):
        y = rng.integers(0, 1001, n).astype(np.float64)
    elif name.startswith("student_t"):
        y = rng.uniform(-10.0, 10.0, n)
    else:
        y = rng.choice([-1.0, 1.0], n)
    return rng.permutation(mu), sigma, y


STUDENT_T = ["student_t(nu=4.0, scale=1.0)", "student_t(nu=5.0, scale=1.0)"]


def test_every_table_without_closed_form_moments_stores_them():
    assert {"logit", "poisson_log", "poisson_square", *STUDENT_T} <= set(WITH_MOMENTS)
    assert open_shipped("logit").has_moments and not open_shipped("probit").has_moments


@pytest.mark.parametrize("scale", [0.05, 3.0])
def test_a_scaled_student_t_takes_its_moments_from_the_scale_1_table(scale):
    """One table per nu serves every noise scale: the moments are looked up in units of the
    scale, with no fallback, to the tolerance against the exact quadrature."""
    exact = get_likelihood(student_t_name(4.0, scale))
    table = open_shipped(STUDENT_T[0])
    tabulated = exact.with_moment_table(table.moment_table)
    mu, sigma, y = _cavities(STUDENT_T[0], 4000, seed=3)
    mu, sigma, y = scale * mu, scale * sigma, scale * y
    before = table.moment_fallback_count
    got = tabulated.ep_moments(mu, sigma, y)
    assert table.moment_fallback_count == before
    errors = moment_errors(got, exact.ep_moments(mu, sigma, y), sigma)
    assert max(errors.values()) <= TOLERANCE, errors
    with pytest.raises(ValueError, match=r"table must be an open table of 'student_t\(nu=4.0"):
        exact.with_moment_table(open_shipped(STUDENT_T[1]).moment_table)


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


#: Student-t's mpmath reference takes 10-30 s a point: one in the default tier (the build's
#: verification record holds 20, checked below), 20 with -m slow
QUICK_MPMATH = {name: 1 for name in STUDENT_T}


@pytest.mark.parametrize("name", WITH_MOMENTS)
def test_table_moments_match_mpmath(name, dask_client):
    _check_against_mpmath(name, QUICK_MPMATH.get(name, 20), dask_client)


@pytest.mark.slow
@pytest.mark.parametrize("name", STUDENT_T)
def test_student_t_table_moments_match_mpmath_at_20_cavities(name, dask_client):
    _check_against_mpmath(name, 20, dask_client)


def _check_against_mpmath(name, n, client):
    """The table's moments at ``n`` random cavities that the table answers (no closed form or
    Gauss-Hermite rule does), spread over the boxes, against mpmath."""
    table = open_shipped(name)
    tabulated = get_likelihood(name).with_moment_table(table.moment_table)
    mu, sigma, y = _cavities(name, 400, seed=2)
    canonical = _canonical(name, mu, sigma, y)
    _, rest = table.stored_moments(*canonical)
    inside = np.setdiff1d(np.flatnonzero(_table_served(name, *canonical)), rest)
    pick = inside[np.linspace(0, inside.size - 1, n).astype(int)]
    mu, sigma, y = mu[pick], sigma[pick], y[pick]
    refs, _ = fan_out(
        reference_values, [[name] * n, list(mu), list(sigma), list(y), [None] * n], client=client
    )
    refs = np.array(refs).T
    errors = moment_errors(tabulated.ep_moments(mu, sigma, y), refs[1:], sigma)
    assert max(errors.values()) <= TOLERANCE, errors


def _table_served(name, m, sigma, y):
    """Canonical cavities whose moments come from the table, not from a Gauss-Hermite rule
    (Student-t: r >= 0.05; the square link: b below ``hermite_min_b``) or the series (the square
    link's counts up to 8)."""
    if name.startswith("student_t"):
        nu = get_likelihood(name).nu
        return sigma * sigma * (nu + 1.0) >= 0.05**2 * (nu + m * m)
    if name == "poisson_square":
        return (y > 8) & (scaled_cavity(m, sigma)[2] < hermite_min_b(y))
    return np.ones(m.shape, dtype=bool)


def _canonical(name, mu, sigma, y):
    lik = get_likelihood(name)
    m, yy = lik.canonical(mu, y)  # Student-t at scale 1: (|mu - y|, 0)
    folded = np.maximum(m, -m - sigma * sigma) if name == "logit" else m
    return folded, sigma, yy


@pytest.mark.parametrize("name", WITH_MOMENTS)
def test_the_store_records_its_moment_verification(name):
    ver = json.loads((shipped_path(name) / "zarr.json").read_text())["attributes"]["verification"]
    assert ver["passed"] and ver["mpmath_points"] >= 20 and ver["kernel_points"] >= 20_000
    for key in ("moments_kernel_max_err", "moments_mpmath_max_err"):
        assert set(ver[key]) == {"log_z", "mean", "var"}
        assert max(ver[key].values()) <= ver["tolerance"] == TOLERANCE


def test_cavities_in_no_box_are_computed_and_counted():
    """Counts above the square link's labels (1..1000) are in no box: computed exactly and
    counted, also when no cavity of the call is in a box."""
    table = open_shipped("poisson_square")
    exact = get_likelihood("poisson_square")
    tabulated = exact.with_moment_table(table.moment_table)
    mu, sigma = np.array([30.0, -12.0, 3.0]), np.array([0.5, 2.0, 1.0])
    for y in (np.full(3, 5000.0), np.array([5000.0, 20.0, 1e6])):
        before = table.moment_fallback_count
        got = tabulated.ep_moments(mu, sigma, y)
        assert table.moment_fallback_count - before == np.count_nonzero(y > 1000)
        for a, b in zip(got, exact.ep_moments(mu, sigma, y), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.max(sigma))


def test_likelihoods_with_closed_form_moments_take_no_table():
    probit = qpinfer.get_likelihood("probit")
    assert probit.with_moment_table(open_shipped("logit")) is probit


def _ionosphere_logit():
    X, y = load_ionosphere()
    return qpinfer.GPClassifier, {"likelihood": "logit", "length_scale": 3.0}, X[:120, :6], y[:120]


def _coal_log_link():
    return qpinfer.GPPoissonRegressor, {"link": "log", "length_scale": 0.3}, *coal()


def _coal_square_link():
    return qpinfer.GPPoissonRegressor, {"link": "square", "length_scale": 0.3}, *coal()


def _mcycle_student_t():
    X, y = mcycle()
    params = {"nu": 4.0, "scale": 0.2, "length_scale": 0.3, "optimize_scale": False}
    return qpinfer.GPStudentTRegressor, params, X, y


@pytest.mark.parametrize(
    "problem", [_ionosphere_logit, _coal_log_link, _coal_square_link, _mcycle_student_t]
)
@pytest.mark.parametrize("method", ["ep", "qp"])
def test_a_fit_takes_its_moments_from_the_shipped_table(problem, method):
    """EP's and QP's site updates use the table's moments by default, and give the evidence and
    predictions of the quadrature path (``table="exact"``) to 1e-9 (the logit on Ionosphere,
    the log and square links on the coal-mining counts, Student-t noise on the motorcycle
    data)."""
    cls, params, X, y = problem()
    fast = cls(method, optimizer=None, **params).fit(X, y)
    table = fast.likelihood_._moment_table
    assert table is open_shipped(fast.likelihood_._moment_table_name())
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

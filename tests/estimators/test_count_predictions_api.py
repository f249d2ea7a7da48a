"""The Poisson regressors' predictions as scikit-learn users expect them
(:class:`qpinfer.estimators.count_predictions.CountPredictionsMixin`): ``predict`` is the
predictive mean (float64, as ``PoissonRegressor``'s), ``predict_mode`` the most probable count,
``predict_quantiles`` / ``predict_interval`` the predictive count distribution's quantiles,
``score`` the D^2 of the Poisson deviance (as ``PoissonRegressor.score``), and
``log_predictive_density`` what ``score`` was before: log p(y* | data) per row.

Every check is against the predictive pmf (``log_pmf``, summed over counts far past the mass) or
an independent computation: Gauss-Hermite quadrature of the rate's mean over the latent
predictive, scikit-learn's ``d2_tweedie_score``."""

from __future__ import annotations

import numpy as np
import pytest

from qpinfer import GPPoissonRegressor, MiniBatchSparseGPPoissonRegressor, SparseGPPoissonRegressor

LINKS = ("square", "log")
#: counts 0..GRID_TOP hold the predictive mass of every row here (means below 10, standard
#: deviations below 4; the log link's heavier tail leaves 9e-12 beyond 150 at the widest row,
#: 3e-15 beyond 300; checked: the pmf sums to 1 within 1e-12)
GRID_TOP = 400
#: the quantiles come from the negative binomial's closed-form distribution function (square
#: link) or a cumulative sum of the same pmf (log link); the pmf summed here agrees with either
#: to about 1e-14 (a sum of ~100 terms of size <= 1 in float64)
CDF_ATOL = 1e-12


def _counts(n: int = 30, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Counts with rate (2 + sin(1.5 x))^2, rates 1..9, on x in [-3, 3]."""
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3.0, 3.0, size=(n, 1)), axis=0)
    f = 2.0 + np.sin(1.5 * X[:, 0])
    return X, rng.poisson(f * f).astype(np.float64)


#: test rows: inside the data, between rows, and past its end (a wide latent predictive)
X_TEST = np.array([[-2.5], [0.05], [1.7], [3.6]])
FIXED = {"optimizer": None, "variance": 1.0, "length_scale": 1.0}


@pytest.fixture(scope="module")
def fits() -> dict:
    X, y = _counts()
    out = {}
    for link in LINKS:
        out["dense", link] = GPPoissonRegressor("ep", link=link, **FIXED).fit(X, y)
        out["sparse", link] = SparseGPPoissonRegressor(
            8, method="ep", link=link, random_state=0, **FIXED
        ).fit(X, y)
    return out


def _pmf(est, X: np.ndarray, **kw) -> tuple[np.ndarray, np.ndarray]:
    counts = np.arange(GRID_TOP + 1.0)
    p = np.exp(est.log_pmf(X, np.tile(counts, (X.shape[0], 1)), **kw))
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)  # the grid holds it
    return counts, p


def _quadrature_mean(mean: np.ndarray, var: np.ndarray, link: str) -> np.ndarray:
    """E[g(f)], f ~ N(mean, var), g = f^2 or exp(f), by 80-node Gauss-Hermite quadrature
    (exact for f^2; for exp(f) with var <= 2 the error is below 1e-15 relative)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    f = mean[:, None] + np.sqrt(var)[:, None] * nodes[None, :]
    g = f * f if link == "square" else np.exp(f)
    return g @ weights / np.sqrt(2.0 * np.pi)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("link", LINKS)
def test_predict_is_the_mean_of_the_predictive_pmf(fits, kind, link):
    est = fits[kind, link]
    pred = est.predict(X_TEST)
    assert pred.dtype == np.float64 and pred.shape == (X_TEST.shape[0],)
    mean, var = est.predict_latent(X_TEST)
    assert np.max(var) <= 2.0  # the quadrature's range (see _quadrature_mean)
    np.testing.assert_allclose(pred, _quadrature_mean(mean, var, link), rtol=1e-12)
    # the pmf the other predictions use (square link: App. H's negative binomial, and the
    # exact Poisson mixture over the latent; both have the rate's mean)
    for exact in (False, True) if link == "square" else (False,):
        counts, p = _pmf(est, X_TEST, exact=exact)
        np.testing.assert_allclose(p @ counts, pred, rtol=1e-10)
    same, std = est.predict(X_TEST, return_std=True)
    np.testing.assert_array_equal(same, pred)
    np.testing.assert_allclose(std, np.sqrt(p @ counts**2 - pred**2), rtol=1e-9)
    np.testing.assert_array_equal(est.predict_mean(X_TEST), pred)


@pytest.mark.parametrize("link", LINKS)
def test_predict_mode_is_the_most_probable_count(fits, link):
    est = fits["dense", link]
    mode = est.predict_mode(X_TEST)
    assert mode.dtype == np.int64
    _, p = _pmf(est, X_TEST)
    np.testing.assert_array_equal(mode, np.argmax(p, axis=1))
    assert not np.array_equal(mode, est.predict(X_TEST))  # the mean is another number


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("alpha", [0.5, 0.9, 0.99])
def test_predict_interval_covers_alpha_with_each_tail_at_most_half_the_rest(
    fits, kind, link, alpha
):
    est = fits[kind, link]
    lower, upper = est.predict_interval(X_TEST, alpha=alpha)
    assert lower.dtype == upper.dtype == np.int64
    _, p = _pmf(est, X_TEST)
    cdf = np.cumsum(p, axis=1)
    rows = np.arange(X_TEST.shape[0])
    below = np.where(lower > 0, cdf[rows, np.maximum(lower - 1, 0)], 0.0)  # P(Y < lower)
    above = 1.0 - cdf[rows, upper]  # P(Y > upper)
    tail = (1.0 - alpha) / 2.0
    assert np.all(below <= tail + CDF_ATOL) and np.all(above <= tail + CDF_ATOL)
    assert np.all(1.0 - below - above >= alpha - CDF_ATOL)
    # and no narrower equal-tailed interval does: one count less at either end breaks a tail
    assert np.all(cdf[rows, lower] >= tail - CDF_ATOL)  # P(Y < lower + 1) >= tail
    above_less = np.where(upper > 0, 1.0 - cdf[rows, np.maximum(upper - 1, 0)], 1.0)
    assert np.all(above_less > tail - CDF_ATOL)  # P(Y > upper - 1) > tail


@pytest.mark.parametrize("link", LINKS)
def test_predict_quantiles_are_the_smallest_counts_reaching_each_level(fits, link):
    est = fits["dense", link]
    q = np.array([0.01, 0.25, 0.5, 0.75, 0.999])
    got = est.predict_quantiles(X_TEST, q)
    assert got.shape == (X_TEST.shape[0], q.size) and got.dtype == np.int64
    _, p = _pmf(est, X_TEST)
    cdf = np.cumsum(p, axis=1)
    assert np.min(np.abs(cdf[:, :, None] - q)) > CDF_ATOL  # no cdf value on a level's edge
    want = np.array([[np.argmax(row >= level) for level in q] for row in cdf])
    np.testing.assert_array_equal(got, want)  # the smallest count whose cdf reaches the level
    np.testing.assert_array_equal(est.predict_quantiles(X_TEST, 0.5), got[:, [2]])
    lower, upper = est.predict_interval(X_TEST, alpha=0.5)
    np.testing.assert_array_equal(np.column_stack([lower, upper]), got[:, [1, 3]])


@pytest.mark.parametrize("bad", [0.0, 1.0, [0.5, 1.5], [], [[0.5]], "half"])
def test_predict_quantiles_refuses_levels_outside_the_open_unit_interval(fits, bad):
    with pytest.raises(ValueError, match=r"q must be a float or a 1-d array of floats in \(0, 1\)"):
        fits["dense", "square"].predict_quantiles(X_TEST, bad)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, "0.9"])
def test_predict_interval_refuses_alpha_outside_the_open_unit_interval(fits, bad):
    with pytest.raises(ValueError, match=r"alpha must be a float in \(0, 1\)"):
        fits["dense", "square"].predict_interval(X_TEST, alpha=bad)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("link", LINKS)
def test_score_is_scikit_learns_d2_of_the_poisson_deviance(fits, kind, link):
    from sklearn.metrics import d2_tweedie_score

    est = fits[kind, link]
    X, y = _counts(20, seed=1)  # held out
    mu = est.predict(X)
    assert est.score(X, y) == pytest.approx(d2_tweedie_score(y, mu, power=1), rel=1e-12)
    w = np.random.default_rng(2).uniform(0.1, 2.0, size=y.size)
    want = d2_tweedie_score(y, mu, power=1, sample_weight=w)
    assert est.score(X, y, sample_weight=w) == pytest.approx(want, rel=1e-12)
    assert 0.3 < est.score(X, y) < 1.0  # the fit explains most of the deviance of held-out rows


def test_score_where_the_counts_are_constant_follows_r2_scores_convention(fits):
    est = fits["dense", "square"]
    X = X_TEST[:2]
    assert est.score(X, [3, 3]) == 0.0  # a prediction that is not exactly 3


def test_score_refuses_sample_weight_of_another_length(fits):
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(4,\)"):
        fits["dense", "square"].score(X_TEST, [1, 2, 3, 4], sample_weight=[1.0, 2.0])


@pytest.mark.parametrize("link", LINKS)
def test_log_predictive_density_is_the_log_pmf_of_one_count_a_row(fits, link):
    est = fits["dense", link]
    y = np.array([0.0, 3.0, 7.0, 12.0])
    lpd = est.log_predictive_density(X_TEST, y)
    _, p = _pmf(est, X_TEST)
    np.testing.assert_allclose(lpd, np.log(p[np.arange(4), y.astype(int)]), rtol=1e-12)
    with pytest.raises(ValueError, match="counts"):
        est.log_predictive_density(X_TEST, [1.0, 2.0])


def test_minibatch_estimator_predicts_as_the_dense_one_from_its_latent():
    """The minibatch estimator shares the mixin: the same relations between its predictions."""
    X, y = _counts()
    est = MiniBatchSparseGPPoissonRegressor(
        6, method="ep", link="log", batch_size=10, max_epochs=2, random_state=0, **FIXED
    ).fit(X, y)
    mean, var = est.predict_latent(X_TEST)
    np.testing.assert_allclose(est.predict(X_TEST), np.exp(mean + var / 2.0), rtol=1e-14)
    _, p = _pmf(est, X_TEST)
    np.testing.assert_array_equal(est.predict_mode(X_TEST), np.argmax(p, axis=1))
    q = est.predict_quantiles(X_TEST, [0.05, 0.95])
    np.testing.assert_array_equal(np.column_stack(est.predict_interval(X_TEST)), q)


def test_minibatch_count_predictions_are_lazy_on_a_dask_X_and_equal_the_numpy_ones():
    da = pytest.importorskip("dask.array")
    X, y = _counts()
    est = MiniBatchSparseGPPoissonRegressor(
        6, method="ep", batch_size=10, max_epochs=2, random_state=0, **FIXED
    ).fit(X, y)
    Xd = da.from_array(X_TEST, chunks=2)
    q = [0.05, 0.5, 0.95]
    lazy = {
        "predict": est.predict(Xd),
        "predict_mode": est.predict_mode(Xd),
        "predict_quantiles": est.predict_quantiles(Xd, q),
    }
    lower, upper = est.predict_interval(Xd, alpha=0.9)
    assert all(isinstance(a, da.Array) for a in (*lazy.values(), lower, upper))
    np.testing.assert_array_equal(lazy["predict"].compute(), est.predict(X_TEST))
    np.testing.assert_array_equal(lazy["predict_mode"].compute(), est.predict_mode(X_TEST))
    want = est.predict_quantiles(X_TEST, q)
    got = lazy["predict_quantiles"].compute()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(
        np.column_stack([lower.compute(), upper.compute()]), want[:, [0, 2]]
    )
    with pytest.raises(ValueError, match="q must be"):
        est.predict_quantiles(Xd, 1.5)  # checked before any block runs

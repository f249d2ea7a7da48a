"""The regressors' joint predictions, as scikit-learn's ``GaussianProcessRegressor`` has them
(:mod:`qpinfer.estimators.joint_predictions`): ``predict(X, return_cov=True)`` for the Student-t
regressors and :class:`qpinfer.SparseGPRegressor` (the covariance of new observations, whose
diagonal is ``return_std``'s square), and ``sample_y(X, n_samples, random_state)`` of shape
``(n_rows, n_samples)`` for them and the Poisson regressors (counts).

The joint latent covariance is checked against an independent computation (the full GP's: the
posterior of the training sites over the training and test rows together; the pseudo-point one's:
the full GP's at M = N, Z = X), and the draws against the predictive moments with bounds from the
sample size: 4000 seeded draws, 5 standard errors (the standard errors of sample variances and
covariances estimated from the draws themselves)."""

from __future__ import annotations

import numpy as np
import pytest

from qpinfer import (
    GPPoissonRegressor,
    GPStudentTRegressor,
    MiniBatchSparseGPPoissonRegressor,
    MiniBatchSparseGPStudentTRegressor,
    SparseGPPoissonRegressor,
    SparseGPRegressor,
    SparseGPStudentTRegressor,
)
from qpinfer.estimators.joint_predictions import JOINT_MAX_ROWS
from qpinfer.inference.dense_posterior import posterior_from_sites

FIXED = {"optimizer": None, "variance": 1.0, "length_scale": 1.0}
#: test rows: one inside the data (x in [-3, 3]) and three past its end, close together (a wide,
#: strongly correlated latent predictive: the joint draw shows in their covariances)
X_S = np.array([[-1.0], [3.5], [3.8], [4.4]])
N_DRAWS = 4000
SIGMAS = 5.0


def _reals(n: int = 30, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3.0, 3.0, size=(n, 1)), axis=0)
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)


def _counts(n: int = 30, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3.0, 3.0, size=(n, 1)), axis=0)
    f = 2.0 + np.sin(1.5 * X[:, 0])
    return X, rng.poisson(f * f).astype(np.float64)


def _real_regressors() -> dict:
    """nu = 8: the noise has a finite fourth moment, so the sample covariances' standard errors
    are finite (and estimable from the draws)."""
    t = {"nu": 8.0, "scale": 0.1}
    return {
        "student_t": lambda: GPStudentTRegressor("ep", **t, **FIXED),
        "sparse_student_t": lambda: SparseGPStudentTRegressor(
            8, method="ep", random_state=0, **t, **FIXED
        ),
        "minibatch_student_t": lambda: MiniBatchSparseGPStudentTRegressor(
            6, method="ep", batch_size=10, max_epochs=2, random_state=0, **t, **FIXED
        ),
        "sparse_gaussian": lambda: SparseGPRegressor(
            8, noise_variance=0.01, random_state=0, **FIXED
        ),
    }


@pytest.fixture(scope="module")
def real_fits() -> dict:
    X, y = _reals()
    return {name: make().fit(X, y) for name, make in _real_regressors().items()}


@pytest.fixture(scope="module")
def count_fits() -> dict:
    X, y = _counts()
    out = {}
    for link in ("square", "log"):
        out["dense", link] = GPPoissonRegressor("ep", link=link, **FIXED).fit(X, y)
        out["sparse", link] = SparseGPPoissonRegressor(
            8, method="ep", link=link, random_state=0, **FIXED
        ).fit(X, y)
    return out


REAL = sorted(_real_regressors())


# -- return_cov --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", REAL)
def test_return_cov_diagonal_is_return_std_squared(real_fits, name):
    est = real_fits[name]
    mean, std = est.predict(X_S, return_std=True)
    same, cov = est.predict(X_S, return_cov=True)
    np.testing.assert_allclose(same, mean, rtol=1e-14, atol=1e-15)
    assert cov.shape == (X_S.shape[0],) * 2
    np.testing.assert_array_equal(cov, cov.T)
    # rounding: the diagonal is K** - a^T a (+ c^T c) as a matrix product against the marginal
    # variances' einsum, then the noise variance is added; relative error ~ eps * kss / std^2
    np.testing.assert_allclose(np.diag(cov), std**2, rtol=1e-12)
    assert np.min(np.linalg.eigvalsh(cov)) > 0  # the noise makes it positive definite
    offdiag = cov[~np.eye(X_S.shape[0], dtype=bool)]
    assert np.max(np.abs(offdiag)) > 0.1 * np.max(std**2)  # a joint, not a diagonal, matrix


@pytest.mark.parametrize("name", REAL)
def test_return_std_and_return_cov_together_raise_scikit_learns_error(real_fits, name):
    from sklearn.gaussian_process import GaussianProcessRegressor

    X, y = _reals(5)
    with pytest.raises(RuntimeError) as theirs:
        GaussianProcessRegressor().fit(X, y).predict(X, return_std=True, return_cov=True)
    with pytest.raises(RuntimeError) as ours:
        real_fits[name].predict(X_S, return_std=True, return_cov=True)
    assert str(ours.value) == str(theirs.value)
    assert isinstance(ours.value, ValueError)  # as qpinfer's other refused arguments


def _augmented_posterior(est, X_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The latent ``f*`` at ``X_test`` as the posterior of the fitted sites over the training
    and test rows together (zero sites at the test rows; eq. (3), R&W's B form), in the
    estimator's normalised units."""
    n = est.X_train_.shape[0]
    K = est.kernel_(np.vstack([est.X_train_, X_test]))
    zeros = np.zeros(X_test.shape[0])
    tau = np.concatenate([est.result_.tau, zeros])
    nu = np.concatenate([est.result_.nu, zeros])
    post = posterior_from_sites(K, tau, nu, full_cov=True)
    return post.mean[n:], post.Sigma[n:, n:]


def test_dense_student_t_return_cov_is_the_augmented_posteriors(real_fits):
    est = real_fits["student_t"]
    mean, Sigma = _augmented_posterior(est, X_S)
    noise = (est.likelihood_.scale * est.y_scale_) ** 2 * 8.0 / 6.0  # nu / (nu - 2)
    got_mean, got_cov = est.predict(X_S, return_cov=True)
    # two factorisations of matrices of condition ~1e4: agreement to ~1e-12
    np.testing.assert_allclose(got_mean, est.y_center_ + est.y_scale_ * mean, rtol=1e-9)
    want = est.y_scale_**2 * Sigma + noise * np.eye(X_S.shape[0])
    np.testing.assert_allclose(got_cov, want, rtol=1e-9, atol=1e-12)


def test_dense_student_t_return_cov_with_negative_sites_is_the_augmented_posteriors():
    """Outliers under nu = 3 leave some sites with negative precisions: the covariance then
    comes through the indefinite ``M`` in place of ``B`` (both here and in eq. (3))."""
    X, y = _reals()
    y = y.copy()
    y[[5, 15, 25]] += np.array([4.0, -5.0, 6.0])
    est = GPStudentTRegressor("ep", nu=3.0, scale=0.1, normalize_y=False, **FIXED).fit(X, y)
    assert np.any(est.result_.tau < 0)
    mean, Sigma = _augmented_posterior(est, X_S)
    got_mean, got_cov = est.predict(X_S, return_cov=True)
    noise = est.likelihood_.scale**2 * 3.0
    np.testing.assert_allclose(got_mean, mean, rtol=1e-9)
    np.testing.assert_allclose(got_cov, Sigma + noise * np.eye(X_S.shape[0]), rtol=1e-9)


@pytest.mark.parametrize("link", ["square", "log"])
def test_dense_poisson_joint_latent_is_the_augmented_posteriors(count_fits, link):
    est = count_fits["dense", link]
    mean, Sigma = _augmented_posterior(est, X_S)
    got_mean, got_cov = est._latent_mean_cov(X_S)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-9)
    np.testing.assert_allclose(got_cov, Sigma, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.diag(got_cov), est.predict_latent(X_S)[1], rtol=1e-12)


def test_sparse_student_t_return_cov_at_m_equal_n_is_the_dense_ones():
    """With M = N, Z = X and no jitter the pseudo-point posterior is the full GP's (sites
    converged to 1e-12). The pseudo-point side solves with the Cholesky factor of K (Lu,
    no jitter): cond(K) ~ 1e7 on these 12 rows (length scale 0.7), round-off up to
    ~eps cond(K) ~ 2e-9 relative; measured 7e-15."""
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(-3.0, 3.0, size=(12, 1)), axis=0)
    y = np.sin(X[:, 0]) + 0.3 * rng.standard_t(4, size=12)
    fixed = {**FIXED, "length_scale": 0.7, "scale": 0.5, "tol": 1e-12, "max_iter": 5000}
    dense = GPStudentTRegressor("ep", **fixed).fit(X, y)
    sparse = SparseGPStudentTRegressor(
        method="ep", inducing_points=X, optimize_inducing=False, jitter=0.0, **fixed
    ).fit(X, y)
    mean_d, want = dense.predict(X_S, return_cov=True)
    mean_s, got = sparse.predict(X_S, return_cov=True)
    np.testing.assert_allclose(mean_s, mean_d, rtol=1e-9, atol=1e-9 * np.max(np.abs(mean_d)))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.max(want))


# -- sample_y ----------------------------------------------------------------------------------
def _sample_moments_agree(draws: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> None:
    """Sample mean and covariance of ``draws`` (rows x draws) within SIGMAS standard errors of
    ``mean`` and ``cov`` (the mean's from ``cov``'s diagonal, the covariances' estimated from
    the draws: the standard deviation of the products of deviations over sqrt(draws))."""
    n = draws.shape[1]
    dev_from_mean = draws.mean(axis=1) - mean
    assert np.all(np.abs(dev_from_mean) <= SIGMAS * np.sqrt(np.diag(cov) / n)), dev_from_mean
    centred = draws - draws.mean(axis=1, keepdims=True)
    products = centred[:, None, :] * centred[None, :, :]
    sample_cov = products.mean(axis=2)
    se = products.std(axis=2) / np.sqrt(n)
    assert np.all(np.abs(sample_cov - cov) <= SIGMAS * se), (sample_cov, cov, se)


@pytest.mark.parametrize("name", REAL)
def test_sample_y_draws_have_predicts_mean_and_covariance(real_fits, name):
    est = real_fits[name]
    draws = est.sample_y(X_S, N_DRAWS, random_state=3)
    assert draws.shape == (X_S.shape[0], N_DRAWS) and draws.dtype == np.float64
    mean, cov = est.predict(X_S, return_cov=True)
    _sample_moments_agree(draws, mean, cov)
    # the test sees the joint draw: the off-diagonal covariances are many standard errors from
    # 0 (independent draws per row would fail the check above)
    corr = cov[1, 2] / np.sqrt(cov[1, 1] * cov[2, 2])
    assert corr > 0.5


def _count_covariance(mean: np.ndarray, Sigma: np.ndarray, link: str) -> np.ndarray:
    """Cov[y*] of counts ``y_i ~ Poisson(g(f_i))`` given ``f ~ N(mean, Sigma)``, closed form:
    the rates' covariance plus their means on the diagonal (law of total covariance);
    ``Cov(f_i^2, f_j^2) = 2 S_ij^2 + 4 m_i m_j S_ij``,
    ``Cov(e^f_i, e^f_j) = E_i E_j (e^S_ij - 1)``."""
    if link == "square":
        rate_mean = mean**2 + np.diag(Sigma)
        rate_cov = 2.0 * Sigma**2 + 4.0 * np.outer(mean, mean) * Sigma
    else:
        rate_mean = np.exp(mean + np.diag(Sigma) / 2.0)
        rate_cov = np.outer(rate_mean, rate_mean) * np.expm1(Sigma)
    return rate_cov + np.diag(rate_mean)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("link", ["square", "log"])
def test_poisson_sample_y_draws_counts_with_the_predictive_moments(count_fits, kind, link):
    est = count_fits[kind, link]
    draws = est.sample_y(X_S, N_DRAWS, random_state=4)
    assert draws.shape == (X_S.shape[0], N_DRAWS) and draws.dtype == np.int64
    assert np.all(draws >= 0)
    mean, std = est.predict(X_S, return_std=True)
    latent_mean, Sigma = est._latent_mean_cov(X_S)
    cov = _count_covariance(latent_mean, Sigma, link)
    np.testing.assert_allclose(np.diag(cov), std**2, rtol=1e-12)  # predict's own variance
    _sample_moments_agree(draws, mean, cov)
    assert cov[1, 2] / np.sqrt(cov[1, 1] * cov[2, 2]) > 0.2  # a joint draw shows


def test_sample_y_is_seeded_like_scikit_learns(real_fits):
    est = real_fits["sparse_gaussian"]
    one = est.sample_y(X_S)
    assert one.shape == (X_S.shape[0], 1)
    np.testing.assert_array_equal(one, est.sample_y(X_S, 1, random_state=0))  # default 0
    np.testing.assert_array_equal(
        est.sample_y(X_S, 3, random_state=np.random.default_rng(5)),
        est.sample_y(X_S, 3, random_state=5),
    )
    assert not np.array_equal(est.sample_y(X_S, 3, random_state=5), est.sample_y(X_S, 3))


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3"])
def test_sample_y_refuses_n_samples_that_is_no_positive_integer(real_fits, bad):
    with pytest.raises(ValueError, match="n_samples must be an integer >= 1"):
        real_fits["student_t"].sample_y(X_S, bad)


def test_sample_y_refuses_a_random_state_it_cannot_seed(count_fits):
    with pytest.raises(ValueError, match="random_state must be None, an integer >= 0"):
        count_fits["dense", "log"].sample_y(X_S, 2, random_state="seed")


def test_minibatch_joint_predictions_refuse_a_dask_X_and_more_than_their_row_limit():
    da = pytest.importorskip("dask.array")
    X, y = _counts()
    est = MiniBatchSparseGPPoissonRegressor(
        6, method="ep", batch_size=10, max_epochs=2, random_state=0, **FIXED
    ).fit(X, y)
    with pytest.raises(ValueError, match="need X in memory"):
        est.sample_y(da.from_array(X_S, chunks=2))
    big = np.zeros((JOINT_MAX_ROWS + 1, 1))
    with pytest.raises(ValueError, match=f"at most {JOINT_MAX_ROWS} rows"):
        est.sample_y(big)
    Xr, yr = _reals()
    reg = _real_regressors()["minibatch_student_t"]().fit(Xr, yr)
    with pytest.raises(ValueError, match=f"at most {JOINT_MAX_ROWS} rows"):
        reg.predict(big, return_cov=True)
    assert reg.sample_y(X_S, 2).shape == (X_S.shape[0], 2)

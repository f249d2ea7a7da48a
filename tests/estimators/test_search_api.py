"""scikit-learn's optimizer API on every estimator: ``n_restarts_optimizer``
with ``random_state``, a callable ``optimizer``, ``log_marginal_likelihood(theta, eval_gradient,
clone_kernel)``, ``log_marginal_likelihood_value_``, ``latent_mean_and_variance``, the regressors'
``predict(X, return_std=True)`` and the bound warnings."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.optimize
from scipy import integrate, stats

import qpinfer
from qpinfer import ARDSquaredExponential
from qpinfer.inference.restarts import draw_starts
from qpinfer.inference.search_result import BoundWarning
from tests._helpers import coal


def _standardise(X: np.ndarray) -> np.ndarray:
    return (X - X.mean(0)) / X.std(0)


def cancer(n: int = 80, d: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Breast cancer (scikit-learn): ``n`` rows drawn with seed 0, the first ``d`` features
    standardised, labels 0/1."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    idx = np.random.default_rng(0).choice(len(y), n, replace=False)
    return _standardise(X[idx][:, :d]), y[idx]


def diabetes(n: int = 60, d: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Diabetes (scikit-learn): ``n`` rows drawn with seed 0, the first ``d`` features and the
    target standardised."""
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    idx = np.random.default_rng(0).choice(len(y), n, replace=False)
    return _standardise(X[idx][:, :d]), (y[idx] - y[idx].mean()) / y[idx].std()


#: every estimator (a factory of keyword arguments) with its data set; the sparse ones at M = 8;
#: the classifiers by EP or Power EP (one search: the evidence is the best restart's)
ESTIMATORS = {
    "GPClassifier": (lambda **kw: qpinfer.GPClassifier("ep", **kw), cancer),
    "GPPoissonRegressor": (lambda **kw: qpinfer.GPPoissonRegressor("ep", **kw), coal),
    "GPStudentTRegressor": (lambda **kw: qpinfer.GPStudentTRegressor("ep", **kw), diabetes),
    "SparseGPClassifier": (lambda **kw: qpinfer.SparseGPClassifier(8, method="pep", **kw), cancer),
    "SparseGPRegressor": (lambda **kw: qpinfer.SparseGPRegressor(8, **kw), diabetes),
}
NAMES = list(ESTIMATORS)


def _fit(name: str, **kw):
    make, data = ESTIMATORS[name]
    if name == "SparseGPClassifier":
        kw.setdefault("search_tol", None)  # sites converged to tol in every evaluation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", qpinfer.ConvergenceWarning)
        return make(**kw).fit(*data())


# -- restarts -----------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["ep", "qp"])
def test_restarts_escape_a_deliberately_bad_start(method):
    # length scale 1e-3 on standardised inputs: K is the variance times I, every site sees its
    # own label only and the evidence is flat at n log(1/2) in the length scale -- L-BFGS-B
    # stays there; log-uniform restarts over [1e-5, 1e5] land in the informative region
    X, y = cancer()
    kw = {"length_scale": 1e-3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", qpinfer.ConvergenceWarning)
        base = qpinfer.GPClassifier(method, **kw).fit(X, y)
        best = qpinfer.GPClassifier(method, n_restarts_optimizer=3, random_state=0, **kw).fit(X, y)
    assert base.log_marginal_likelihood_value_ == pytest.approx(len(y) * np.log(0.5), rel=1e-6)
    assert best.restart_evidence_.shape == (4,)
    if method == "ep":  # the first start is the unrestarted search itself
        assert best.restart_evidence_[0] == pytest.approx(base.log_marginal_likelihood_, rel=1e-12)
        assert best.log_marginal_likelihood_value_ == np.max(best.restart_evidence_)
    # QP: restart_evidence_ is EP's, and QP's own is polished from the best of them
    assert best.log_marginal_likelihood_value_ > base.log_marginal_likelihood_value_ + 10.0


def test_restarts_are_reproducible_with_the_same_random_state():
    X, y = cancer()
    fits = [
        qpinfer.GPClassifier("ep", n_restarts_optimizer=2, random_state=rs, length_scale=1e-3)
        for rs in (7, 7, np.random.default_rng(7))
    ]
    for est in fits:
        est.fit(X, y)
    for other in fits[1:]:  # an int and a Generator seeded with it draw the same starts
        np.testing.assert_array_equal(other.kernel_.theta, fits[0].kernel_.theta)
        np.testing.assert_array_equal(other.restart_evidence_, fits[0].restart_evidence_)


@pytest.mark.parametrize("name", NAMES)
def test_every_estimator_restarts_and_keeps_the_best(name):
    est = _fit(name, n_restarts_optimizer=1, random_state=0)
    assert est.restart_evidence_.shape == (2,)
    assert est.log_marginal_likelihood_value_ == est.log_marginal_likelihood_
    # the fitted model is the best start's (the sparse regressor's evidence is recomputed at
    # the best point, the same expression: equal to rounding)
    assert est.log_marginal_likelihood_value_ == pytest.approx(
        np.max(est.restart_evidence_), rel=1e-9
    )


def test_restart_draws_are_log_uniform_within_the_bounds():
    # the third coordinate is free (as inducing inputs are): not drawn
    bounds = np.array([np.log([1e-5, 1e5]), np.log([1e-2, 1e3]), [-np.inf, np.inf]])
    x0 = np.array([0.0, 1.0, 3.0])
    starts = np.array(
        draw_starts(x0, bounds, ["a", "b", "Z[0]"], 4000, np.random.default_rng(0), 2)
    )
    assert np.all(starts[:, 2] == 3.0)
    for j in range(2):  # uniform in the log: Kolmogorov-Smirnov against U(low, high)
        low, high = bounds[j]
        assert np.all((starts[:, j] >= low) & (starts[:, j] <= high))
        assert stats.kstest(starts[:, j], stats.uniform(low, high - low).cdf).pvalue > 1e-3
    with pytest.raises(ValueError, match=r"n_restarts_optimizer=1 .*finite.*Z\[0\]"):
        draw_starts(x0, bounds, ["a", "b", "Z[0]"], 1, np.random.default_rng(0))


def test_restarts_refuse_infinite_bounds_as_scikit_learn():
    X, y = cancer()
    kernel = ARDSquaredExponential(1.0, 1.0, bounds=(1e-5, np.inf))
    with pytest.raises(ValueError, match="n_restarts_optimizer=2 .*finite"):
        qpinfer.GPClassifier("ep", kernel=kernel, n_restarts_optimizer=2).fit(X, y)
    qpinfer.GPClassifier("ep", kernel=kernel, n_restarts_optimizer=0).fit(X, y)  # as sklearn


# -- a callable optimizer -----------------------------------------------------------------------
def test_a_callable_optimizer_gets_sklearns_signature_and_its_result_is_used():
    X, y = cancer()
    calls = []
    shift = np.array([0.3, -0.2])

    def optimizer(obj_func, initial_theta, bounds):
        value, grad = obj_func(initial_theta)
        calls.append((initial_theta.copy(), np.array(bounds), value, grad))
        assert obj_func(initial_theta, eval_gradient=False) == pytest.approx(value, rel=1e-9)
        theta = initial_theta + shift  # not an optimum: the fit must still use it
        return theta, obj_func(theta, eval_gradient=False)

    est = qpinfer.GPClassifier("ep", optimizer=optimizer, variance=2.0, tol=1e-10).fit(X, y)
    ((theta0, bounds, value, grad),) = calls
    np.testing.assert_array_equal(theta0, np.log([2.0, 1.0]))
    np.testing.assert_array_equal(bounds, est.kernel_.bounds)
    # (the kernel stores exp(theta): equal to rounding)
    np.testing.assert_allclose(est.kernel_.theta, theta0 + shift, rtol=1e-15, atol=1e-15)
    # obj_func is minus the evidence and minus its gradient: the fixed model's, recomputed
    ref = qpinfer.GPClassifier(
        "ep", optimizer=None, kernel=ARDSquaredExponential(*np.exp(theta0)), tol=1e-10
    ).fit(X, y)
    ref_value, ref_grad = ref.log_marginal_likelihood(theta0, eval_gradient=True)
    assert -value == pytest.approx(ref.log_marginal_likelihood_, rel=1e-9)
    np.testing.assert_allclose(-grad, ref_grad, rtol=1e-6, atol=1e-9)
    at = qpinfer.GPClassifier(
        "ep", optimizer=None, kernel=ARDSquaredExponential(*np.exp(theta0 + shift)), tol=1e-10
    ).fit(X, y)
    assert est.log_marginal_likelihood_value_ == pytest.approx(
        at.log_marginal_likelihood_, rel=1e-9
    )


def test_scipy_fmin_l_bfgs_b_as_a_callable():
    X, y = cancer()
    seen = []

    def optimizer(obj_func, initial_theta, bounds):
        theta, f, _ = scipy.optimize.fmin_l_bfgs_b(obj_func, initial_theta, bounds=bounds)
        seen.append((theta, f))
        return theta, f

    est = qpinfer.GPClassifier("ep", optimizer=lambda f, x0, bounds: optimizer(f, x0, bounds))
    est.fit(X, y)
    ((theta, f),) = seen
    np.testing.assert_allclose(est.kernel_.theta, theta, rtol=1e-15, atol=1e-15)
    assert est.log_marginal_likelihood_value_ == pytest.approx(-f, rel=1e-12)
    builtin = qpinfer.GPClassifier("ep", optimizer="fmin_l_bfgs_b").fit(X, y)
    # the same optimum; only the stopping rules differ (scipy's factr 1e7, i.e. a relative
    # decrease of 2.2e-9 per iteration, against qpinfer's 1e-9)
    assert est.log_marginal_likelihood_value_ == pytest.approx(
        builtin.log_marginal_likelihood_value_, rel=1e-5
    )


@pytest.mark.parametrize("name", NAMES)
def test_every_estimator_fits_at_the_callables_theta(name):
    calls = []

    def optimizer(obj_func, initial_theta, bounds):
        calls.append(initial_theta.size)
        assert np.shape(bounds) == (initial_theta.size, 2)
        theta = np.clip(initial_theta + 0.1, bounds[:, 0], bounds[:, 1])
        return theta, obj_func(theta, eval_gradient=False)

    est = _fit(name, optimizer=optimizer)
    nk = est.kernel_.theta.size
    n_z = est.inducing_points_.size if name.startswith("Sparse") else 0
    extra = 1 if name == "SparseGPRegressor" else 0  # log noise_variance
    assert calls == [nk + extra + n_z]
    np.testing.assert_allclose(est.kernel_.theta, np.log([1.0, 1.0]) + 0.1, rtol=0, atol=1e-15)
    if name == "SparseGPRegressor":
        assert est.noise_variance_ == pytest.approx(0.1 * np.exp(0.1), rel=1e-14)


def test_qp_runs_the_callable_once_per_stage():
    X, y = cancer()
    stages = []

    def optimizer(obj_func, initial_theta, bounds):
        stages.append(obj_func(initial_theta, eval_gradient=False))
        return initial_theta, stages[-1]

    est = qpinfer.GPClassifier("qp", optimizer=optimizer, qp_objective="ep").fit(X, y)
    assert len(stages) == 2  # EP's evidence, then QP's from EP's optimum
    assert est.log_marginal_likelihood_value_ == pytest.approx(-stages[1], rel=1e-12)
    stages.clear()
    est = qpinfer.GPClassifier("qp", optimizer=optimizer).fit(X, y)
    assert len(stages) == 1  # QP's own evidence: one search, no EP stage
    assert est.log_marginal_likelihood_value_ == pytest.approx(-stages[0], rel=1e-12)


def test_a_callable_that_returns_garbage_is_named():
    X, y = cancer()
    with pytest.raises(ValueError, match="optimizer must return"):
        qpinfer.GPClassifier("ep", optimizer=lambda f, x0, bounds: x0).fit(X, y)


@pytest.mark.parametrize("where", ["above", "below"])
def test_a_callable_whose_theta_leaves_the_bounds_is_refused_naming_it(where):
    """Before: a theta_opt 50 log units above the bounds was fitted at (variance 5.2e21)
    without a word. One past a bound by round-off (here 1e-12) is put on the bound."""
    X, y = cancer()

    def outside(obj_func, initial_theta, bounds):
        theta = initial_theta.copy()
        theta[0] = bounds[0, 1] + 50.0 if where == "above" else bounds[0, 0] - 50.0
        return theta, 0.0

    with pytest.raises(ValueError, match=r"optimizer returned .*log variance = .* outside"):
        qpinfer.GPClassifier("ep", optimizer=outside).fit(X, y)

    def on_bound(obj_func, initial_theta, bounds):
        theta = initial_theta.copy()
        theta[1] = bounds[1, 1] + 1e-12  # round-off past the upper bound
        return theta, obj_func(theta, eval_gradient=False)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BoundWarning)  # (it is on the bound)
        est = qpinfer.GPClassifier("ep", optimizer=on_bound).fit(X, y)
    assert est.kernel_.theta[1] == pytest.approx(est.kernel_.bounds[1, 1], abs=1e-12)


# -- the evidence and the latent, by scikit-learn's names ---------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_log_marginal_likelihood_clone_kernel_both_ways(name):
    est = _fit(name, optimizer=None)
    theta_fit = est.kernel_.theta.copy()
    assert est.log_marginal_likelihood() == est.log_marginal_likelihood_value_
    theta = theta_fit + 0.2
    if name == "SparseGPRegressor":
        theta = np.append(theta, np.log(est.noise_variance_))
    a = est.log_marginal_likelihood(theta, eval_gradient=True, clone_kernel=True)
    b = est.log_marginal_likelihood(theta, eval_gradient=True, clone_kernel=False)
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[1], b[1])
    # as scikit-learn, clone_kernel=False sets kernel_.theta (exp and log: a few ulps); the
    # posterior stays the fitted one
    nk = theta_fit.size
    np.testing.assert_allclose(est.kernel_.theta, theta[:nk], rtol=1e-14, atol=1e-14)
    est.log_marginal_likelihood(np.r_[theta_fit, theta[nk:]], clone_kernel=False)
    np.testing.assert_allclose(est.kernel_.theta, theta_fit, rtol=1e-14, atol=1e-14)
    assert est.log_marginal_likelihood() == est.log_marginal_likelihood_value_
    X = ESTIMATORS[name][1]()[0][:5]
    for got, want in zip(est.latent_mean_and_variance(X), est.predict_latent(X), strict=True):
        np.testing.assert_array_equal(got, want)


# -- return_std -----------------------------------------------------------------------------------
def _count_moments(log_p: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.exp(log_p)
    np.testing.assert_allclose(p.sum(1), 1.0, rtol=0, atol=1e-9)  # the grid holds the mass
    mean = p @ counts
    return mean, np.sqrt(p @ counts**2 - mean**2)


@pytest.mark.parametrize("link", ["square", "log"])
def test_poisson_return_std_is_the_count_predictives(link):
    X, y = coal()
    est = qpinfer.GPPoissonRegressor("ep", optimizer=None, link=link, length_scale=2.0).fit(X, y)
    mean, std = est.predict(X, return_std=True)
    np.testing.assert_array_equal(mean, est.predict(X))
    # independent: the exact predictive pmf (the Poisson mixture over the Gaussian latent, by
    # App. C.2's normaliser / the log link's quadrature) summed over counts 0..64, far past
    # these means (<= 6) and standard deviations (<= 4)
    counts = np.arange(65.0)
    grid = np.tile(counts, (len(X), 1))
    pmf_mean, sd = _count_moments(est.log_pmf(X, grid, exact=True), counts)
    np.testing.assert_allclose(mean, pmf_mean, rtol=1e-8)
    np.testing.assert_allclose(std, sd, rtol=1e-7)
    if link == "square":  # the negative binomial of App. H has the same variance, k c (1 + c)
        k, c = est.predict_negative_binomial(X)
        np.testing.assert_allclose(std**2, k * c * (1.0 + c), rtol=1e-12)


@pytest.mark.parametrize("nu", [2.0, 4.0, 7.5])
def test_student_t_return_std_adds_the_noise_variance(nu):
    X, y = diabetes()
    est = qpinfer.GPStudentTRegressor("ep", optimizer=None, nu=nu, scale=0.4).fit(X, y)
    mean, std = est.predict(X, return_std=True)
    latent_mean, latent_var = est.predict_latent(X)
    np.testing.assert_array_equal(mean, latent_mean)
    if nu <= 2:
        assert np.all(np.isinf(std))
        return
    s = 0.4 * est.y_scale_  # scale is in units of the normalised targets (normalize_y)
    noise, err = integrate.quad(lambda e: e * e * stats.t.pdf(e, nu, scale=s), -np.inf, np.inf)
    np.testing.assert_allclose(std**2 - latent_var, noise, rtol=max(1e-9, 10 * err / noise))


def test_sparse_regressor_return_std_is_a_new_observations():
    est = _fit("SparseGPRegressor", optimizer=None, normalize_y=False)
    X = diabetes()[0]
    _, std = est.predict(X, return_std=True)
    _, var = est.predict_latent(X)
    np.testing.assert_allclose(std**2, var + est.noise_variance_, rtol=1e-14)


# -- checks: bad values name the argument; bounds warn in scikit-learn's words --------------------
BAD = [
    ("optimizer", "adam"),
    ("optimizer", 3),
    ("n_restarts_optimizer", -1),
    ("n_restarts_optimizer", 1.5),
    ("n_restarts_optimizer", True),
    ("random_state", "seed"),
    ("random_state", -1),
    ("random_state", 0.5),
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("param", "value"), BAD)
def test_bad_values_name_the_argument(name, param, value):
    make, data = ESTIMATORS[name]
    with pytest.raises(ValueError, match=param):
        make(**{param: value}).fit(*data())


def test_bad_log_marginal_likelihood_arguments_are_named():
    est = _fit("GPClassifier", optimizer=None)
    with pytest.raises(ValueError, match="clone_kernel"):
        est.log_marginal_likelihood(est.kernel_.theta, clone_kernel="no")
    with pytest.raises(ValueError, match="theta"):
        est.log_marginal_likelihood(np.zeros(5))


@pytest.mark.parametrize("name", NAMES)
def test_a_fit_on_a_bound_warns_naming_the_parameter_and_the_bound(name):
    # the SE kernel confined to [0.9, 1.1]: the evidence's optimum lies outside for these data
    kernel = ARDSquaredExponential(1.0, 1.0, bounds=(0.9, 1.1))
    make, data = ESTIMATORS[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make(kernel=kernel).fit(*data())
    texts = [str(w.message) for w in caught if issubclass(w.category, BoundWarning)]
    assert len(texts) == 1, [str(w.message) for w in caught]
    assert name in texts[0] and "calling fit again may find a better value" in texts[0]
    hit = "variance = " in texts[0] or "length_scale[0] = " in texts[0]
    side = "upper" if "its upper bound 1.1" in texts[0] else "lower"
    assert hit and f"its {side} bound" in texts[0]
    advice = {"upper": "Increasing the bound", "lower": "Decreasing the bound"}[side]
    assert advice in texts[0] or "Widening the bounds" in texts[0]


def test_search_warnings_are_scikit_learns_convergence_warning_too():
    from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning

    X, y = cancer()
    kernel = ARDSquaredExponential(1.0, 1.0, bounds=(0.9, 1.1))
    with warnings.catch_warnings():  # code written for GaussianProcessClassifier silences them
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", SklearnConvergenceWarning)
        qpinfer.GPClassifier("ep", kernel=kernel).fit(X, y)
    with pytest.warns(SklearnConvergenceWarning, match="close to its"):
        qpinfer.GPClassifier("ep", kernel=kernel).fit(X, y)


def test_the_scikit_learn_compatible_warnings_pickle_into_a_fresh_process():
    """A search warning raised in a worker process comes back pickled (plain pickle, not only
    cloudpickle): its class is found by name, in a process that has not made it yet too."""
    import pickle
    import subprocess
    import sys

    from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning

    from qpinfer.inference.search_result import sklearn_compatible

    category = sklearn_compatible(BoundWarning)
    warning = pickle.loads(pickle.dumps(category("k1__constant_value is close to its bound")))
    assert type(warning) is category and isinstance(warning, SklearnConvergenceWarning)
    code = (
        "import pickle, sys\n"
        "from qpinfer.inference.search_result import BoundWarning\n"
        "w = pickle.loads(sys.stdin.buffer.read())\n"
        "assert isinstance(w, BoundWarning), type(w).__mro__\n"
        "print(type(w).__name__, w)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps(warning),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split()[0] == "SklearnCompatibleBoundWarning"

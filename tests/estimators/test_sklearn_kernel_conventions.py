"""scikit-learn's conventions for the fitted kernel: the default ``kernel_`` as the equivalent
scikit-learn kernel, a ``CompoundKernel`` for more than two classes, ``log_marginal_likelihood``'s
types and ``clone_kernel=False``, and kernels on non-vector inputs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import qpinfer
from tests._helpers import blobs

kernels = pytest.importorskip("sklearn.gaussian_process.kernels")


def _quiet_fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


# -- 3. the default kernel_ is scikit-learn's C * RBF --------------------------------------------
@pytest.mark.parametrize("ard", [False, True])
def test_default_kernel_is_the_sklearn_equivalent(ard):
    X, y = blobs(30)
    est = qpinfer.GPClassifier("ep", optimizer=None, ard=ard, variance=2.0).fit(X, y)
    ls = np.ones(2) if ard else 1.0
    expected = kernels.ConstantKernel(2.0, (1e-5, 1e5)) * kernels.RBF(ls, (1e-5, 1e5))
    assert isinstance(est.kernel_.wrapped, kernels.Kernel)
    assert est.kernel_ == expected
    assert repr(est.kernel_) == repr(expected)
    np.testing.assert_array_equal(est.kernel_.bounds, expected.bounds)
    np.testing.assert_allclose(est.kernel_(X), expected(X), rtol=1e-12)


@pytest.mark.parametrize("name", ["GPClassifier", "SparseGPClassifier"])
def test_default_fit_matches_the_explicit_sklearn_kernel(name):
    """The same search with the own SE kernel and with scikit-learn's C * RBF: the same
    fitted hyperparameters (up to L-BFGS-B's stopping tolerance: relative 1e-9 in the evidence,
    so ~1e-4 in theta along the evidence's curvature here) and evidence."""
    X, y = blobs(30)
    first = 6 if name.startswith("Sparse") else "ep"  # n_inducing, or method
    own = _quiet_fit(getattr(qpinfer, name)(first, random_state=0), X, y)
    kernel = kernels.ConstantKernel(1.0, (1e-5, 1e5)) * kernels.RBF(1.0, (1e-5, 1e5))
    skl = _quiet_fit(getattr(qpinfer, name)(first, kernel=kernel, random_state=0), X, y)
    assert type(own.kernel_.wrapped) is type(skl.kernel_.wrapped)
    np.testing.assert_allclose(own.kernel_.theta, skl.kernel_.theta, atol=1e-3)
    np.testing.assert_allclose(
        own.log_marginal_likelihood_, skl.log_marginal_likelihood_, rtol=1e-6
    )


# -- 5. more than two classes: a CompoundKernel -------------------------------------------------
@pytest.mark.parametrize("kernel", [None, "rbf"])
def test_multiclass_kernel_is_a_compound_kernel(kernel):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(36, 2))
    y = np.digitize(X[:, 0], [-0.4, 0.4])
    k = kernels.RBF(1.0) if kernel == "rbf" else None
    est = qpinfer.GPClassifier("ep", kernel=k, optimizer=None).fit(X, y)
    assert isinstance(est.kernel_, kernels.CompoundKernel)
    theta = np.concatenate([e.kernel_.theta for e in est.estimators_])
    np.testing.assert_array_equal(est.kernel_.theta, theta)
    lml = est.log_marginal_likelihood(est.kernel_.theta)
    assert type(lml) is np.float64
    np.testing.assert_allclose(lml, est.log_marginal_likelihood_value_, rtol=1e-9)
    # clone_kernel=False sets the compound (and the binary kernels) to theta, as scikit-learn
    est.log_marginal_likelihood(theta + 0.25, clone_kernel=False)
    np.testing.assert_allclose(est.kernel_.theta, theta + 0.25)
    np.testing.assert_allclose(est.estimators_[0].kernel_.theta, theta[: theta.size // 3] + 0.25)


# -- 6. log_marginal_likelihood's types and clone_kernel ----------------------------------------
@pytest.mark.parametrize("name", ["GPClassifier", "SparseGPClassifier", "SparseGPRegressor"])
def test_log_marginal_likelihood_types_and_clone_kernel(name):
    X, y = blobs(24)
    kw = {"n_inducing": 5, "random_state": 0} if name.startswith("Sparse") else {}
    est = _quiet_fit(getattr(qpinfer, name)(optimizer=None, **kw), X, y)
    fitted = est.kernel_.theta.copy()
    n_extra = 1 if name == "SparseGPRegressor" else 0  # its log noise variance
    theta = np.concatenate([fitted + 0.3, np.zeros(n_extra)])
    value = est.log_marginal_likelihood(theta)
    assert type(value) is np.float64
    pair = est.log_marginal_likelihood(theta, eval_gradient=True)
    assert type(pair) is tuple and type(pair[0]) is np.float64
    assert isinstance(pair[1], np.ndarray) and pair[1].dtype == np.float64
    np.testing.assert_array_equal(est.kernel_.theta, fitted)  # clone_kernel=True: unchanged
    again = est.log_marginal_likelihood(theta, clone_kernel=False)
    # as scikit-learn (theta goes through exp and log: a rounding error of a few ulps)
    np.testing.assert_allclose(est.kernel_.theta, fitted + 0.3, rtol=1e-14, atol=1e-14)
    assert again == value


# -- 7. kernels on non-vector inputs ------------------------------------------------------------
class CharacterKernel(kernels.GenericKernelMixin, kernels.StationaryKernelMixin, kernels.Kernel):
    """scikit-learn's example kernel on strings: the sum over character pairs of 1 (equal) or
    ``baseline`` (different); fixed hyperparameter."""

    def __init__(self, baseline=0.5):
        self.baseline = baseline

    def _pair(self, a, b):
        return sum(1.0 if c == d else self.baseline for c in a for d in b)

    def __call__(self, X, Y=None, eval_gradient=False):
        Y = X if Y is None else Y
        K = np.array([[self._pair(a, b) for b in Y] for a in X])
        return (K, np.empty((len(X), len(X), 0))) if eval_gradient else K

    def diag(self, X):
        return np.array([self._pair(a, a) for a in X])

    def clone_with_theta(self, theta):
        return CharacterKernel(self.baseline)


def _strings(n, seed):
    rng = np.random.default_rng(seed)
    words = ["".join(rng.choice(list("AC"), size=rng.integers(3, 7))) for _ in range(n)]
    labels = np.array([int(w.count("A") > w.count("C")) for w in words])
    return words, labels


def _counts(words, baseline):
    """Features whose dot product is :class:`CharacterKernel`: ``sqrt(b) len`` and
    ``sqrt(1 - b)`` times each character's count."""
    return np.array(
        [[np.sqrt(baseline) * len(w), *(np.sqrt(1 - baseline) * w.count(c) for c in "AC")]
         for w in words]
    )  # fmt: skip


def test_string_kernel_fits_lists_of_strings():
    words, labels = _strings(24, 0)
    est = qpinfer.GPClassifier("ep", kernel=CharacterKernel(), optimizer=None).fit(words, labels)
    assert not hasattr(est, "n_features_in_")
    test_words, _ = _strings(8, 1)
    proba = est.predict_proba(test_words)
    # the same prior on count features (a dot-product kernel): the same posterior
    dot = kernels.DotProduct(0.0, sigma_0_bounds="fixed")
    vec = qpinfer.GPClassifier("ep", kernel=dot, optimizer=None)
    vec.fit(_counts(words, 0.5), labels)
    np.testing.assert_allclose(proba, vec.predict_proba(_counts(test_words, 0.5)), rtol=1e-8)
    assert est.score(words, labels) == vec.score(_counts(words, 0.5), labels)


@pytest.mark.parametrize("name", ["SparseGPClassifier", "MiniBatchSparseGPClassifier"])
def test_sparse_estimators_refuse_non_vector_kernels(name):
    X, y = blobs(20)
    with pytest.raises(ValueError, match="non-vector inputs.*inducing points"):
        getattr(qpinfer, name)(4, kernel=CharacterKernel()).fit(X, y)

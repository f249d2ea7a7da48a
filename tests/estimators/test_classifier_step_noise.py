"""GPClassifier with the label-noise step likelihood (Qi and Guo, 2012, eq. (8)): EP, Power EP, REP, QP."""

import numpy as np
import pytest

from qpinfer import GPClassifier
from qpinfer.inference.ep import MomentMatching, predict_latent, run_ep
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.likelihoods.step_noise import StepNoise


def _data(n=60, seed=1, flip=0.2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] ** 2 + X[:, 1] ** 2 < 1.2, "in", "out")
    idx = rng.choice(n, int(flip * n), replace=False)
    y[idx] = np.where(y[idx] == "in", "out", "in")
    return X, y


def _clf(method, **kw):
    return GPClassifier(
        method,
        likelihood="step_noise",
        eps=0.2,
        optimizer=None,
        schedule="sequential",
        length_scale=0.8,
        **{"tol": 1e-8, "max_iter": 300, **kw},
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"likelihood": "step_noise", "eps": 0.5}, "eps"),
        ({"likelihood": "step_noise", "eps": -0.1}, "eps"),
        ({"likelihood": "step_noise", "eps": float("nan")}, "eps"),
        ({"eps": 0.7}, "eps"),
        ({"method": "rep", "likelihood": "step_noise", "rep_c": -1.0}, "c "),
        ({"method": "rep", "likelihood": "step_noise", "rep_c": "big"}, "c "),
        ({"method": "rep"}, "likelihood='step_noise'"),
        ({"likelihood": "cauchit"}, "likelihood"),  # not a likelihood qpinfer has
        ({"method": "laplace", "likelihood": "step_noise"}, "not available"),
    ],
)
def test_bad_input_names_the_argument(kwargs, match):
    X, y = _data(10)
    kwargs = {"optimizer": None, **kwargs}
    with pytest.raises(ValueError, match=match):
        GPClassifier(**kwargs).fit(X, y)


def test_step_noise_needs_fixed_hyperparameters():
    X, y = _data(10)
    with pytest.raises(ValueError, match="optimizer must be None"):
        GPClassifier("ep", likelihood="step_noise").fit(X, y)


def test_ep_matches_run_ep_and_probabilities_are_the_step_predictive():
    X, y = _data()
    ep = _clf("ep").fit(X, y)
    kern = ARDSquaredExponential(1.0, [0.8, 0.8])
    y_pm = np.where(y == ep.classes_[1], 1.0, -1.0)
    ref = run_ep(kern(X), y_pm, MomentMatching(StepNoise(0.2)), schedule="sequential", tol=1e-8)
    Xs = np.random.default_rng(5).normal(size=(25, 2))
    m_ref, v_ref = predict_latent(ref.posterior, kern(X, Xs), kern.diag(Xs))
    m, v = ep.predict_latent(Xs)
    np.testing.assert_allclose(m, m_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(v, v_ref, rtol=1e-10, atol=1e-12)
    p = ep.predict_proba(Xs)
    assert np.all((p >= 0.2 - 1e-12) & (p <= 0.8 + 1e-12))
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert np.array_equal(ep.predict(Xs), ep.classes_[(p[:, 1] > 0.5).astype(int)])
    assert np.array_equal(np.sign(ep.decision_function(Xs)), np.sign(m))


def test_rep_with_large_c_is_ep():
    X, y = _data(30)
    ep = _clf("ep", max_iter=40).fit(X, y)
    rep = _clf("rep", rep_c=1e6, max_iter=40).fit(X, y)
    Xs = np.random.default_rng(6).normal(size=(20, 2))
    for a, b in zip(ep.predict_latent(Xs), rep.predict_latent(Xs), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)
    assert np.all(rep.projection_.last_b == 0)


def test_qp_variance_not_above_ep_and_pep_runs():
    X, y = _data(40)
    ep = _clf("ep").fit(X, y)
    qp = _clf("qp", table="exact").fit(X, y)
    pep = _clf("pep", alpha=0.8).fit(X, y)
    Xs = np.random.default_rng(7).normal(size=(30, 2))
    _, v_ep = ep.predict_latent(Xs)
    _, v_qp = qp.predict_latent(Xs)
    assert np.all(v_qp <= v_ep * (1 + 1e-9))
    assert qp.result_.converged and pep.result_.converged
    assert np.isfinite(qp.log_marginal_likelihood_)

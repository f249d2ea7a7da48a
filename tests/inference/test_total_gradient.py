"""QP's own objectives: total gradients against finite differences of the
re-converged objective, for probit, logit, Poisson (both links) and Student-t.

Reference: Richardson-extrapolated central differences (steps 1e-4 and 2e-4 in log theta) of the
objective with the sites re-converged to a site tolerance of 1e-13 at every step. The
extrapolation error is O(h^4) ~ 1e-16 relative; the rounding error is the objective's error
from the unconverged sites (~1e-12, through a gradient of O(1) sensitivity) over the step,
~1e-8. The gradient's own error is that of its five-point local differences (~1e-12,
:mod:`qpinfer.inference.site_jacobian`). So a 1e-6 relative bound (the issue's) has two orders
of margin over what the numerics allow; any missed term (the fixed-site gradient, or a
Jacobian term dropped) is off by 1e-2 or more (the fixed-site gradient is printed in the
messages for scale).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from qpinfer import GPClassifier, GPStudentTRegressor
from qpinfer.inference.ep import run_ep
from qpinfer.inference.evidence import log_evidence_gradient
from qpinfer.inference.projections import QuantileMatching
from qpinfer.inference.total_gradient import qp_objective_gradient
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.likelihoods.registry import get_likelihood
from qpinfer.likelihoods.student_t import StudentT
from qpinfer.tables.scaled import for_likelihood
from qpinfer.tables.shipped import shipped_table

BOUND = 1e-6
SITE_TOL = 1e-13


def _data(name: str, n: int = 60):
    rng = np.random.default_rng(0)
    Xb, yb = load_breast_cancer(return_X_y=True)
    idx = rng.choice(len(yb), n, replace=False)
    X = Xb[idx, :4]
    X = (X - X.mean(0)) / X.std(0)
    if name in ("probit", "logit"):
        return X, np.where(yb[idx] == 1, 1.0, -1.0)
    f = np.sin(X[:, 0])
    if name == "student_t":
        return X, f + 0.3 * rng.standard_t(4, n)
    rate = np.exp(f) if name == "poisson_log" else 1.0 + f * f
    return X, rng.poisson(rate).astype(float)


def _richardson(f, x: np.ndarray, h: float = 1e-4) -> np.ndarray:
    out = np.empty_like(x)
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = h
        d1 = (f(x + e) - f(x - e)) / (2 * h)
        d2 = (f(x + 2 * e) - f(x - 2 * e)) / (4 * h)
        out[j] = (4 * d1 - d2) / 3
    return out


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


CASES = [
    ("probit", "evidence", "table"),
    ("probit", "loo", "table"),
    ("probit", "evidence", "exact"),
    ("logit", "evidence", "table"),
    ("logit", "loo", "table"),
    ("poisson_square", "evidence", "table"),
    ("poisson_square", "loo", "table"),
    ("poisson_log", "evidence", "table"),
    ("poisson_log", "loo", "table"),
    # ~25 s each (the shipped Student-t table leaves these cavities to the kernel, issue #27);
    # the default suite covers Student-t with test_student_t_scale_gradient_and_negative_sites
    pytest.param("student_t", "evidence", "table", marks=pytest.mark.slow),
    pytest.param("student_t", "loo", "table", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("name", "objective", "source"), CASES)
def test_total_gradient_matches_finite_differences(name, objective, source):
    X, y = _data(name)
    lik = get_likelihood(name)
    projection = QuantileMatching(lik, shipped_table(lik) if source == "table" else None)
    kernel = ARDSquaredExponential(2.0, np.array([1.0, 2.0, 1.5, 3.0]))
    warm = {}

    def run(theta):
        k = kernel.with_theta(theta)
        K = k(X)
        res = run_ep(K, y, projection, tol=SITE_TOL, max_iter=5000, init=warm.get("init"))
        warm["init"] = (res.tau, res.nu)
        return k, K, res

    def value(theta):
        k, K, res = run(theta)
        return qp_objective_gradient(k, X, K, y, res, projection, objective)[0]

    theta = kernel.theta.copy()
    k, K, res = run(theta)
    got_value, grad = qp_objective_gradient(k, X, K, y, res, projection, objective)
    if objective == "evidence":
        assert got_value == res.log_marginal_likelihood
    else:
        assert got_value == pytest.approx(
            np.sum(lik.log_z(res.cavity_mean, np.sqrt(res.cavity_var), y)), rel=1e-12
        )
    fd = _richardson(value, theta)
    fixed = log_evidence_gradient(k, X, res, K) if res.posterior.L is not None else None
    print(f"{name} {objective} {source}: relative error {_relative(grad, fd):.1e}")
    assert _relative(grad, fd) <= BOUND, (grad, fd, fixed)


def test_the_fixed_site_gradient_is_not_the_total_one():
    """The check above can fail: R&W 5.27 at QP's sites misses the sites' dependence."""
    X, y = _data("probit")
    lik = get_likelihood("probit")
    projection = QuantileMatching(lik, shipped_table(lik))
    kernel = ARDSquaredExponential(2.0, np.array([1.0, 2.0, 1.5, 3.0]))
    K = kernel(X)
    res = run_ep(K, y, projection, tol=SITE_TOL, max_iter=5000)
    _, total = qp_objective_gradient(kernel, X, K, y, res, projection, "evidence")
    fixed = log_evidence_gradient(kernel, X, res, K)
    assert _relative(fixed, total) > 1e-4


def test_student_t_scale_gradient_and_negative_sites():
    """The log(scale) entry of a location-scale likelihood, at sites some of which are
    negative (the indefinite posterior form): that entry, and the whole gradient along a random
    direction, against Richardson differences (8 re-converged fits instead of 24 for every
    entry; each fit leaves some cavities to the exact kernel, ~1 s)."""
    X, y = _data("student_t")
    kernel = ARDSquaredExponential(2.0, np.array([1.0, 2.0, 1.5, 3.0]))
    table = shipped_table(StudentT(4.0, 1.0))  # the scale-1 table serves every scale
    warm = {}

    def run(p):
        k = kernel.with_theta(p[:-1])
        lik = StudentT(4.0, float(np.exp(p[-1])))
        projection = QuantileMatching(lik, for_likelihood(table, lik))
        K = k(X)
        # with negative sites the parallel sweeps stall at ~1e-12 (the eigendecomposition's
        # round-off), so 1e-11: the differences' error is then ~1e-11 / 1e-4, still << BOUND
        res = run_ep(K, y, projection, tol=1e-11, max_iter=2000, init=warm.get("init"))
        warm["init"] = (res.tau, res.nu)
        return qp_objective_gradient(
            k, X, K, y, res, projection, "evidence", scale_parameter=True
        ), res

    p = np.append(kernel.theta, np.log(0.2))
    (_, grad), res = run(p)
    assert np.any(res.tau < 0), "the case should exercise negative site precisions"
    direction = np.random.default_rng(3).normal(size=p.size)
    scale = np.eye(p.size)[-1]
    for v in (scale, direction / np.linalg.norm(direction)):
        fd = _richardson(lambda t, v=v: run(p + t[0] * v)[0][0], np.zeros(1))[0]
        err = abs(grad @ v - fd) / np.linalg.norm(grad)
        print(f"student-t with its scale, direction {np.round(v, 2)}: relative error {err:.1e}")
        assert err <= BOUND, (grad @ v, fd)


@pytest.mark.parametrize("qp_objective", ["evidence", "loo"])
def test_estimator_fits_its_own_objective_in_one_search(qp_objective):
    """One search (no EP stage), stationary at the end: the total gradient of the chosen
    objective is small at the fitted hyperparameters, and log_marginal_likelihood's gradient
    is eq. (4)'s total derivative."""
    X, y = _data("probit", 120)
    est = GPClassifier(method="qp", qp_objective=qp_objective, tol=1e-12).fit(X, y)
    assert "ep" not in est.stage_seconds_
    theta = est.kernel_.theta
    value, grad = est.log_marginal_likelihood(theta, eval_gradient=True)
    if qp_objective == "evidence":  # L-BFGS-B stopped at a stationary point of eq. (4)
        assert np.max(np.abs(grad)) <= 1e-3 * max(1.0, abs(value))
    away = theta + np.array([0.3, -0.2])  # off the optimum, where the gradient is O(1)
    _, grad = est.log_marginal_likelihood(away, eval_gradient=True)
    fd = _richardson(lambda t: est.log_marginal_likelihood(t), away)
    assert _relative(grad, fd) <= BOUND


def test_qp_objective_is_checked():
    with pytest.raises(ValueError, match="qp_objective must be one of"):
        GPClassifier(method="qp", qp_objective="kl").fit(*_data("probit"))


def test_qp_objective_ep_keeps_the_two_stage_fit():
    X, y = _data("probit", 120)
    est = GPClassifier(method="qp", qp_objective="ep").fit(X, y)
    assert set(est.stage_seconds_) == {"ep", "qp"}


@pytest.mark.slow
def test_student_t_regressor_fits_scale_by_qp_evidence():
    X, y = _data("student_t")
    est = GPStudentTRegressor(method="qp", optimize_scale=True, scale=0.5, tol=1e-12).fit(X, y)
    p = np.append(est.kernel_.theta, np.log(est.scale_)) + np.array([0.3, -0.2, 0.2])
    _, grad = est.log_marginal_likelihood(p, eval_gradient=True)
    fd = _richardson(lambda q: est.log_marginal_likelihood(q), p)
    assert _relative(grad, fd) <= BOUND

"""The shared site loop (qpinfer.inference.site_loop): both front ends, adaptive damping as an
option."""

from __future__ import annotations

import numpy as np
import pytest

import qpinfer
from qpinfer.inference.ep import MomentMatching, run_ep
from qpinfer.inference.site_loop import (
    MIN_SITE_PRECISION,
    STALL_SWEEPS,
    ConvergenceWarning,
    SweepControl,
    SweepSettings,
)
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.sparse import pseudo_point_prior, run_sparse_pep

PROBIT = qpinfer.get_likelihood("probit")


def _problem(n=30, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y, ARDSquaredExponential(1.5, np.array([1.0, 1.0]))


def test_adaptive_damping_leaves_a_converging_dense_run_unchanged():
    X, y, kern = _problem()
    K = kern(X)
    plain = run_ep(K, y, MomentMatching(PROBIT))
    adaptive = run_ep(K, y, MomentMatching(PROBIT), adaptive_damping=True)
    assert plain.converged and adaptive.converged
    assert len(plain.history) < STALL_SWEEPS or np.all(np.diff(plain.history) < 0)
    np.testing.assert_array_equal(plain.tau, adaptive.tau)
    assert plain.log_marginal_likelihood == adaptive.log_marginal_likelihood


@pytest.mark.parametrize("schedule", ["parallel", "sequential"])
def test_dense_and_pseudo_point_loops_agree_when_the_pseudo_points_are_the_inputs(schedule):
    X, y, kern = _problem()
    prior = pseudo_point_prior(kern, X, X, jitter=1e-10)
    sparse = run_sparse_pep(
        prior.A, prior.h, y, MomentMatching(PROBIT), schedule=schedule, tol=1e-10
    )
    dense = run_ep(kern(X), y, MomentMatching(PROBIT), schedule=schedule, tol=1e-10)
    np.testing.assert_allclose(sparse.posterior.mean, dense.posterior.mean, atol=1e-6)
    np.testing.assert_allclose(
        sparse.log_marginal_likelihood, dense.log_marginal_likelihood, atol=1e-6
    )


def test_sweep_settings_name_the_bad_argument():
    with pytest.raises(ValueError, match="damping"):
        SweepSettings.checked("parallel", 1.5, 10, 1e-6, None)
    assert SweepSettings.checked("sequential", None, 10, 1e-6, None).damping == 1.0


def test_sweep_control_ends_at_a_failed_sweep_with_the_best_state_and_warns_at_the_caller():
    """One loop for every sweep (run_sites in process, the dask sweep over partitions): a sweep
    whose posterior is improper (LinAlgError) ends it, the state with the smallest RMS change is
    returned, the sweep may ask whether it starts from that state, and the warning names the
    caller's line."""
    settings = SweepSettings.checked("parallel", None, 10, 1e-6, None)
    control = SweepControl(settings)
    rms = {0: 0.5, 1: 0.2, 2: 0.3}
    starts_from_best = []

    def sweep(state, damping):
        starts_from_best.append(control.best is state)
        if state == 3:
            raise np.linalg.LinAlgError("improper")
        return state + 1, rms[state], 0, state

    with pytest.warns(ConvergenceWarning, match="toy sweep did not converge") as caught:
        best = control.run(sweep, 0, "toy sweep")
    assert best == 2 and control.best_rms == 0.2 and control.history == [0.5, 0.2, 0.3]
    assert control.n_iter == 4 and control.n_skipped == 2 and not control.converged
    assert starts_from_best == [True, True, True, False]
    assert caught[0].filename == __file__


def test_sweep_control_returns_none_when_no_sweep_succeeds():
    """Non-finite sites in the first sweep: no state to return (the caller returns the prior)."""
    control = SweepControl(SweepSettings.checked("parallel", None, 10, 1e-6, None))
    with pytest.warns(ConvergenceWarning):
        assert control.run(lambda state, damping: None, "start", "toy sweep") is None
    assert control.n_iter == 1 and control.history == [] and control.best_rms == np.inf


def test_a_loop_that_leaves_every_site_at_zero_warns_that_it_returns_the_prior():
    """With a kernel matrix that is not a covariance (here -K) no cavity is proper: the site
    precisions stay at zero (the floor), the loop "converged" and the prior came back without a
    word. (The estimators refuse such a kernel before any sweep.)"""
    X, y, kern = _problem()
    with pytest.warns(ConvergenceWarning, match=r"every site precision .*zero.*prior.*kernel"):
        res = run_ep(-kern(X), y, MomentMatching(PROBIT))
    assert np.all(res.tau <= MIN_SITE_PRECISION)

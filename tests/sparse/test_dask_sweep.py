"""The sparse Power EP / QP sweep on dask (qpinfer.inference.sparse.dask_sweep) on a real
LocalCluster of two worker processes: it equals the in-process run_sparse_pep (parallel schedule) to
round-off."""

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from qpinfer.inference.power_ep import PowerMomentMatching  # noqa: E402
from qpinfer.inference.projections import MomentMatching, QuantileMatching  # noqa: E402
from qpinfer.inference.site_loop import ConvergenceWarning  # noqa: E402
from qpinfer.inference.sparse import dask_sweep  # noqa: E402
from qpinfer.inference.sparse.dask_sweep import run_sparse_pep_dask  # noqa: E402
from qpinfer.inference.sparse.pseudo_points import pseudo_point_prior  # noqa: E402
from qpinfer.kernels import ARDSquaredExponential  # noqa: E402
from qpinfer.likelihoods.probit import Probit  # noqa: E402
from qpinfer.sparse import SparseGPClassifier, run_sparse_pep  # noqa: E402
from qpinfer.tables.shipped import open_shipped  # noqa: E402

TOL = 1e-10  # the dask sweep equals the in-process sweep to <= 1e-10


@pytest.fixture(scope="module")
def client(dask_client):
    return dask_client


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(7)
    n, d, m = 301, 3, 15
    X = rng.normal(size=(n, d))
    f = np.sin(2.0 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.normal(size=n)
    y = np.where(f > 0, 1.0, -1.0)
    Z = X[rng.choice(n, m, replace=False)]
    kern = ARDSquaredExponential(1.5, np.array([1.2, 0.8, 2.0]))
    return kern, X, y, Z, pseudo_point_prior(kern, X, Z)


PROJECTIONS = {
    "ep": lambda: MomentMatching(Probit()),
    "pep0.5": lambda: PowerMomentMatching(Probit(), 0.5),
    "qp-shipped": lambda: QuantileMatching(Probit(), open_shipped("probit")),
}
PARTITIONS = {
    "one-per-worker": {},
    "uneven": {"partition_sizes": [100, 1, 200]},
    "more-than-workers": {"n_partitions": 5},
}


def _assert_same(res, ref):
    assert res.n_iter == ref.n_iter and res.converged == ref.converged
    for name in ("tau", "nu", "cavity_mean", "cavity_var"):
        np.testing.assert_allclose(getattr(res, name), getattr(ref, name), rtol=0, atol=TOL)
    for name in ("mean", "var", "L", "mean_v"):
        a, b = getattr(res.posterior, name), getattr(ref.posterior, name)
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL)
    assert abs(res.log_marginal_likelihood - ref.log_marginal_likelihood) <= TOL
    assert res.n_clipped == ref.n_clipped and res.n_skipped == ref.n_skipped


@pytest.mark.parametrize(
    ("method", "partitions"),
    [
        ("ep", "one-per-worker"),
        ("ep", "uneven"),
        ("ep", "more-than-workers"),
        ("pep0.5", "uneven"),
        ("qp-shipped", "one-per-worker"),
        ("qp-shipped", "more-than-workers"),
    ],
)
def test_dask_sweep_equals_in_process_sweep(client, problem, method, partitions):
    kern, X, y, Z, prior = problem
    proj = PROJECTIONS[method]()
    ref = run_sparse_pep(prior.A, prior.h, y, proj, tol=1e-10)
    res, Lu = run_sparse_pep_dask(
        kern, X, y, Z, proj, scheduler=client, tol=1e-10, **PARTITIONS[partitions]
    )
    assert ref.converged and ref.n_iter > 10
    _assert_same(res, ref)
    np.testing.assert_array_equal(Lu, prior.Lu)
    if method == "qp-shipped":  # the table: opened in each worker process, once
        opened = client.run(lambda: [key[:2] for key in dask_sweep._WORKER_TABLES])
        assert len(opened) == 2
        # (the session's workers may also hold tables other tests sent them)
        this = ("ReducedTable", str(proj.table.path))
        assert all(keys.count(this) == 1 for keys in opened.values())


def test_best_state_and_warning_when_not_converged(client, problem):
    kern, X, y, Z, prior = problem
    proj = MomentMatching(Probit())
    with pytest.warns(ConvergenceWarning, match="did not converge within max_iter=3"):
        ref = run_sparse_pep(prior.A, prior.h, y, proj, max_iter=3, damping=0.3)
    with pytest.warns(ConvergenceWarning, match=r"\(dask\) did not converge within max_iter=3"):
        res, _ = run_sparse_pep_dask(
            kern, X, y, Z, proj, scheduler=client, max_iter=3, damping=0.3, n_partitions=3
        )
    assert not res.converged and len(res.history) == 3
    np.testing.assert_allclose(res.history, ref.history, rtol=1e-12)
    _assert_same(res, ref)


def test_warm_start_equals_in_process(client, problem):
    kern, X, y, Z, prior = problem
    proj = MomentMatching(Probit())
    start = run_sparse_pep(prior.A, prior.h, y, proj, tol=1e-3)
    init = (start.tau, start.nu)
    ref = run_sparse_pep(prior.A, prior.h, y, proj, init=init, tol=1e-9)
    address = client.scheduler.address  # a scheduler address: connects, disconnects after
    res, _ = run_sparse_pep_dask(kern, X, y, Z, proj, scheduler=address, init=init, tol=1e-9)
    _assert_same(res, ref)


@pytest.mark.slow
def test_classifier_on_a_local_cluster_it_starts(problem):
    _, X, y, _, _ = problem
    params = dict(n_inducing=10, alpha=1.0, method="pep", optimizer=None, random_state=0, tol=1e-9)
    ref = SparseGPClassifier(**params).fit(X, y)
    est = SparseGPClassifier(**params, scheduler="local").fit(X, y)
    np.testing.assert_allclose(est.predict_proba(X), ref.predict_proba(X), rtol=0, atol=TOL)


def test_classifier_with_scheduler_equals_in_process(client, problem):
    _, X, y, _, _ = problem
    params = dict(n_inducing=15, method="qp", optimizer=None, random_state=0, tol=1e-9)
    ref = SparseGPClassifier(**params).fit(X, y)
    est = SparseGPClassifier(**params, scheduler=client).fit(X, y)
    assert est.get_params()["scheduler"] is client
    assert abs(est.log_marginal_likelihood_ - ref.log_marginal_likelihood_) <= TOL
    np.testing.assert_allclose(est.predict_proba(X), ref.predict_proba(X), rtol=0, atol=TOL)
    np.testing.assert_array_equal(est.predict(X), ref.predict(X))


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"optimizer": "lbfgs"}, "optimizer must be None"),
        ({"optimizer": None, "schedule": "sequential"}, "schedule must be 'parallel'"),
    ],
)
def test_classifier_scheduler_needs_fixed_hyperparameters_and_parallel_sweeps(
    client, problem, params, match
):
    _, X, y, _, _ = problem
    with pytest.raises(ValueError, match=match):
        SparseGPClassifier(n_inducing=5, scheduler=client, **params).fit(X, y)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_partitions": 0}, r"n_partitions must be None .* integer in \[1, 301\]"),
        ({"n_partitions": 302}, r"n_partitions must be None"),
        ({"n_partitions": 2.0}, r"n_partitions must be None"),
        ({"partition_sizes": [100, 200]}, "partition_sizes must be positive integers summing"),
        ({"partition_sizes": [302, -1]}, "partition_sizes must be positive integers summing"),
        ({"n_partitions": 2, "partition_sizes": [1, 300]}, "not both"),
        ({"scheduler": 42}, "scheduler must be 'local', a scheduler address"),
        ({"jitter": -1.0}, "jitter must be a non-negative number"),
        ({"damping": 0.0}, "damping must be in"),
        ({"y": np.ones(300)}, r"y must have shape \(301,\)"),
        ({"Z": np.zeros((4, 2))}, r"Z must be a \(M, 3\) array"),
        ({"kernel": "rbf"}, "ARDSquaredExponential"),
    ],
)
def test_bad_input_raises_value_error(client, problem, kwargs, match):
    kern, X, y, Z, _ = problem
    args = {"kernel": kern, "X": X, "y": y, "Z": Z, "scheduler": client} | kwargs
    with pytest.raises(ValueError, match=match):
        run_sparse_pep_dask(projection=MomentMatching(Probit()), **args)


def _zarr_X(tmp_path, X, rows_per_chunk):
    """``X`` written to a zarr store on disk and opened lazily as a dask array of row chunks."""
    import dask.array as da
    import zarr

    store = zarr.open_array(
        tmp_path / "X.zarr", mode="w", shape=X.shape, chunks=(rows_per_chunk, X.shape[1]),
        dtype="f8",
    )  # fmt: skip
    store[:] = X
    return da.from_zarr(str(tmp_path / "X.zarr"))


@pytest.mark.parametrize("dask_y", [True, False])
def test_dask_array_input_is_read_on_the_workers_and_equals_in_process(
    client, problem, tmp_path, dask_y
):
    """``X`` from a zarr store on disk as a dask array (3 row chunks: 120, 120, 61): the chunks
    are the partitions, each read on the worker of its actor; same sweep as in-process."""
    import dask.array as da

    kern, X, y, Z, prior = problem
    Xd = _zarr_X(tmp_path, X, 120)
    yd = da.from_array(y, chunks=50) if dask_y else y  # rechunked to X's rows
    proj = MomentMatching(Probit())
    ref = run_sparse_pep(prior.A, prior.h, y, proj, tol=1e-10)
    with distributed.get_task_stream(client) as stream:
        res, _ = run_sparse_pep_dask(kern, Xd, yd, Z, proj, scheduler=client, tol=1e-10)
    _assert_same(res, ref)
    workers = sorted(client.scheduler_info()["workers"])
    reads = {}  # chunk index -> the worker that read it from the store
    for task in stream.data:
        key = task["key"]
        if isinstance(key, tuple) and str(key[0]).startswith("from-zarr"):
            reads[key[1]] = task["worker"]
    assert reads == {p: workers[p % 2] for p in range(3)}


def test_dask_array_input_errors(client, problem, tmp_path):
    import dask.array as da

    kern, X, y, Z, _ = problem
    Xd = da.from_array(X, chunks=(100, 3))
    proj = MomentMatching(Probit())
    with pytest.raises(ValueError, match="row chunks of a dask array X are the partitions"):
        run_sparse_pep_dask(kern, Xd, y, Z, proj, scheduler=client, n_partitions=2)
    with pytest.raises(ValueError, match="known chunk sizes"):
        run_sparse_pep_dask(kern, Xd[Xd[:, 0] > 0], y, Z, proj, scheduler=client)
    bad = X.copy()
    bad[250, 1] = np.nan  # in the third chunk: refused on its worker, naming the row
    with pytest.raises(ValueError, match="X must be finite; row 250 holds a NaN"):
        run_sparse_pep_dask(kern, da.from_array(bad, chunks=(100, 3)), y, Z, proj, scheduler=client)
    with pytest.raises(ValueError, match="X must be finite; row 7 holds a NaN"):
        bad = X.copy()
        bad[7, 0] = np.inf
        run_sparse_pep_dask(kern, bad, y, Z, proj, scheduler=client)


def test_import_qpinfer_keeps_dask_out():
    import subprocess
    import sys

    code = "import sys, qpinfer.inference.sparse.dask_sweep; print('distributed' in sys.modules, 'dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_sklearn_clone_and_cross_validation_share_the_client(client, problem):
    """``clone`` deep-copies the parameters but shares a ``Client`` passed as ``scheduler`` (a
    live connection cannot be copied): ``cross_val_score`` runs its folds' sweeps on the cluster."""
    from sklearn.base import clone
    from sklearn.model_selection import cross_val_score

    _, X, y, _, _ = problem
    params = dict(
        n_inducing=8, optimizer=None, random_state=0, length_scale=np.array([1.0, 2.0, 3.0])
    )
    est = SparseGPClassifier(**params, scheduler=client)
    twin = clone(est)
    assert twin.scheduler is client and twin is not est
    assert twin.length_scale is not est.length_scale
    np.testing.assert_array_equal(twin.length_scale, est.length_scale)
    on_dask = cross_val_score(est, X, y, cv=2)
    in_process = cross_val_score(SparseGPClassifier(**params), X, y, cv=2)
    np.testing.assert_array_equal(on_dask, in_process)
    assert clone(SparseGPClassifier(scheduler="local")).scheduler == "local"


@pytest.mark.parametrize("data", ["numpy", "dask"])
def test_a_worker_that_stops_answering_ends_the_sweep_with_a_timeout_error(problem, data):
    """A paused worker (SIGSTOP: alive, connected, silent) is the endless wait: sending it its
    partition (numpy X, scattered) or waiting on its actor (dask X, computed there) ends after
    ``timeout`` seconds with an error naming it."""
    import os
    import signal
    import threading

    import dask.array as da

    kern, X, y, Z, _ = problem
    if data == "dask":
        X = da.from_array(X, chunks=(151, 3))
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        pids = c.run(os.getpid)
        outcome = {}

        def fit():
            try:
                run_sparse_pep_dask(
                    kern, X, y, Z, MomentMatching(Probit()), scheduler=c, timeout=3.0
                )
                outcome["returned"] = True
            except Exception as err:  # noqa: BLE001 -- the outcome is asserted below
                outcome["error"] = err

        paused = sorted(pids.items())[0]
        os.kill(paused[1], signal.SIGSTOP)
        try:
            thread = threading.Thread(target=fit, daemon=True)
            thread.start()
            thread.join(60.0)  # bounded here too: today's code waits forever
            assert not thread.is_alive(), "the sweep still waits on the paused worker"
        finally:
            os.kill(paused[1], signal.SIGCONT)
    err = outcome.get("error")
    assert isinstance(err, TimeoutError), outcome
    assert "within 3 s" in str(err) and paused[0] in str(err)


def test_timeout_must_be_a_positive_number(problem):
    kern, X, y, Z, _ = problem
    with pytest.raises(ValueError, match="timeout must be a positive finite number"):
        run_sparse_pep_dask(kern, X, y, Z, MomentMatching(Probit()), timeout=0)


def test_a_scheduler_address_that_never_answers_the_handshake_is_refused_in_bounded_time(problem):
    """A server that accepts and stays silent (a web server's port, a dashboard): the dask
    handshake has a deadline (dask's connect timeout), the error names the address."""
    import socket
    import threading
    import time

    import dask

    from qpinfer.dask_connect import SchedulerUnreachable

    kern, X, y, Z, _ = problem
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        held = []
        threading.Thread(target=lambda: held.append(srv.accept()), daemon=True).start()
        address = f"tcp://127.0.0.1:{srv.getsockname()[1]}"
        outcome = {}

        def fit():
            try:
                with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
                    run_sparse_pep_dask(kern, X, y, Z, MomentMatching(Probit()), scheduler=address)
            except Exception as err:  # noqa: BLE001 -- asserted below
                outcome["error"] = err

        start = time.monotonic()
        thread = threading.Thread(target=fit, daemon=True)
        thread.start()
        thread.join(60.0)  # today's Client waits for the handshake forever
        assert not thread.is_alive(), "still waiting for the handshake"
        assert time.monotonic() - start < 30.0
    err = outcome.get("error")
    assert isinstance(err, SchedulerUnreachable), outcome
    assert address in str(err) and "does not speak the dask protocol" in str(err)

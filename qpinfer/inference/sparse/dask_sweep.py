"""Pseudo-point Power EP / QP (:func:`qpinfer.inference.sparse.sites.run_sparse_pep`, parallel
schedule) as a map-reduce over data partitions on a dask cluster.

In the parallel schedule every site update needs only its own marginal, and the posterior of the
whitened pseudo-points (:mod:`qpinfer.inference.sparse.pseudo_points`) needs only two sums over the
sites, ``B = I + sum_p A_p diag(tau_p) A_p^T`` and ``b = sum_p A_p nu_p``. So one sweep is

* **map** (one task per partition ``p``, on the worker that holds it): from the broadcast
  ``L = chol(B)`` and ``mean_v = B^-1 b``, the marginals of the partition's site variables
  (:func:`~qpinfer.inference.sparse.pseudo_points.low_rank_marginals`), their damped site updates
  (``qpinfer.inference.sweeps.parallel_sweep()`` with the partition's own
  ``_PseudoPointSites``), and the partition's new partial sums
  ``A_p S_p A_p^T``, ``A_p nu_p`` and squared site change;
* **reduce** (on the client): the M x M and M-vector sums, ``L`` and ``mean_v``
  (:func:`~qpinfer.inference.sparse.pseudo_points.low_rank_factor`), and the RMS change, which
  :meth:`qpinfer.inference.site_loop.SweepControl.run` -- the loop of
  :func:`~qpinfer.inference.site_loop.run_sites` -- turns into damping, stopping and the best state.

Each worker holds its partition's ``X_p, y_p`` (sent once, or -- ``X`` a dask array -- computed
there: :mod:`qpinfer.inference.sparse.dask_partitions`) and computes ``A_p = Lu^-1 K(Z, X_p)``
and ``h_p`` itself from the kernel and ``Z``
(:func:`~qpinfer.inference.sparse.pseudo_points.whitened_cross`): no N x M array travels, only
``O(M^2)`` per partition and sweep. A partition is a dask actor (``_PartitionActor``) on its
worker: the client calls it directly, one round trip per sweep (a task graph would add several
scheduler hops per sweep). The sites ``(tau_p, nu_p)`` stay on the workers (with a copy of the best
sweep's) and are gathered once at the end. QP's sigma* table is opened once per worker process
(``_WORKER_TABLES``, keyed by the table's path), not shipped with every call.

The result equals the in-process :func:`~qpinfer.inference.sparse.sites.run_sparse_pep` (parallel
schedule) to round-off: the same arithmetic, with only the order of the sums over sites changed.

``dask`` and ``distributed`` are imported inside the functions that need them (``pip install
quantile-propagation[dask]``); ``import qpinfer`` never imports them.
"""

from __future__ import annotations

import copy
import functools
import pickle
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from qpinfer.inference.projections import QuantileMatching
from qpinfer.inference.site_loop import SweepControl, SweepSettings, initial_sites
from qpinfer.inference.site_update import resolve_floor
from qpinfer.inference.sparse.dask_partitions import (
    check_data,
    check_partition,
    client_for,
    place_partitions,
)
from qpinfer.inference.sparse.pseudo_points import (
    LowRankPosterior,
    inducing_factor,
    low_rank_factor,
    low_rank_marginals,
    site_sums,
    whitened_cross,
)
from qpinfer.inference.sparse.sites import SparsePEPResult, _PseudoPointSites
from qpinfer.inference.sweeps import parallel_sweep
from qpinfer.malloc import tune_malloc

__all__ = ["run_sparse_pep_dask"]

#: sigma* tables opened in this (worker) process, keyed by (type, path, how it reopens): each
#: opened once per process
_WORKER_TABLES: dict[tuple, Any] = {}


# -- the projection, shipped without its table ---------------------------------------------------
class _ProjectionSpec:
    """A projection to rebuild on a worker, its tables sent as paths: QP's sigma* table
    (:class:`QuantileMatching`'s ``table``) and the table serving the likelihood's EP moments
    (:meth:`qpinfer.Likelihood.with_moment_table`) are taken out of the copy that travels,
    each pickled by its own ``__reduce__`` (its path), and opened once per worker process into
    ``_WORKER_TABLES``."""

    def __init__(self, projection: Any) -> None:
        self.projection = projection = copy.copy(projection)
        self.table = self.moment_table = None
        if isinstance(projection, QuantileMatching) and projection.table is not None:
            self.table = _TableRef(projection.table)
            projection.table = None
        moments = projection.likelihood._moment_table
        if moments is not None:
            self.moment_table = _TableRef(moments)
            projection.likelihood = projection.likelihood.with_moment_table(None)

    def build(self) -> Any:
        proj = copy.copy(self.projection)
        if self.moment_table is not None:
            proj.likelihood = proj.likelihood.with_moment_table(self.moment_table.open())
        if self.table is not None:
            proj.table = self.table.open()
        return proj


class _TableRef:
    """A table as its pickle (a path) and the key of its copy in ``_WORKER_TABLES``."""

    def __init__(self, table: Any) -> None:
        self.pickle = pickle.dumps(table)
        self.key = (type(table).__name__, str(table.path), self.pickle)

    def open(self) -> Any:
        """The table, opened in this process at its first use."""
        table = _WORKER_TABLES.get(self.key)
        if table is None:
            table = _WORKER_TABLES[self.key] = pickle.loads(self.pickle)  # noqa: S301
        return table


# -- what a worker holds and does ------------------------------------------------------------------
@dataclass
class _Marginals:
    """The marginals of one partition's site variables under the broadcast posterior: what
    ``parallel_sweep()`` reads from ``refresh`` (``mean``, ``var``),
    and :func:`~qpinfer.inference.power_ep.power_ep_log_evidence` (the global ``log det B`` term is
    added on the client, so it is 0 here)."""

    mean: np.ndarray
    var: np.ndarray

    def half_logdet_B(self) -> float:
        return 0.0


class _BroadcastPosterior:
    """The representation ``parallel_sweep()`` refreshes on a
    worker: the posterior of the current sites was reduced on the client (``L``, ``mean_v``);
    ``refresh`` returns its marginals on this partition."""

    def __init__(self, A: np.ndarray, L: np.ndarray, mean_v: np.ndarray) -> None:
        self.marginals = _Marginals(*low_rank_marginals(A, L, mean_v))

    def refresh(self, tau: np.ndarray, nu: np.ndarray) -> _Marginals:
        return self.marginals


class _PartitionActor:
    """One data partition on its worker (a dask actor: the client calls it directly, one round
    trip per sweep): ``A_p``, the site update, the current sites and a copy of the best ones."""

    def __init__(self, X, y, rows, kernel, Z, Lu, spec, tau, nu) -> None:
        tune_malloc()  # keep the sweep's temporaries mapped between sweeps (qpinfer.malloc)
        X = check_partition(X, rows)
        self.A, h = whitened_cross(Lu, kernel(Z, X), kernel.diag(X))
        self.sites = _PseudoPointSites(spec.build(), h, np.asarray(y))
        self.tau, self.nu = tau, nu
        self.best = (tau, nu)

    def sums(self) -> tuple[np.ndarray, np.ndarray]:
        """``A_p S_p A_p^T`` and ``A_p nu_p`` of the current sites."""
        return site_sums(self.A, self.tau, self.nu)

    def sweep(self, L, mean_v, damping: float, floor, keep_as_best: bool) -> tuple:
        """One damped parallel sweep of the partition's sites under the broadcast posterior
        (first saving the current sites as the best if ``keep_as_best``); returns the new
        partial sums, the squared site change, ``n_clipped``, ``n_skipped`` and whether every
        site is finite (if not, no sums)."""
        if keep_as_best:
            self.best = (self.tau, self.nu)
        rep = _BroadcastPosterior(self.A, L, mean_v)
        tau, nu, nc, ns = parallel_sweep(rep, self.sites, self.tau, self.nu, damping, floor)
        diff = np.concatenate((tau - self.tau, nu - self.nu))
        self.tau, self.nu = tau, nu
        if not (np.all(np.isfinite(tau)) and np.all(np.isfinite(nu))):
            return None, None, 0.0, nc, ns, False
        return *self.sums(), float(diff @ diff), nc, ns, True

    def use(self, which: str) -> tuple[np.ndarray, np.ndarray]:
        """Make the ``"current"``, ``"best"`` or ``"zero"`` (prior) sites current; their sums."""
        if which == "best":
            self.tau, self.nu = self.best
        elif which == "zero":
            self.tau, self.nu = np.zeros_like(self.tau), np.zeros_like(self.nu)
        return self.sums()

    def final(self, L, mean_v, compute_evidence: bool) -> tuple:
        """Sites, marginals, this partition's part of the evidence (eq. (110) without the
        ``log det B`` term) and cavities, under the broadcast posterior."""
        marg = _BroadcastPosterior(self.A, L, mean_v).marginals
        n = self.tau.size
        log_z, cav_mean, cav_var = 0.0, np.full(n, np.nan), np.full(n, np.nan)
        if compute_evidence:
            log_z, cav_mean, cav_var = self.sites.log_evidence(marg, self.tau, self.nu)
        return self.tau, self.nu, marg.mean, marg.var, log_z, cav_mean, cav_var


def run_sparse_pep_dask(
    kernel: Any,
    X: Any,
    y: Any,
    Z: Any,
    projection: Any,
    *,
    scheduler: Any = "local",
    n_partitions: int | None = None,
    partition_sizes: Sequence[int] | None = None,
    jitter: float = 1e-6,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    damping: float | None = None,
    max_iter: int = 1000,
    tol: float = 1e-6,
    compute_evidence: bool = True,
    timeout: float = 600.0,
) -> tuple[SparsePEPResult, np.ndarray]:
    """Pseudo-point Power EP / QP, parallel schedule, as a map-reduce over data partitions on
    dask (module docstring). Equals :func:`~qpinfer.inference.sparse.sites.run_sparse_pep` on
    ``pseudo_point_prior(kernel, X, Z, jitter)`` to round-off.

    Parameters
    ----------
    kernel, X, y, Z, jitter:
        The prior (:func:`~qpinfer.inference.sparse.pseudo_points.pseudo_point_prior`): an ARD SE
        kernel, the (N, D) inputs, labels (probit: -1/+1), (M, D) inducing inputs.
    projection:
        As :func:`~qpinfer.inference.sparse.sites.run_sparse_pep` (its table, if any, is opened once
        per worker process from its path).
    scheduler:
        ``"local"``, a scheduler address or a ``distributed.Client``
        (:func:`~qpinfer.inference.sparse.dask_partitions.client_for`).
    n_partitions, partition_sizes:
        The data partitions (contiguous row blocks, dealt to the workers round-robin):
        ``n_partitions`` of near-equal size (default: one per worker) or explicit sizes. With a
        dask array ``X`` its row chunks are the partitions, each computed on its worker (e.g.
        read from a zarr store there, :func:`dask.array.from_zarr`): ``X`` never passes through
        the client (:mod:`qpinfer.inference.sparse.dask_partitions`); ``y`` may be a dask or a numpy
        array.
    init, damping, max_iter, tol, compute_evidence:
        As :func:`~qpinfer.inference.sparse.sites.run_sparse_pep` (damping default 0.5, halved when
        stalled; same stopping rule, same best state, same warning).
    timeout:
        Seconds that one round of calls on the partitions (placing them, a sweep, the final
        gather) may take: a worker that stops answering (hung, paused, cut off) ends the run
        with a ``TimeoutError`` naming the partition and its worker, never an endless wait.

    Returns
    -------
    ``(result, Lu)``: the :class:`~qpinfer.inference.sparse.sites.SparsePEPResult` (sites,
    marginals, posterior, evidence, all gathered on the client) and ``chol(Kuu + jitter I)``
    (predictions).
    """
    X, y, Z = check_data(kernel, X, y, Z)
    if not (isinstance(jitter, int | float) and jitter >= 0):
        raise ValueError(f"jitter must be a non-negative number, got {jitter!r}")
    if not (isinstance(timeout, int | float) and 0 < timeout < float("inf")):
        raise ValueError(f"timeout must be a positive finite number of seconds, got {timeout!r}")
    floor = resolve_floor("auto", projection)  # none (negative sites kept): not log-concave
    settings = SweepSettings.checked("parallel", damping, max_iter, tol, floor, True)
    n = X.shape[0]
    tau0, nu0 = initial_sites(init, n, settings.floor)
    _, Lu, _ = inducing_factor(kernel, Z, jitter)
    spec = _ProjectionSpec(projection)
    with client_for(scheduler) as client, client.as_current():  # the actors bind to it
        parts = place_partitions(client, X, y, n_partitions, partition_sizes, timeout)
        futures = [
            client.submit(
                _PartitionActor,
                *(part.X, part.y, part.rows, kernel, Z, Lu, spec),
                *(tau0[part.rows], nu0[part.rows]),
                workers=[part.worker],
                actor=True,
            )
            for part in parts
        ]
        workers = [part.worker for part in parts]
        actors = _results(futures, "placing the partitions", workers, timeout)
        call = functools.partial(_call, actors, workers=workers, timeout=timeout)
        result = _sweep_to_convergence(call, settings, n, compute_evidence)
    return result, Lu


def _results(futures: list, what: str, workers: list, timeout: float) -> list:
    """The futures' results in order, all within ``timeout`` seconds of the call."""
    end = time.monotonic() + timeout
    out = []
    for i, fut in enumerate(futures):
        try:
            out.append(fut.result(timeout=max(end - time.monotonic(), 1e-3)))
        except TimeoutError:
            raise TimeoutError(
                f"dask sweep: partition {i} on worker {workers[i]} did not answer within "
                f"{timeout:g} s ({what}); the worker is hung, paused or cut off (raise timeout= "
                "if one partition's step really takes longer)"
            ) from None
    return out


def _call(actors: list, method: str, *args, workers: list, timeout: float) -> list:
    """``method(*args)`` on every partition at once; their results in partition order."""
    return _results([getattr(a, method)(*args) for a in actors], method, workers, timeout)


def _factor(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """The reduce: ``L``, ``mean_v`` from the partitions' ``(A_p S_p A_p^T, A_p nu_p, ...)``."""
    return low_rank_factor(sum(p[0] for p in parts), sum(p[1] for p in parts))


def _sweep_to_convergence(call, settings, n, compute_evidence) -> SparsePEPResult:
    """:meth:`~qpinfer.inference.site_loop.SweepControl.run` -- the loop of
    :func:`~qpinfer.inference.site_loop.run_sites` -- over the partitions. A state is the
    partitions' replies (their site sums first); as ``run_sites`` refreshes the posterior at the
    start of a sweep, the sweep factors the sums there. The sites stay on the partitions, which
    copy the current ones as the best (``keep_as_best``) when a sweep starts from the best
    state, and ``held`` is the state whose sites they hold (``None``: not finite)."""
    control = SweepControl(settings)
    held = call("sums")  # the prior or init: B >= I

    def sweep(state: list, damping: float):
        nonlocal held
        L, mean_v = _factor(state)  # LinAlgError (improper) ends the loop
        held = None
        parts = call("sweep", L, mean_v, damping, settings.floor, control.best is state)
        if not all(p[5] for p in parts):
            return None
        held = parts
        rms = float(np.sqrt(sum(p[2] for p in parts) / (2 * n)))
        return parts, rms, sum(p[3] for p in parts), sum(p[4] for p in parts)

    best = control.run(sweep, held, "sparse Power EP (dask)", stacklevel=3)
    which = "zero" if best is None else "current" if best is held else "best"
    L, mean_v = _factor(call("use", which))
    parts = call("final", L, mean_v, compute_evidence)
    tau, nu, mean, var, cav_mean, cav_var = (
        np.concatenate([p[k] for p in parts]) for k in (0, 1, 2, 3, 5, 6)
    )
    post = LowRankPosterior(L=L, mean_v=mean_v, mean=mean, var=var)
    log_z = sum(p[4] for p in parts) - post.half_logdet_B() if compute_evidence else np.nan
    return control.result(SparsePEPResult, tau, nu, post, (log_z, cav_mean, cav_var))


def fit_on_scheduler(
    est: Any, kernel: Any, X, y, Z, projection, init=None
) -> tuple[SparsePEPResult, Any]:
    """The ``fit`` of a sparse estimator (:class:`qpinfer.SparseGPClassifier`,
    :class:`qpinfer.SparseGPPoissonRegressor`, :class:`qpinfer.SparseGPStudentTRegressor`) with
    ``scheduler`` set: the sites at the estimator's fixed kernel and inducing inputs by
    :func:`run_sparse_pep_dask` (from the sites ``init``, ``None``: zero)."""
    if est.optimizer is not None:
        raise ValueError(
            f"scheduler={est.scheduler!r} fits at fixed hyperparameters: optimizer must be None, "
            f"got {est.optimizer!r}"
        )
    if est.schedule != "parallel":
        raise ValueError(
            f"scheduler={est.scheduler!r} runs the parallel schedule: schedule must be "
            f"'parallel', got {est.schedule!r}"
        )
    return run_sparse_pep_dask(
        kernel,
        X,
        y,
        Z,
        projection,
        scheduler=est.scheduler,
        jitter=est.jitter,
        init=init,
        damping=est.damping,
        max_iter=int(est.max_iter),
        tol=float(est.tol),
    )

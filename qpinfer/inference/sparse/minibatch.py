"""Epochs of minibatch pseudo-point EP / QP (:mod:`qpinfer.inference.sparse.stochastic`): batches
streamed from memory, a dask array, or a dask cluster's workers, with Adam on the hyperparameters
and inducing inputs, a progress bar and early stopping on held-out batches.

The rows are cut into consecutive batches of ``batch_size`` (data on disk should be stored in a
random order, as the benchmark's zarr stores are; every epoch visits the batches in a seeded
random order). A seeded ``validation_fraction`` of the batches is held out: after every epoch
their negative log predictive probability (NTLL) is measured and the fit stops when it has not
improved by ``tol`` for ``n_iter_no_change`` epochs, returning the best epoch's state. Each
batch is computed as ``batch_parts`` consecutive parts (:class:`LocalRunner`: one after another
in this process; :class:`DaskRunner`: one dask task each, on the workers, e.g. reading a zarr
store there) whose statistics are added in the same order: the same fit, bit for bit, either
way. Memory: O(batch_size x M + M^2) besides the data's own; a dask array is read batch by batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import log_ndtr

from qpinfer.inference.sparse.pseudo_points import inducing_factor, whitened_cross
from qpinfer.inference.sparse.stochastic import (
    BatchStats,
    Cavity,
    TiedSite,
    average_site_step,
    batch_statistics,
    cavity_of,
    posterior_of,
    tied_energy,
)

__all__ = [
    "DaskRunner",
    "LocalRunner",
    "MinibatchResult",
    "MinibatchSettings",
    "classes_of",
    "fit_minibatch",
]


@dataclass
class MinibatchSettings:
    """The knobs of :func:`fit_minibatch`, set and checked by the estimator (its parameters of
    the same names, where their defaults are: :class:`qpinfer.MiniBatchSparseGPClassifier`;
    ``optimize_kernel``: its ``optimizer`` is not ``None``; ``seed``: from its
    ``random_state``)."""

    batch_size: int
    batch_parts: int
    max_epochs: int
    learning_rate: float
    validation_fraction: float
    n_iter_no_change: int
    tol: float
    optimize_kernel: bool
    optimize_inducing: bool
    jitter: float
    seed: int
    verbose: bool
    #: the last epoch's learning rate as a fraction of the first's (geometric decay in between)
    final_lr_ratio: float = 0.1


@dataclass
class MinibatchResult:
    """The fitted state and its trail: per epoch the mean tied-site energy per row over the
    epoch's steps (``energy``) and the held-out NTLL (``validation_ntll``, empty without a
    held-out part); ``skipped``: site updates that failed (no finite, proper site) and were left
    out of their batch's mean."""

    kernel: Any
    Z: np.ndarray
    site: TiedSite
    n_train: int
    posterior: Cavity
    Lu: np.ndarray
    epochs: int
    best_epoch: int
    energy: list = field(default_factory=list)
    validation_ntll: list = field(default_factory=list)
    skipped: int = 0


# -- where a batch's parts are computed -------------------------------------------------------------
def _part_stats(X, y, classes, spec, kernel, Z, jitter, cavity, gradient, start) -> BatchStats:
    """One part of a batch: rows checked, labels mapped to -1/+1, statistics."""
    X, y = _checked_part(X, y, classes, start)
    return batch_statistics(kernel, Z, jitter, cavity, spec.build(), X, y, gradient)


def _part_ntll(X, y, classes, kernel, Z, jitter, post, start) -> tuple[float, int]:
    """``(sum -log p(y_n | x_n), rows)`` of held-out rows under the posterior ``post``."""
    X, y = _checked_part(X, y, classes, start)
    _, Lu, _ = inducing_factor(kernel, Z, jitter)
    A, h = whitened_cross(Lu, kernel(Z, X), kernel.diag(X))
    V = post.Linv.T @ (post.Linv @ A)  # S_q A
    var = h + np.einsum("mn,mn->n", A, V)
    mean = post.mean @ A
    z = y * mean / np.sqrt(1.0 + var)
    return float(-np.sum(log_ndtr(z))), int(y.size)


def _checked_part(X: Any, y: Any, classes: np.ndarray, start: int) -> tuple[np.ndarray, ...]:
    """The rows of a part from ``start``: ``X`` finite float64, ``y`` as -1/+1; ``ValueError``
    naming the first bad row otherwise."""
    from qpinfer.inference.sparse.dask_partitions import check_partition

    return check_partition(X, slice(start, None)), _labels(y, classes, start)


def _labels(y: Any, classes: np.ndarray, start: int) -> np.ndarray:
    """``y`` as -1/+1 (``classes[1]`` is +1); ``ValueError`` naming the first other label."""
    y = np.asarray(y)
    pos, neg = y == classes[1], y == classes[0]
    if not np.all(pos | neg):
        bad = int(np.flatnonzero(~(pos | neg))[0])
        raise ValueError(
            f"y must hold only the classes {classes.tolist()} seen when the fit started; row "
            f"{start + bad} holds {y[bad]!r}"
        )
    return np.where(pos, 1.0, -1.0)


def classes_of(y: Any) -> np.ndarray:
    """The sorted distinct labels of ``y``; a dask ``y`` is reduced chunk by chunk by dask
    (never gathered whole)."""
    from qpinfer.inference.sparse.dask_partitions import is_dask_array

    if is_dask_array(y):
        import dask.array as da

        return np.asarray(da.unique(y).compute())
    return np.unique(np.asarray(y))


class LocalRunner:
    """Batches computed in this process; a dask ``X``/``y`` is read part by part."""

    def __init__(self, X: Any, y: Any) -> None:
        self.X, self.y = X, y

    def map(self, fn, slices: list[slice], *args) -> list:
        return [fn(np.asarray(self.X[s]), np.asarray(self.y[s]), *args, s.start) for s in slices]


class DaskRunner:
    """Batches computed on a dask cluster: each part one task, its rows sliced from a dask
    array there (a numpy ``X`` is put on the workers once, in parts of the batch's size)."""

    def __init__(self, client: Any, X: Any, y: Any, part_rows: int) -> None:
        import dask.array as da

        from qpinfer.inference.sparse.dask_partitions import is_dask_array

        self.client = client
        if not is_dask_array(X):
            X = client.persist(da.from_array(np.asarray(X), chunks=(part_rows, -1)))
        if not is_dask_array(y):
            y = client.persist(da.from_array(np.asarray(y), chunks=part_rows))
        self.X, self.y = X, y

    def map(self, fn, slices: list[slice], *args) -> list:
        import dask

        tasks = [dask.delayed(fn)(self.X[s], self.y[s], *args, s.start) for s in slices]
        return list(self.client.compute(tasks, sync=True))


# -- the epochs -------------------------------------------------------------------------------------
class _Adam:
    """Adam (Kingma and Ba 2015) ascending the energy, on one packed vector."""

    def __init__(self, x: np.ndarray, lr: float) -> None:
        self.x, self.lr = x.copy(), lr
        self.m, self.v, self.t = np.zeros_like(x), np.zeros_like(x), 0

    def step(self, g: np.ndarray) -> np.ndarray:
        self.t += 1
        self.m = 0.9 * self.m + 0.1 * g
        self.v = 0.999 * self.v + 0.001 * g * g
        m_hat = self.m / (1.0 - 0.9**self.t)
        v_hat = self.v / (1.0 - 0.999**self.t)
        self.x = self.x + self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)
        return self.x


def _batches(n: int, s: MinibatchSettings, rng: np.random.Generator) -> tuple[list, list]:
    """Training and held-out batches (row slices)."""
    bounds = [slice(a, min(a + s.batch_size, n)) for a in range(0, n, s.batch_size)]
    n_val = int(round(s.validation_fraction * len(bounds)))
    if s.validation_fraction > 0 and len(bounds) >= 2:
        n_val = min(max(n_val, 1), len(bounds) - 1)
    else:
        n_val = 0
    held = set(rng.choice(len(bounds), size=n_val, replace=False).tolist()) if n_val else set()
    train = [b for i, b in enumerate(bounds) if i not in held]
    return train, [b for i, b in enumerate(bounds) if i in held]


def _parts(b: slice, k: int) -> list[slice]:
    """``b`` as ``k`` consecutive near-equal parts (fewer if it has fewer rows)."""
    edges = np.linspace(b.start, b.stop, min(k, b.stop - b.start) + 1).round().astype(int)
    return [slice(int(a), int(c)) for a, c in zip(edges[:-1], edges[1:], strict=True)]


def _progress(total: int, epoch: int, verbose: bool):
    """A tqdm bar over an epoch's batches, or ``None``."""
    if not verbose:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError as e:
        raise ImportError("verbose=True draws its progress bar with tqdm: pip install tqdm") from e

    return tqdm(total=total, desc=f"epoch {epoch + 1}", unit="batch", leave=True)


def fit_minibatch(
    kernel: Any,
    Z: np.ndarray,
    classes: np.ndarray,
    n_rows: int,
    projection: Any,
    runner: Any,
    s: MinibatchSettings,
) -> MinibatchResult:
    """Minibatch pseudo-point EP/QP over the rows ``[0, n_rows)`` of ``runner``'s data."""
    from qpinfer.inference.sparse.dask_sweep import _ProjectionSpec

    rng = np.random.default_rng(s.seed)
    train, held = _batches(n_rows, s, rng)
    n = sum(b.stop - b.start for b in train)
    power = float(getattr(projection, "power", 1.0))
    spec = _ProjectionSpec(projection)
    n_theta = kernel.theta.size
    adam = _Adam(np.concatenate([kernel.theta, Z.ravel()]), s.learning_rate)
    site = TiedSite.zero(Z.shape[0])
    step, best, stall = 0, (math.inf, None), 0
    energies, ntlls, skipped, epoch = [], [], 0, 0
    for epoch in range(s.max_epochs):
        bar, total = _progress(len(train), epoch, s.verbose), 0.0
        adam.lr = s.learning_rate * s.final_lr_ratio ** (epoch / max(s.max_epochs - 1, 1))
        for k, i in enumerate(rng.permutation(len(train))):
            cav = cavity_of(site, n, power)
            args = (classes, spec, kernel, Z, s.jitter, cav, s.optimize_kernel)
            parts = runner.map(_part_stats, _parts(train[i], s.batch_parts), *args)
            stats = parts[0]
            for p in parts[1:]:  # in order: the same sum wherever the parts ran
                stats = stats + p
            skipped += stats.skipped
            total += tied_energy(site, n, power, cav, stats) / n
            site = average_site_step(site, stats, max(stats.rows / n, 1.0 / (step + 1)))
            step += 1
            if s.optimize_kernel:
                g_Z = stats.grad_Z.ravel() if s.optimize_inducing else np.zeros(Z.size)
                x = adam.step(np.concatenate([stats.grad_theta, g_Z]) * (n / stats.rows))
                kernel = kernel.with_theta(x[:n_theta])
                Z = x[n_theta:].reshape(Z.shape)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(energy=f"{total / (k + 1):.5g}")
        energies.append(total / len(train))
        state = (kernel, Z.copy(), site, epoch)
        if held:
            post = posterior_of(site, n)
            out = runner.map(_part_ntll, held, classes, kernel, Z, s.jitter, post)
            ntll = sum(o[0] for o in out) / sum(o[1] for o in out)
            ntlls.append(ntll)
            if bar is not None:
                bar.set_postfix(energy=f"{energies[-1]:.5g}", held_out_ntll=f"{ntll:.5g}")
            if ntll < best[0] - s.tol:
                best, stall = (ntll, state), 0
            else:
                stall += 1
        else:
            best = (math.inf, state)
        if bar is not None:
            bar.close()
        if held and stall >= s.n_iter_no_change:
            break
    # no finite held-out NTLL at all (a diverged fit): the last state, as without a held-out part
    kernel, Z, site, best_epoch = best[1] if best[1] is not None else state
    _, Lu, _ = inducing_factor(kernel, Z, s.jitter)
    return MinibatchResult(
        kernel=kernel,
        Z=Z,
        site=site,
        n_train=n,
        posterior=posterior_of(site, n),
        Lu=Lu,
        epochs=epoch + 1,
        best_epoch=best_epoch + 1,
        energy=energies,
        validation_ntll=ntlls,
        skipped=skipped,
    )

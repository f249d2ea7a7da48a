"""Epochs of minibatch pseudo-point EP / QP (:mod:`qpinfer.inference.sparse.stochastic`): batches
streamed from memory, a dask array, or a dask cluster's workers, with Adam on the hyperparameters
and inducing inputs, a progress bar and early stopping on held-out rows.

Held out (``_batches``): ``round(validation_fraction x N)`` rows (at least one when the
fraction is positive and N >= 2), one contiguous range at a seeded random multiple of
``batch_size`` (at the end when the rows after it would make less than half a batch); so the
sites are always fitted on ``1 - validation_fraction`` of the rows, whatever ``batch_size``.
After every epoch their negative log predictive probability (NTLL) is measured, in pieces of at
most ``batch_size`` rows, and the fit stops when it has not improved by ``tol`` for
``n_iter_no_change`` epochs, returning the best epoch's state.

The other rows are cut into batches on the grid of multiples of ``batch_size`` (so a batch reads
the storage chunks a chunking by ``batch_size`` gives; data on disk should be stored in a random
order, as the benchmark's zarr stores are; every epoch visits the batches in a seeded random
order); a piece shorter than half a batch at either end of a contiguous run joins its
neighbour, so no step is taken on a handful of rows (a batch has fewer than 1.5 ``batch_size``
rows). Each batch is computed as ``batch_parts`` consecutive parts (:class:`LocalRunner`: one
after another in this process; :class:`DaskRunner`: one dask task each, on the workers, e.g.
reading a zarr store there) whose statistics are added in the same order: the same fit, bit for
bit, either way. Memory: O(batch_size x M + M^2) besides the data's own; a dask array is read
batch by batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qpinfer.inference.site_update import resolve_floor
from qpinfer.inference.sparse.minibatch_targets import (
    LabelTarget,
    ValueTarget,
    mean_site,
    positive_branch_part,
)
from qpinfer.inference.sparse.pseudo_points import inducing_factor, whitened_cross
from qpinfer.inference.sparse.shipping import Shipped
from qpinfer.inference.sparse.stochastic import (
    BatchStats,
    Cavity,
    TiedSite,
    average_site_step,
    batch_statistics,
    cavity_of,
    posterior_of,
    proper_site_step,
    tied_energy,
)

__all__ = [
    "DaskRunner",
    "LocalRunner",
    "MinibatchResult",
    "MinibatchSettings",
    "LabelTarget",
    "ValueTarget",
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
    held-out part); ``held_out_rows`` and ``held_out_positives``: the held-out rows and how many
    of them hold ``classes[1]``; ``skipped``: site updates that failed (no finite, proper site)
    and were left out of their batch's mean."""

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
    held_out_rows: int = 0
    held_out_positives: int = 0
    #: the learned noise scale (``ValueTarget.scale``), else ``None``
    scale: float | None = None


# -- where a batch's parts are computed -------------------------------------------------------------
def _part_stats(X, y, target, spec, kernel, Z, jitter, cavity, gradient, start) -> BatchStats:
    """One part of a batch: rows checked, targets in the likelihood's form, statistics
    (``target``, ``spec``: :class:`~qpinfer.inference.sparse.shipping.Shipped`)."""
    target = target.get()
    X, y = _checked_part(X, y, target, start)
    projection = spec.get()
    return batch_statistics(
        kernel, Z, jitter, cavity, projection, X, y, gradient, target.learns_scale
    )


def _part_ntll(X, y, target, kernel, Z, jitter, post, start) -> tuple[float, int, int]:
    """``(sum -log p(y_n | x_n), rows, rows holding classes[1])`` of held-out rows under the
    posterior ``post`` (:meth:`LabelTarget.log_density`, :meth:`ValueTarget.log_density`)."""
    target = target.get()
    X, y = _checked_part(X, y, target, start)
    _, Lu, _ = inducing_factor(kernel, Z, jitter)
    A, h = whitened_cross(Lu, kernel(Z, X), kernel.diag(X))
    V = post.Linv.T @ (post.Linv @ A)  # S_q A
    var = h + np.einsum("mn,mn->n", A, V)
    mean = post.mean @ A
    return float(-np.sum(target.log_density(mean, var, y))), int(y.size), target.positives(y)


def _checked_part(X: Any, y: Any, target: Any, start: int) -> tuple[np.ndarray, ...]:
    """The rows of a part from ``start``: ``X`` finite float64, ``y`` in the likelihood's form;
    ``ValueError`` naming the first bad row otherwise."""
    from qpinfer.inference.sparse.dask_partitions import check_partition

    return check_partition(X, slice(start, None)), target.rows(y, start)


def classes_of(y: Any) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct labels of ``y`` and how many rows hold each; a dask ``y`` is reduced
    chunk by chunk by dask (never gathered whole)."""
    from qpinfer.inference.sparse.dask_partitions import is_dask_array

    if is_dask_array(y):
        import dask
        import dask.array as da

        classes, counts = dask.compute(*da.unique(y, return_counts=True))
        return np.asarray(classes), np.asarray(counts)
    return np.unique(np.asarray(y), return_counts=True)


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
    """Training batches and held-out pieces (row slices of ``[0, n)``; the module docstring)."""
    bs = s.batch_size
    n_val = int(round(s.validation_fraction * n))
    n_val = min(max(n_val, 1), n - 1) if s.validation_fraction > 0 and n >= 2 else 0
    if n_val == 0:
        return _grid_pieces(0, n, bs), []
    start = bs * int(rng.integers((n - n_val) // bs + 1))
    if 0 < n - (start + n_val) < bs / 2:  # no short run of training rows after the held part
        start = n - n_val
    stop = start + n_val
    held = [slice(a, min(a + bs, stop)) for a in range(start, stop, bs)]
    return _grid_pieces(0, start, bs) + _grid_pieces(stop, n, bs), held


def _grid_pieces(a: int, b: int, bs: int) -> list[slice]:
    """``[a, b)`` cut at the multiples of ``bs``; an end piece under ``bs / 2`` rows joins its
    neighbour."""
    if b <= a:
        return []
    edges = [a, *range((a // bs + 1) * bs, b, bs), b]
    if len(edges) > 2 and edges[1] - edges[0] < bs / 2:
        del edges[1]
    if len(edges) > 2 and edges[-1] - edges[-2] < bs / 2:
        del edges[-2]
    return [slice(lo, hi) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]


def _parts(b: slice, k: int) -> list[slice]:
    """``b`` as ``k`` consecutive near-equal parts (fewer if it has fewer rows)."""
    edges = np.linspace(b.start, b.stop, min(k, b.stop - b.start) + 1).round().astype(int)
    return [slice(int(a), int(c)) for a, c in zip(edges[:-1], edges[1:], strict=True)]


def _progress(total: int, epoch: int, verbose: bool):
    """A tqdm bar over an epoch's batches, or ``None``."""
    if not verbose:
        return None
    from tqdm.auto import tqdm  # a core dependency, imported by a verbose fit only

    return tqdm(total=total, desc=f"epoch {epoch + 1}", unit="batch", leave=True)


def fit_minibatch(
    kernel: Any,
    Z: np.ndarray,
    target: Any,
    n_rows: int,
    projection: Any,
    runner: Any,
    s: MinibatchSettings,
) -> MinibatchResult:
    """Minibatch pseudo-point EP/QP over the rows ``[0, n_rows)`` of ``runner``'s data, whose
    targets ``target`` reads (:class:`~qpinfer.inference.sparse.minibatch_targets.LabelTarget`, :class:`~qpinfer.inference.sparse.minibatch_targets.ValueTarget`, or the array of two
    classes of a probit's labels; with ``target.learns_scale`` Adam also moves ``log(scale)``,
    after the hyperparameters and the inducing inputs)."""
    if isinstance(target, np.ndarray):
        target = LabelTarget(target)
    rng = np.random.default_rng(s.seed)
    train, held = _batches(n_rows, s, rng)
    n = sum(b.stop - b.start for b in train)
    power = float(getattr(projection, "power", 1.0))
    spec, shipped = Shipped(projection), Shipped(target)
    floored = resolve_floor("auto", projection) is not None  # Lam stays semi-definite
    n_theta = kernel.theta.size
    learn_scale = bool(target.learns_scale) and s.optimize_kernel
    x0 = [kernel.theta, Z.ravel()] + ([np.array([math.log(target.scale)])] if learn_scale else [])
    adam = _Adam(np.concatenate(x0), s.learning_rate)
    site = TiedSite.zero(Z.shape[0])
    if getattr(getattr(target, "likelihood", None), "two_branches", False):
        args = (Shipped(target), kernel, Z, s.jitter)
        site = mean_site(runner.map(positive_branch_part, _parts(train[0], s.batch_parts), *args))
    step, best, stall, held_rows, held_pos = 0, (math.inf, None), 0, 0, 0
    energies, ntlls, skipped, epoch = [], [], 0, 0
    for epoch in range(s.max_epochs):
        bar, total = _progress(len(train), epoch, s.verbose), 0.0
        adam.lr = s.learning_rate * s.final_lr_ratio ** (epoch / max(s.max_epochs - 1, 1))
        for k, i in enumerate(rng.permutation(len(train))):
            cav = cavity_of(site, n, power)
            args = (shipped, spec, kernel, Z, s.jitter, cav, s.optimize_kernel)
            parts = runner.map(_part_stats, _parts(train[i], s.batch_parts), *args)
            stats = parts[0]
            for p in parts[1:]:  # in order: the same sum wherever the parts ran
                stats = stats + p
            skipped += stats.skipped
            total += tied_energy(site, n, power, cav, stats) / n
            rho = max(stats.rows / n, 1.0 / (step + 1))
            site = (
                average_site_step(site, stats, rho)
                if floored
                else proper_site_step(site, stats, rho, n)
            )
            step += 1
            if s.optimize_kernel:
                g_Z = stats.grad_Z.ravel() if s.optimize_inducing else np.zeros(Z.size)
                g = [stats.grad_theta, g_Z] + ([[stats.grad_log_scale]] if learn_scale else [])
                x = adam.step(np.concatenate(g) * (n / stats.rows))
                kernel, Z = _stepped(kernel, x, n_theta, Z.shape, s, epoch, step)
                if learn_scale:
                    lo, hi = target.log_bounds
                    adam.x[-1] = min(max(adam.x[-1], lo), hi)
                    target, projection = target.at_scale(math.exp(adam.x[-1]))
                    spec, shipped = Shipped(projection), Shipped(target)
            _check_site(site, s, epoch, step)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(energy=f"{total / (k + 1):.5g}")
        energies.append(total / len(train))
        state = (kernel, Z.copy(), site, epoch, target)
        if held:
            post = posterior_of(site, n)
            out = runner.map(_part_ntll, held, shipped, kernel, Z, s.jitter, post)
            held_rows, held_pos = sum(o[1] for o in out), sum(o[2] for o in out)
            ntll = sum(o[0] for o in out) / held_rows
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
    kernel, Z, site, best_epoch, target = best[1] if best[1] is not None else state
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
        held_out_rows=held_rows,
        held_out_positives=held_pos,
        scale=target.scale if learn_scale else None,
    )


def _diverged(s: MinibatchSettings, epoch: int, step: int, what: str) -> ValueError:
    return ValueError(
        f"the fit diverged in epoch {epoch + 1}, step {step}: {what}; learning_rate="
        f"{s.learning_rate!r} is likely too large for these data (Adam moves each log "
        f"hyperparameter and inducing input by up to about learning_rate a step): try a "
        f"smaller one, e.g. {s.learning_rate / 10:g}"
    )


def _stepped(kernel, x: np.ndarray, n_theta: int, z_shape, s, epoch: int, step: int):
    """The kernel and inducing inputs after an Adam step to ``x``; ``ValueError`` naming
    ``learning_rate`` when they are not finite."""
    theta, Z = x[:n_theta], x[n_theta : n_theta + math.prod(z_shape)].reshape(z_shape)
    # exp(theta) of a log hyperparameter beyond +-700 is inf or 0 in float64
    if not (np.all(np.abs(theta) < 700.0) and np.all(np.isfinite(Z))):
        raise _diverged(s, epoch, step, "the hyperparameters or inducing inputs are not finite")
    try:
        return kernel.with_theta(theta), Z
    except ValueError as e:  # a kernel that refuses the new hyperparameters
        raise _diverged(s, epoch, step, f"the kernel refused its hyperparameters ({e})") from e


def _check_site(site: TiedSite, s: MinibatchSettings, epoch: int, step: int) -> None:
    """``ValueError`` when the tied site is not finite (naming ``learning_rate`` if Adam moves
    the kernel, else the fixed kernel)."""
    if np.all(np.isfinite(site.prec)) and np.all(np.isfinite(site.shift)):
        return
    if s.optimize_kernel:
        raise _diverged(s, epoch, step, "the tied site is not finite")
    raise ValueError(
        f"the fit diverged in epoch {epoch + 1}, step {step}: the tied site is not finite at "
        "the fixed kernel (optimizer=None); check its variance and length_scale against the "
        "scale of X"
    )

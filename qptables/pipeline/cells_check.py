"""The check of a cells (reduced-coordinate) table against the exact kernel and mpmath: run by
the build before it publishes (:mod:`qptables.pipeline.cells_layout`) and again by
``qptables verify`` on any cells store, shipped ones included
(:func:`~qptables.pipeline.cells_check.verify_cells`).

:func:`check_points` draws ``kernel_points`` random points spread over the boxes (seeded), compares
the interpolant with the exact kernel (:func:`qpinfer.sigma_qp`) there, and compares it with the
mpmath reference (:func:`reference_sigma`) at the first ``samples`` of them (a stratified sample:
the same number per box), fanned out over a dask client or a local process pool
(:func:`qptables.reference.fanout.fan_out`). The draws and the report's keys are the build's, so a
rebuilt store records the same report bit for bit. :func:`verify_cells` adds the store's
integrity record (every file and signed attribute re-hashed, :mod:`qpinfer.tables.reduced_store`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

import qpinfer
from qpinfer.tables.reduced import ReducedTable, open_reduced
from qpinfer.tables.reduced_store import integrity_changes, store_files
from qptables.pipeline.errors import BuildInputError
from qptables.reference.fanout import fan_out

__all__ = [
    "DEFAULT_KERNEL_POINTS",
    "DEFAULT_SAMPLES",
    "TOLERANCE",
    "check_points",
    "moment_errors",
    "reference_sigma",
    "reference_values",
    "verify_cells",
]

#: Largest accepted relative error of a cells table, against the kernel and against mpmath.
TOLERANCE = 1e-12
#: Random points of the check against the exact kernel (spread evenly over the boxes).
DEFAULT_KERNEL_POINTS = 20_000
#: Points of the check against mpmath (a stratified sample of the kernel check's points).
DEFAULT_SAMPLES = 24


def reference_sigma(likelihood: str, mu: float, sigma: float, y: float, dps: int | None) -> float:
    """sigma* by the likelihood's mpmath reference (Student-t: :mod:`qptables.reference.student_t`,
    y real; the others: :func:`qptables.reference.sigma.sigma_qp_reference`, y an integer label),
    at ``dps`` decimal digits (``None``: the reference's own default, 30 for Student-t, 40 else)."""
    return reference_values(likelihood, mu, sigma, y, dps, False)[0]


def reference_values(
    likelihood: str, mu: float, sigma: float, y: float, dps: int | None, moments: bool = True
) -> tuple[float, ...]:
    """``(sigma*, log Z, mean, std)`` by the likelihood's mpmath reference (as
    :func:`reference_sigma`; ``moments=False``: ``(sigma*,)``); the moments come from the same
    panels as sigma*."""
    from qpinfer.likelihoods.student_t import parse_name

    extra = {} if dps is None else {"dps": int(dps)}
    student_t = parse_name(likelihood)
    if student_t is not None:
        from qptables.reference.student_t import student_t_reference

        p = student_t_reference(*student_t, mu, sigma, y, **extra)
    elif not moments:
        from qptables.reference.sigma import sigma_qp_reference

        return (float(sigma_qp_reference(likelihood, mu, sigma, _label(likelihood, y), **extra)),)
    else:
        from qptables.reference.sigma import reference_point

        p = reference_point(likelihood, mu, sigma, _label(likelihood, y), extra.get("dps", 40))
    values = (p.sigma_qp, p.log_z, p.mean, p.std) if moments else (p.sigma_qp,)
    return tuple(float(v) for v in values)


def _label(likelihood: str, y: float):
    """The label the reference takes: an integer class or count, a user likelihood's as it is
    (``"package.module:ClassName"``: any real)."""
    return y if ":" in likelihood.partition("(")[0] else int(y)


def moment_errors(got, want, sigma) -> dict[str, float]:
    """The largest errors of EP's moments ``got = (log Z, mean, std)`` against ``want``: log Z
    absolute (relative where ``|log Z| > 1``), the mean in units of the cavity std beyond the
    mean's own rounding (4 units of its last place: a double holds no more), the variance
    relative."""
    log_z, mean, std = (np.asarray(a, np.float64) for a in got)
    w_log_z, w_mean, w_std = (np.asarray(a, np.float64) for a in want)
    rounding = 4 * np.finfo(np.float64).eps * np.abs(w_mean)
    return {
        "log_z": float(np.max(np.abs(log_z - w_log_z) / np.maximum(1.0, np.abs(w_log_z)))),
        "mean": float(np.max(np.maximum(np.abs(mean - w_mean) - rounding, 0.0) / sigma)),
        "var": float(np.max(np.abs((std / w_std) ** 2 - 1.0))),
    }


def check_points(
    table: ReducedTable,
    likelihood: str,
    *,
    kernel_points: int = DEFAULT_KERNEL_POINTS,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    tolerance: float = TOLERANCE,
    dps: int | None = None,
    client: Any | None = None,
    workers: int | None = None,
    boxes: list[str] | None = None,
) -> dict[str, Any]:
    """The interpolant of ``table`` against the exact kernel at ``kernel_points`` random box points
    and against mpmath at ``samples`` of them (at least one per box); returns the report
    (``passed``, ``tolerance``, ``kernel_points``, ``kernel_max_rel_err``, ``mpmath_points``,
    ``mpmath_max_rel_err``, ``mpmath_boxes``, ``seed``, and ``dps`` when one was given).

    ``client``: a dask client whose workers compute the mpmath points; else ``workers`` local
    processes (``None``: one per CPU, ``1``: inline). ``boxes``: the names of the boxes to check
    (``None``: every box); the points are drawn over the chosen boxes only.

    Raises
    ------
    qptables.pipeline.errors.BuildInputError
        ``boxes`` names a box the table does not have, or is empty (a ``ValueError``).
    """
    rng = np.random.default_rng(seed)
    worst_kernel, n_kernel = 0.0, 0
    strata = []
    moments = table.has_moments
    exact_lik, table_lik = qpinfer.get_likelihood(likelihood), table.likelihood_object
    worst_moments = dict.fromkeys(("log_z", "mean", "var"), 0.0)
    boxes = _chosen_boxes(table, boxes)
    for k, box in enumerate(boxes):  # kernel_points in all, the remainder to the first boxes
        n = max(kernel_points // len(boxes) + (k < kernel_points % len(boxes)), 1)
        coords = [rng.uniform(ax.start, ax.stop, n) for ax in box.axes]
        labels = rng.integers(0, len(box.labels), n)
        mu, sigma = box.cavity(np.asarray(box.labels)[labels], *coords)
        y = np.asarray(box.labels)[labels]
        got = table.sigma_qp(mu, sigma, y)
        exact = qpinfer.sigma_qp(likelihood, mu, sigma, y)
        worst_kernel = max(worst_kernel, float(np.max(np.abs(got / exact - 1.0))))
        if moments:  # at the box's cavities, and at equivalent ones of other labels
            for m, yy in ((mu, y), exact_lik._equivalent_cavities(mu, sigma, y, rng)):
                errs = moment_errors(
                    table_lik.ep_moments(m, sigma, yy), exact_lik.ep_moments(m, sigma, yy), sigma
                )
                worst_moments = {k: max(v, errs[k]) for k, v in worst_moments.items()}
        n_kernel += n
        per = max(samples // len(boxes), 1)
        order = getattr(box, "reference_order", None)  # a box whose mpmath points it chooses
        picks = range(per) if order is None else order(sigma)[:per]
        strata += [(box.name, float(mu[i]), float(sigma[i]), float(y[i])) for i in picks]
    columns = [[p[i] for p in strata] for i in (1, 2, 3)]  # mu, sigma, y
    refs, _ = fan_out(
        reference_values,
        [[likelihood] * len(strata), *columns, [dps] * len(strata), [moments] * len(strata)],
        client=client,
        workers=workers,
    )
    refs = np.array(refs).T
    points = tuple(np.array(c) for c in columns)
    got = table.sigma_qp(*points)
    err = np.abs(got / refs[0] - 1.0)
    report = {
        "passed": bool(worst_kernel <= tolerance and err.max() <= tolerance),
        "tolerance": tolerance,
        "kernel_points": n_kernel,
        "kernel_max_rel_err": worst_kernel,
        "mpmath_points": len(strata),
        "mpmath_max_rel_err": float(err.max()),
        "mpmath_boxes": sorted({p[0] for p in strata}),
        "seed": seed,
    }
    if moments:  # EP's moments beside sigma*: the same points, the same tolerance
        mp_moments = moment_errors(table_lik.ep_moments(*points), refs[1:], points[1])
        report["moments_kernel_max_err"] = worst_moments
        report["moments_mpmath_max_err"] = mp_moments
        report["passed"] = bool(
            report["passed"]
            and max(worst_moments.values()) <= tolerance
            and max(mp_moments.values()) <= tolerance
        )
    if dps is not None:  # absent: each reference's default (what the shipped stores record)
        report["dps"] = int(dps)
    return report


def _chosen_boxes(table: ReducedTable, names: list[str] | None) -> tuple:
    """The boxes of ``table`` named by ``names`` in the table's order (all for ``None``)."""
    if names is None:
        return tuple(table._boxes)
    have = [b.name for b in table._boxes]
    unknown = sorted(set(names) - set(have))
    if unknown or not names:
        raise BuildInputError(
            f"--boxes: expected names of this table's boxes ({', '.join(have)}), "
            f"got {', '.join(unknown) or 'none'}"
        )
    return tuple(b for b in table._boxes if b.name in names)


def verify_cells(
    path: str | Path,
    *,
    kernel_points: int = DEFAULT_KERNEL_POINTS,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    tolerance: float | None = None,
    dps: int | None = None,
    client: Any | None = None,
    workers: int | None = None,
    boxes: list[str] | None = None,
) -> dict[str, Any]:
    """Re-check the cells store at ``path`` (``qptables verify``): its integrity record (every file
    and signed attribute re-hashed), then :func:`check_points` (``tolerance`` ``None``: the one the
    build recorded, else :data:`TOLERANCE`; ``boxes``: the boxes to check, ``None`` for all).
    Nothing is written. The report adds ``integrity``
    (the changes found, ``[]`` if none), ``complete``, ``build_verification`` (the build's
    record) and ``seconds``; ``passed`` needs all of them to hold.

    Raises
    ------
    qpinfer.tables.TableError
        The store cannot be read as a cells store at all (schema, boxes, arrays).
    qptables.pipeline.errors.BuildInputError
        ``boxes`` names a box the store does not have, or is empty (a ``ValueError``).
    """
    t0 = time.perf_counter()
    path = Path(path)
    table = open_reduced(path, finished=False)  # arrays decoded; the finished-store checks below
    attrs = table.attrs
    changes = integrity_changes(attrs, store_files(path))
    recorded = attrs.get("verification") or {}
    if tolerance is None:
        tolerance = float(recorded.get("tolerance", TOLERANCE))
    report = check_points(
        table, attrs["likelihood"], kernel_points=kernel_points, samples=samples, seed=seed,
        tolerance=tolerance, dps=dps, client=client, workers=workers, boxes=boxes,
    )  # fmt: skip
    complete = attrs.get("complete") is True
    report["passed"] = bool(
        report["passed"] and not changes and complete and recorded.get("passed") is True
    )
    report.update(
        integrity=changes,
        complete=complete,
        build_verification=recorded,
        seconds=time.perf_counter() - t0,
    )
    return report

"""Fan independent, slow calls out over a dask cluster or a process pool, with a progress bar.

Used for the mpmath reference points of the verification (:mod:`qptables.reference.verify`): each
point costs ~0.2-1 s of mpmath and they are independent, so ``qptables build`` runs them on the
build's own dask workers and ``qptables verify --scheduler ADDRESS`` on any cluster -- a SLURM
build with a hundred workers can afford thousands of checks (``--samples``). One task per call
(the scheduler's per-task cost, ~1 ms, is negligible next to a second of mpmath), submitted at
once and collected as they finish, so a lost worker's calls are simply re-run elsewhere.

Every call also reports where it ran (``host:pid``), so the verification report can say how
the points were spread over the workers.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import socket
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["fan_out"]


def _tagged(func: Callable, *args: Any) -> tuple[str, Any]:
    """``(host:pid, func(*args))`` -- runs on the worker."""
    return f"{socket.gethostname()}:{os.getpid()}", func(*args)


def fan_out(
    func: Callable,
    arg_lists: Sequence[Sequence[Any]],
    *,
    client: Any | None = None,
    workers: int | None = None,
    progress: bool = False,
    desc: str = "points",
) -> tuple[list[Any], dict[str, int]]:
    """``([func(*args) for args in zip(*arg_lists)], {host:pid: calls})``, in input order.

    On the dask ``client``'s workers if given, else in a pool of ``workers`` spawned processes
    (default: one per CPU; ``1`` runs inline). ``progress`` shows a tqdm bar on stderr that
    advances as calls finish. ``func`` must be importable (a module-level function).
    """
    n = len(arg_lists[0]) if arg_lists else 0
    if n == 0:
        return [], {}
    if any(len(a) != n for a in arg_lists):
        raise ValueError("arg_lists: all argument lists must have the same length")
    if workers is not None and workers < 1:
        raise ValueError(f"--workers: must be a positive integer, got {workers!r}")
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, unit="pt", desc=desc, file=sys.stderr)
    out: list[Any] = [None] * n
    try:
        if client is not None:
            from distributed import as_completed

            futs = client.map(_tagged, [func] * n, *arg_lists, pure=False)
            index = {f.key: i for i, f in enumerate(futs)}
            try:
                for fut in as_completed(futs, loop=client.loop):
                    out[index[fut.key]] = fut.result()  # raises the task's exception
                    if bar is not None:
                        bar.update(1)
            finally:
                client.cancel([f for f in futs if not f.done()])
        else:
            n_proc = workers if workers is not None else (os.cpu_count() or 1)
            if n_proc <= 1:
                for i, args in enumerate(zip(*arg_lists, strict=True)):
                    out[i] = _tagged(func, *args)
                    if bar is not None:
                        bar.update(1)
            else:
                ctx = multiprocessing.get_context("spawn")
                with cf.ProcessPoolExecutor(max_workers=n_proc, mp_context=ctx) as pool:
                    futs = {
                        pool.submit(_tagged, func, *args): i
                        for i, args in enumerate(zip(*arg_lists, strict=True))
                    }
                    for fut in cf.as_completed(futs):
                        out[futs[fut]] = fut.result()
                        if bar is not None:
                            bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    where = Counter(tag for tag, _ in out)
    return [res for _, res in out], dict(sorted(where.items()))

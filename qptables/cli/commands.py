"""The ``qptables`` command line: ``build``, ``verify``, ``info``, ``plot`` and ``publish``.

Exit status: 0 success; 1 the work failed (a task error, a write error such as a full disk --
named with its phase and path --, verification failed: nothing was published, re-running
resumes); 2 refused before doing anything (bad flag value, unknown
likelihood, invalid labels, ``OUT`` exists without ``--force``, ``OUT`` is not a table store with
``--force``, destination not writable, not enough disk space, another build holds the lock;
``publish`` of an incomplete, unverified or corrupt store; a store whose metadata no longer
matches its digest), and any other error (a corrupt store, an I/O error); 130 interrupted
(Ctrl-C), 143 stopped by SIGTERM (a build releases its lock and keeps its finished tiles).
Errors are one line, ``qptables COMMAND: error: ...`` (:mod:`qpinfer.cli_errors`); ``--debug``
shows the traceback instead. A command that needs the ``tables`` extra (dask, distributed,
mpmath, xarray, tqdm) where it is not installed says so in that line, naming the pip command.

Every command takes every store the package writes or ships, of either layout: the grid (the
App. J grid, ``--grid paper``) and the reduced-coordinate cells (``--grid cells``, and the tables
shipped inside qpinfer); ``ship`` is :mod:`qptables.cli.ship`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qpinfer.cli_errors import run_command
from qptables.cli.info import existing_store, format_verification, info_command, is_cells
from qptables.cli.parser import Refused as _Refused
from qptables.cli.parser import parser

__all__ = ["main", "parser"]

#: Top-level modules of the ``tables`` extra (pyproject.toml), named when one is missing.
TABLES_EXTRA_MODULES = ("dask", "distributed", "mpmath", "xarray", "tqdm")
#: The line that says how to install them.
TABLES_EXTRA_HINT = "pip install 'quantile-propagation[tables]'"


class MissingExtra(RuntimeError):
    """A module of an optional extra is not installed (the message names the pip command)."""


def _missing(module: str) -> MissingExtra:
    return MissingExtra(
        f"this command needs the tables extra, and {module!r} is not installed: {TABLES_EXTRA_HINT}"
    )


def _with_extras(handler, needs_extra: bool):
    """``handler`` with a missing module of the ``tables`` extra turned into
    :class:`MissingExtra` (one line, exit 2, no traceback); with ``needs_extra`` the extra's
    dask, distributed and mpmath are looked for (not imported) before anything is done."""

    def run(args: argparse.Namespace) -> int:
        for module in ("dask", "distributed", "mpmath") if needs_extra else ():
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                raise _missing(module)
        try:
            return handler(args)
        except ModuleNotFoundError as exc:
            root = (exc.name or "").split(".")[0]
            if root not in TABLES_EXTRA_MODULES:
                raise
            raise _missing(root) from None

    return run


def _grid_from_args(args: argparse.Namespace) -> Any:
    """The GridSpec of ``build``'s flags: the ``--grid`` preset with ``--mu``,
    ``--log10-sigma`` and ``--y`` replacing its parts."""
    from qptables.grid import PAPER_LOG10_SIGMA, PAPER_MU, GridError, GridSpec, paper_grid

    try:
        if args.y_max is not None and args.likelihood != "poisson_square":
            raise GridError(f"--y-max: only for poisson_square, not {args.likelihood!r}; use --y")
        if args.y is not None:
            if args.y_max is not None:
                raise GridError("--y-max: cannot be combined with --y")
            y = tuple(args.y)
        else:
            y = paper_grid(args.likelihood, args.y_max).y
        return GridSpec(
            tuple(args.mu) if args.mu is not None else PAPER_MU,
            tuple(args.log10_sigma) if args.log10_sigma is not None else PAPER_LOG10_SIGMA,
            y,
            args.tile_mu,
        )
    except GridError as exc:
        raise _Refused(str(exc)) from None


#: ``build`` flags of the grid layout, refused with ``--grid cells`` (its boxes are fixed).
GRID_FLAGS = ("mu", "log10_sigma", "y", "y_max", "tile_mu")


def _layout_from_args(args: argparse.Namespace) -> Any:
    """``build``'s layout: ``"cells"`` (the grid flags refused), else the GridSpec of
    :func:`_grid_from_args`."""
    if args.grid != "cells":
        return _grid_from_args(args)
    for flag in GRID_FLAGS:
        if getattr(args, flag, None) is not None:
            name = "--" + flag.replace("_", "-")
            raise _Refused(
                f"{name}: a flag of the grid layout; --grid cells has fixed boxes "
                f"(docs/development/tables-v2.md)"
            )
    return "cells"


def _cmd_build(args: argparse.Namespace) -> int:
    from qptables.pipeline.build import BuildError, BuildInputError, build

    try:
        import qpinfer

        qpinfer.get_likelihood(args.likelihood)
    except ValueError as exc:
        raise _Refused(f"LIKELIHOOD: unknown likelihood {args.likelihood!r} ({exc})") from None
    if args.eps is not None:
        if args.likelihood != "step_noise":
            raise _Refused(f"--eps: only for the step_noise likelihood, not {args.likelihood!r}")
        from qpinfer.likelihoods.step_noise import StepNoise

        try:
            args.likelihood = StepNoise(args.eps).name
        except ValueError as exc:
            raise _Refused(f"--eps: {exc}") from None
    elif args.likelihood == "step_noise":
        args.likelihood = qpinfer.get_likelihood("step_noise").name
    if args.scheduler and args.workers is not None and not args.dry_run:
        raise _Refused(
            "--workers: sizes the embedded LocalCluster, not the cluster of --scheduler (with "
            "--dry-run it is the estimate's worker count)"
        )
    grid = _layout_from_args(args)
    tol = args.tolerance  # its range, and the other options', checked by build() before any work
    try:
        result = build(
            args.likelihood, args.out, grid, scheduler=args.scheduler, workers=args.workers,
            force=args.force, **({} if args.samples is None else {"samples": args.samples}),
            tolerance=tol, seed=args.seed, verify_dps=args.verify_dps,
            progress=not args.no_progress, dry_run=args.dry_run,
        )  # fmt: skip
    except BuildInputError as exc:
        raise _Refused(str(exc)) from None
    except BuildError as exc:
        print(f"qptables build: error: {exc}", file=sys.stderr)
        return 1
    result_json = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(result).items()}
    if args.dry_run:
        if args.json:
            print(json.dumps({"dry_run": True, **result_json}, default=str))
        return 0
    print(
        f"done: {result.path} -- computed {result.tiles_computed} tiles, reused "
        f"{result.tiles_reused} (of {result.tiles_total}); {result.points_computed:,} kernel "
        f"points, {result.rows_mirrored} mirrored rows; {result.seconds:.1f} s",
        file=sys.stderr,
    )
    if args.json:
        print(json.dumps(result_json, default=str))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from qpinfer.tables import TableError
    from qptables.pipeline.errors import BuildInputError
    from qptables.pipeline.plan import check_options
    from qptables.pipeline.verify import verify

    path = existing_store(args.out)
    if args.scheduler and args.workers is not None:
        raise _Refused("--workers: the local processes' count, not with --scheduler")
    try:  # before connecting to a scheduler (verify() checks them again)
        check_options(
            samples=args.samples, tolerance=args.tolerance, seed=args.seed,
            verify_dps=args.verify_dps, workers=args.workers, kernel_points=args.kernel_points,
        )  # fmt: skip
    except BuildInputError as exc:
        raise _Refused(str(exc)) from None
    kwargs = {
        "samples": args.samples, "tolerance": args.tolerance, "seed": args.seed,
        "dps": args.verify_dps, "workers": args.workers, "write": not args.no_write,
        "kernel_points": args.kernel_points, "boxes": args.boxes,
    }  # fmt: skip
    try:
        with contextlib.ExitStack() as stack:
            if args.scheduler:
                from qptables.pipeline.dask_run import connect_scheduler

                # within a deadline, handshake included (a non-dask server never hangs it)
                kwargs["client"] = stack.enter_context(connect_scheduler(args.scheduler))
            report = verify(path, **kwargs)
    except TableError as exc:
        raise _Refused(f"OUT: {exc}") from None
    except BuildInputError as exc:  # a scheduler that does not answer; a flag of the other layout
        raise _Refused(str(exc)) from None
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    print(format_verification(report), file=sys.stderr)
    return 0 if report["passed"] else 1


def _check_output(output: str) -> None:
    """``plot``'s ``--output``: a file in an existing, writable directory, of a format matplotlib
    writes (the extension; when matplotlib is installed) -- checked before anything is drawn."""
    out = Path(output)
    parent = out.parent
    if out.is_dir():
        raise _Refused(f"--output: {out} is a directory; expected FILE.png")
    if not parent.is_dir():
        raise _Refused(f"--output: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise _Refused(f"--output: the directory {parent} is not writable")
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return  # the plot says which extra to install
    kinds = FigureCanvasBase.get_supported_filetypes()
    if out.suffix.lstrip(".").lower() not in kinds:
        raise _Refused(
            f"--output: {out.name!r} has no image extension matplotlib writes; expected FILE.png "
            f"(or one of {', '.join('.' + k for k in sorted(kinds))})"
        )


def _cmd_plot(args: argparse.Namespace) -> int:
    from qptables.cli.plot import plot_table

    path = existing_store(args.out)
    _check_output(args.output)
    try:
        if is_cells(path):
            from qptables.cli.plot import plot_reduced

            out = plot_reduced(
                path, args.y, args.output, var=args.var, mu=args.mu, log10_sigma=args.log10_sigma
            )
        else:
            for flag, value in (("--mu", args.mu), ("--log10-sigma", args.log10_sigma)):
                if value is not None:
                    raise _Refused(f"{flag}: only for cells stores; {path} is drawn over its grid")
            out = plot_table(path, args.y, args.output, var=args.var)
    except ValueError as exc:
        raise _Refused(str(exc)) from None
    except ImportError as exc:
        print(f"qptables plot: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _cmd_publish(args: argparse.Namespace) -> int:
    from qptables.pipeline.publish import PublishError, publish
    from qptables.units import human_bytes as _human_bytes

    path = existing_store(args.out)
    try:
        entry = publish(path, args.to, name=args.name, manifest=args.manifest)
    except PublishError as exc:
        raise _Refused(str(exc)) from None
    manifest = args.manifest or str(Path(args.to) / "manifest.json")
    v = entry["verification"]
    if "boxes" in entry:  # a cells store
        what = f"cells, boxes {', '.join(entry['boxes'])}"
        checked = f"{v['kernel_points']} kernel and {v['points']} mpmath points"
    else:
        what, checked = f"shape {entry['shape']}", f"{v.get('points')} mpmath points"
    print(
        f"published {entry['name']}: {Path(args.to) / entry['file']} "
        f"({_human_bytes(entry['size'])}, store {_human_bytes(entry['store_bytes'])}), sha256 "
        f"{entry['sha256']}\n  {entry['likelihood']}, {what}; verified {checked}, max rel error "
        f"{v.get('max_rel_error', 0):.2e}\n  manifest: {manifest}",
        file=sys.stderr,
    )
    if args.json:
        print(json.dumps(entry, indent=2))
    return 0


def _ship(args: argparse.Namespace) -> int:
    from qptables.cli.ship import ship

    return ship(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``qptables`` command; returns the exit status."""
    p = parser()
    args = p.parse_args(argv)
    handler = {
        "build": _cmd_build,
        "verify": _cmd_verify,
        "info": info_command,
        "plot": _cmd_plot,
        "publish": _cmd_publish,
        "ship": _ship,
    }[args.command]
    try:
        needs_extra = args.command in ("build", "verify", "ship")  # dask runs, mpmath checks
        return run_command("qptables", args.command, _with_extras(handler, needs_extra), args)
    except KeyboardInterrupt as exc:
        from qptables.pipeline.errors import BuildInterrupted

        if isinstance(
            exc, BuildInterrupted
        ):  # SIGTERM or Ctrl-C, cleaned up (qptables.pipeline.interrupt)
            print(f"qptables {args.command}: {exc}", file=sys.stderr)
            return 128 + exc.signum
        print(
            f"qptables {args.command}: interrupted; an unfinished build is kept and resumes "
            f"when the same command is run again",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())

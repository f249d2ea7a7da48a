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
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qpinfer.cli_errors import run_command
from qptables.cli.parser import Refused as _Refused
from qptables.cli.parser import parser

__all__ = ["main", "parser"]


def _grid_from_args(args: argparse.Namespace) -> Any:
    """The GridSpec of ``build``'s flags: the ``--grid`` preset with ``--mu``,
    ``--log10-sigma`` and ``--y`` replacing its parts."""
    from qptables.grid import PAPER_LOG10_SIGMA, PAPER_MU, GridError, GridSpec, paper_grid

    try:
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


def _cmd_build(args: argparse.Namespace) -> int:
    from qptables.pipeline.paper import BuildError, BuildInputError, build
    from qptables.reference.verify import DEFAULT_SAMPLES, DEFAULT_TOLERANCE

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
    if args.grid == "v2":
        from qptables.cli.v2 import build_v2_command

        return build_v2_command(args)
    grid = _grid_from_args(args)
    tol = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    if not (math.isfinite(tol) and tol > 0):
        raise _Refused(f"--tolerance: must be a positive number, got {tol!r}")
    try:
        result = build(
            args.likelihood,
            args.out,
            grid,
            scheduler=args.scheduler,
            workers=args.workers,
            force=args.force,
            samples=DEFAULT_SAMPLES if args.samples is None else args.samples,
            tolerance=tol,
            seed=args.seed,
            verify_dps=args.verify_dps,
            progress=not args.no_progress,
            dry_run=args.dry_run,
        )
    except BuildInputError as exc:
        raise _Refused(str(exc)) from None
    except BuildError as exc:
        print(f"qptables build: error: {exc}", file=sys.stderr)
        return 1
    if args.dry_run:
        return 0
    print(
        f"done: {result.path} -- computed {result.tiles_computed} tiles, reused "
        f"{result.tiles_reused} (of {result.tiles_total}); {result.points_computed:,} kernel "
        f"points, {result.rows_mirrored} mirrored rows; {result.seconds:.1f} s",
        file=sys.stderr,
    )
    if args.json:
        d = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(result).items()}
        print(json.dumps(d, default=str))
    return 0


def _existing_store(path: str) -> Path:
    p = Path(path)
    if not (p / "zarr.json").is_file():
        hint = ""
        partial = p.with_name(p.name + ".partial")
        if partial.exists():
            hint = f" (an unfinished build is in {partial}; re-run qptables build to finish it)"
        raise _Refused(f"OUT: {p} is not a table store{hint}")
    return p


def _cmd_verify(args: argparse.Namespace) -> int:
    from qptables.reference.verify import DEFAULT_SAMPLES, DEFAULT_TOLERANCE, verify

    path = _existing_store(args.out)
    tol = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    if not (math.isfinite(tol) and tol > 0):
        raise _Refused(f"--tolerance: must be a positive number, got {tol!r}")
    if args.verify_dps < 15:
        raise _Refused(f"--verify-dps: must be >= 15, got {args.verify_dps}")
    kwargs = {
        "samples": DEFAULT_SAMPLES if args.samples is None else args.samples,
        "tolerance": tol,
        "seed": args.seed,
        "dps": args.verify_dps,
        "workers": args.workers,
        "write": not args.no_write,
    }
    if args.scheduler:
        from qptables.pipeline.dask_run import connect_scheduler
        from qptables.pipeline.errors import BuildInputError

        try:  # within a deadline, handshake included (a non-dask server never hangs it)
            client = connect_scheduler(args.scheduler)
        except BuildInputError as exc:
            raise _Refused(str(exc)) from None
        with client:
            report = verify(path, client=client, **kwargs)
    else:
        report = verify(path, **kwargs)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    print(_format_verification(report), file=sys.stderr)
    return 0 if report["passed"] else 1


def _format_verification(v: dict[str, Any]) -> str:
    if not v:
        return "verification: none recorded"
    lines = [
        (
            f"verification: {'PASSED' if v.get('passed') else 'FAILED'}"
            f" ({v.get('checked', '?')}, {v.get('seconds', 0):.1f} s)"
        ),
        (
            f"  mpmath points: {v.get('points')} (corners, edge midpoints and "
            f"{v.get('random_points')} random; seed {v.get('seed')})"
        ),
        (
            f"  relative error: max {v.get('max_rel_error', float('nan')):.3g}, median "
            f"{v.get('median_rel_error', float('nan')):.3g}, tolerance {v.get('tolerance')}"
        ),
    ]
    if v.get("worst"):
        w = v["worst"]
        lines.append(
            f"  worst point: y={w['y']} mu={w['mu']:g} log10_sigma={w['log10_sigma']:g} "
            f"table={w['table']!r} reference={w['reference']!r}"
        )
    scan = v.get("scan") or {}
    if scan:
        ranges = ", ".join(
            f"{k} in [{a:.6g}, {b:.6g}]" for k, (a, b) in scan.get("ranges", {}).items()
        )
        lines.append(
            f"  full scan: {scan.get('message')}; {ranges}; checksums "
            f"{'checked' if scan.get('checksums_checked') else 'recorded'}"
        )
    return "\n".join(lines)


def _du(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += (Path(dirpath) / f).stat().st_size
            except OSError:
                pass
    return total


def _cmd_info(args: argparse.Namespace) -> int:
    from qptables.grid import GridSpec
    from qptables.store import read_attrs
    from qptables.units import human_bytes as _human_bytes

    path = _existing_store(args.out)
    attrs = read_attrs(path)
    if args.json:
        attrs = dict(attrs)
        attrs["checksums"] = f"{len(attrs.get('checksums') or {})} chunks"
        print(json.dumps(attrs, indent=2, default=str))
        return 0
    if attrs.get("qp_schema_version") == 2:
        from qptables.cli.v2 import info_v2

        return info_v2(path, attrs)
    try:
        grid = GridSpec.from_attrs(attrs["grid"], attrs["tile_mu"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _Refused(f"OUT: {path} is not a qptables store ({exc!r})") from None
    m, s = grid.mu, grid.log10_sigma
    lines = [
        f"{path}",
        (
            f"  likelihood: {attrs.get('likelihood')}   schema v{attrs.get('qp_schema_version')}   "
            f"package {attrs.get('package_version')}   created {attrs.get('created')}"
        ),
        f"  complete: {attrs.get('complete')}",
        f"  y: {list(grid.y)}",
        f"  mu: {m.start:g} .. {m.stop:g} step {m.step:g} ({m.n} values)",
        (
            f"  log10_sigma: {s.start:g} .. {s.stop:g} step {s.step:g} ({s.n} values; sigma "
            f"{10**s.start:g} .. {10**s.stop:g})"
        ),
        f"  points: {grid.n_points:,} per variable; variables: sigma_qp, sigma_ratio",
        (
            f"  chunks: {grid.n_tiles} per variable of {grid.chunk_shape} "
            f"({_human_bytes(grid.chunk_nbytes())}, uncompressed); "
            f"{len(attrs.get('checksums') or {})} checksums recorded"
        ),
        f"  size: {_human_bytes(grid.store_nbytes())} of data, {_human_bytes(_du(path))} on disk",
        f"  metadata digest: {_digest_status(path, attrs)}",
        _format_verification(attrs.get("verification") or {}),
    ]
    print("\n".join(lines))
    return 0


def _digest_status(path: Path, attrs: dict[str, Any]) -> str:
    from qpinfer.tables.integrity import metadata_changes

    changes = metadata_changes(path, attrs)
    if changes is None:
        return "none (built before digests; qpinfer.open_table refuses it: rebuild it)"
    return "ok" if not changes else "MISMATCH: " + "; ".join(changes)


def _cmd_plot(args: argparse.Namespace) -> int:
    from qptables.cli.plot import plot_table

    path = _existing_store(args.out)
    try:
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

    path = _existing_store(args.out)
    try:
        entry = publish(path, args.to, name=args.name, manifest=args.manifest)
    except PublishError as exc:
        raise _Refused(str(exc)) from None
    manifest = args.manifest or str(Path(args.to) / "manifest.json")
    v = entry["verification"]
    print(
        f"published {entry['name']}: {Path(args.to) / entry['file']} "
        f"({_human_bytes(entry['size'])}, store {_human_bytes(entry['store_bytes'])}), sha256 "
        f"{entry['sha256']}\n  {entry['likelihood']}, shape {entry['shape']}; verified "
        f"{v.get('points')} mpmath points, max rel error {v.get('max_rel_error', 0):.2e}\n"
        f"  manifest: {manifest}",
        file=sys.stderr,
    )
    if args.json:
        print(json.dumps(entry, indent=2))
    return 0


def _ship(args: argparse.Namespace) -> int:
    from qptables.cli.v2 import ship

    return ship(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``qptables`` command; returns the exit status."""
    p = parser()
    args = p.parse_args(argv)
    handler = {
        "build": _cmd_build,
        "verify": _cmd_verify,
        "info": _cmd_info,
        "plot": _cmd_plot,
        "publish": _cmd_publish,
        "ship": _ship,
    }[args.command]
    try:
        return run_command("qptables", args.command, handler, args)
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

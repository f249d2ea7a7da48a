"""The ``qptables`` command line: ``build``, ``verify``, ``info``, ``plot`` and ``publish``.

Exit status: 0 success; 1 the work failed (a task error, verification failed -- nothing was
published, re-running resumes); 2 refused before doing anything (bad flag value, unknown
likelihood, invalid labels, ``OUT`` exists without ``--force``, ``OUT`` is not a table store with
``--force``, destination not writable, not enough disk space, another build holds the lock;
``publish`` of an incomplete, unverified or corrupt store; a store whose metadata no longer
matches its digest), and any other error (a corrupt store, an I/O error); 130 interrupted.
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

from qpinfer.cli_errors import OneLineParser, add_debug_flag, run_command

__all__ = ["main", "parser"]

_EPILOG = """examples:
  qptables build probit tables/probit-small.zarr --mu -5 5 0.01 --log10-sigma -1 1 0.01
  qptables build probit tables/probit-paper.zarr --grid paper
  qptables build poisson_square tables/poisson.zarr --grid paper --y-max 10
  qptables verify tables/probit-paper.zarr --samples 100
  qptables info tables/probit-paper.zarr
  qptables plot tables/probit-paper.zarr --y 1 --output ratio.png
  qptables publish tables/probit-paper.zarr --to dist/   # dist/probit-paper.tar.gz + manifest.json
"""


def _positive_int(flag: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
        return v

    parse.__name__ = flag
    return parse


def _nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``qptables`` (all subcommands)."""
    p = OneLineParser(
        prog="qptables",
        description="Build, verify and inspect precomputed sigma* lookup tables for "
        "Quantile Propagation (paper 000, App. J).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_debug_flag(p, top=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    b = sub.add_parser(
        "build",
        help="build a verified table store with dask",
        description="Compute sigma* over a grid as a dask graph (one task per tile/chunk), "
        "checksum and verify it against mpmath, then atomically publish it at OUT. "
        "Interrupted builds resume from OUT.partial.",
    )
    b.add_argument(
        "likelihood", metavar="LIKELIHOOD", help="probit, poisson_square or step_noise (with --eps)"
    )
    b.add_argument("out", metavar="OUT", help="destination zarr directory")
    b.add_argument(
        "--grid",
        default="paper",
        choices=["paper", "v2"],
        help="preset grid the other grid flags modify (paper: mu -10..10, log10 sigma -1..1, "
        "steps 0.001; y = -1,+1 (probit) or 0..--y-max (poisson_square)); v2: the reduced-"
        "coordinate Chebyshev-cell table of docs/tables-v2.md (no grid flags)",
    )
    b.add_argument(
        "--mu",
        nargs=3,
        type=_float,
        metavar=("START", "STOP", "STEP"),
        help="mu axis, both ends included",
    )
    b.add_argument(
        "--log10-sigma",
        nargs=3,
        type=_float,
        metavar=("START", "STOP", "STEP"),
        help="log10 sigma axis (sigma = cavity standard deviation), both ends included",
    )
    b.add_argument("--y", nargs="+", type=int, metavar="Y", help="labels to tabulate")
    b.add_argument(
        "--eps",
        type=_float,
        default=None,
        metavar="EPS",
        help="step_noise only: label-flip probability in [0, 0.5) (one store per "
        "eps, named step_noise(eps=EPS); default 0.2)",
    )
    b.add_argument(
        "--y-max",
        type=_nonneg_int,
        default=None,
        help="poisson_square paper preset: y = 0..Y_MAX (default 10)",
    )
    b.add_argument(
        "--tile-mu",
        type=_positive_int("--tile-mu"),
        default=None,
        help="mu rows per tile/chunk (default: ~150k points per tile)",
    )
    b.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="existing dask scheduler (e.g. tcp://host:8786); OUT must be on a file "
        "system the workers share",
    )
    b.add_argument(
        "--workers",
        type=_positive_int("--workers"),
        default=None,
        help="worker processes of the embedded LocalCluster (default: CPU count)",
    )
    b.add_argument(
        "--force",
        action="store_true",
        help="replace an existing OUT (only after the new one is verified) and "
        "discard an incompatible unfinished build",
    )
    b.add_argument(
        "--samples",
        type=_nonneg_int,
        default=None,
        help="random points checked against mpmath, besides corners and edge "
        "midpoints (default 24)",
    )
    b.add_argument(
        "--tolerance",
        type=_float,
        default=None,
        help="largest accepted relative error against mpmath (default 1e-10)",
    )
    b.add_argument("--seed", type=int, default=0, help="verification sample seed")
    b.add_argument(
        "--verify-dps",
        type=int,
        default=40,
        help="decimal digits of the mpmath reference (default 40, >= 15)",
    )
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.add_argument(
        "--dry-run",
        action="store_true",
        help="validate, probe the kernel and print the plan and estimate only",
    )
    b.add_argument("--json", action="store_true", help="print the result as JSON on stdout")

    v = sub.add_parser("verify", help="re-check a store against mpmath and its checksums")
    v.add_argument("out", metavar="OUT")
    v.add_argument(
        "--samples",
        type=_nonneg_int,
        default=None,
        help="random points (default 24) besides corners and edge midpoints",
    )
    v.add_argument("--tolerance", type=_float, default=None, help="default 1e-10")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument(
        "--verify-dps",
        type=int,
        default=40,
        help="decimal digits of the mpmath reference (default 40, >= 15)",
    )
    v.add_argument(
        "--workers",
        type=_positive_int("--workers"),
        default=None,
        help="local processes for the mpmath points (default: CPU count)",
    )
    v.add_argument("--scheduler", metavar="ADDRESS", help="run the checks on a dask cluster")
    v.add_argument(
        "--no-write", action="store_true", help="do not store the report in the store's attributes"
    )
    v.add_argument("--json", action="store_true", help="print the report as JSON")

    sh = sub.add_parser(
        "ship",
        help="(re)build the v2 tables shipped inside qpinfer",
        description="Build every v2 table that ships with qpinfer (qpinfer.shipped.SHIPPED) "
        "into DIR (default: qpinfer/tables_data of this checkout), replacing the stores there; "
        "the result is bit for bit the same on every run.",
    )
    sh.add_argument("--out", metavar="DIR", default=None, help="destination directory")
    sh.add_argument("--workers", type=int, default=None, help="LocalCluster worker processes")
    sh.add_argument("--scheduler", default=None, help="address of a running dask scheduler")
    sh.add_argument("--no-progress", action="store_true", help="no progress bars")
    i = sub.add_parser("info", help="describe a store: grid, sizes, verification")
    i.add_argument("out", metavar="OUT")
    i.add_argument("--json", action="store_true", help="print the attributes as JSON")

    pl = sub.add_parser("plot", help="PNG heatmap of sigma_qp / sigma_ep for one label")
    pl.add_argument("out", metavar="OUT")
    pl.add_argument("--y", type=int, required=True, help="label to plot")
    pl.add_argument("--output", required=True, metavar="FILE.png")
    pl.add_argument("--var", default="sigma_ratio", choices=["sigma_ratio", "sigma_qp"])

    pb = sub.add_parser(
        "publish",
        help="pack a verified store into an archive and record it in a manifest",
        description="Check STORE as the reader does (complete, verification passed, every "
        "chunk's sha256), write DIR/NAME.tar.gz (reproducible: same store, same sha256) and add "
        "or replace NAME in the manifest (default DIR/manifest.json). Serve DIR over http(s) "
        "(or share it) and users install the table with `qpinfer download NAME --url URL`.",
    )
    pb.add_argument("out", metavar="STORE", help="a finished, verified table store")
    pb.add_argument("--to", required=True, metavar="DIR", help="directory of the table host")
    pb.add_argument("--name", help="table name (default: STORE's name without .zarr)")
    pb.add_argument(
        "--manifest", metavar="FILE", help="manifest to update (default DIR/manifest.json)"
    )
    pb.add_argument("--json", action="store_true", help="print the manifest entry as JSON")
    for command in (b, v, i, pl, pb):
        add_debug_flag(command)
    return p


class _Refused(ValueError):
    """Exit 2 with a message."""


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
    from qptables.build import BuildError, BuildInputError, build
    from qptables.verify import DEFAULT_SAMPLES, DEFAULT_TOLERANCE

    try:
        import qpinfer

        qpinfer.get_likelihood(args.likelihood)
    except ValueError as exc:
        raise _Refused(f"LIKELIHOOD: unknown likelihood {args.likelihood!r} ({exc})") from None
    if args.eps is not None:
        if args.likelihood != "step_noise":
            raise _Refused(f"--eps: only for the step_noise likelihood, not {args.likelihood!r}")
        from qpinfer.step_noise import StepNoise

        try:
            args.likelihood = StepNoise(args.eps).name
        except ValueError as exc:
            raise _Refused(f"--eps: {exc}") from None
    elif args.likelihood == "step_noise":
        args.likelihood = qpinfer.get_likelihood("step_noise").name
    if args.grid == "v2":
        from qptables.cli_v2 import build_v2_command

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
    from qptables.verify import DEFAULT_SAMPLES, DEFAULT_TOLERANCE, verify

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
        from distributed import Client

        try:
            client = Client(args.scheduler, timeout="20s")
        except OSError as exc:
            raise _Refused(f"--scheduler: cannot connect to {args.scheduler!r} ({exc})") from None
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
    from qptables.build import _human_bytes
    from qptables.grid import GridSpec
    from qptables.store import read_attrs

    path = _existing_store(args.out)
    attrs = read_attrs(path)
    if args.json:
        attrs = dict(attrs)
        attrs["checksums"] = f"{len(attrs.get('checksums') or {})} chunks"
        print(json.dumps(attrs, indent=2, default=str))
        return 0
    if attrs.get("qp_schema_version") == 2:
        from qptables.cli_v2 import info_v2

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
    from qpinfer.integrity import metadata_changes

    changes = metadata_changes(path, attrs)
    if changes is None:
        return "none (built before digests; older checks only)"
    return "ok" if not changes else "MISMATCH: " + "; ".join(changes)


def _cmd_plot(args: argparse.Namespace) -> int:
    from qptables.plot import plot_table

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
    from qptables.build import _human_bytes
    from qptables.publish import PublishError, publish

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
    from qptables.cli_v2 import ship

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
    except KeyboardInterrupt:
        print(
            f"qptables {args.command}: interrupted; an unfinished build is kept and resumes "
            f"when the same command is run again",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())

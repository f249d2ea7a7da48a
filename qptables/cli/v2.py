"""The ``qptables`` commands on v2 (reduced-coordinate) tables: ``build --grid v2``, ``ship``, and
``info``, ``verify`` and ``publish`` of a v2 store -- one built with ``--grid v2`` or shipped in
``qpinfer/tables_data`` (parsers in :mod:`qptables.cli.parser`; the work in
:mod:`qptables.pipeline.v2`, :mod:`qptables.pipeline.v2_check`, :mod:`qptables.pipeline.dry_run`
and :mod:`qptables.pipeline.publish_v2`)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from qptables.cli.parser import Refused as _Refused

__all__ = [
    "build_v2_command",
    "info_v2",
    "publish_v2_command",
    "ship",
    "ship_destination",
    "verify_v2_command",
]

#: ``build`` flags of the paper grid, refused with ``--grid v2`` (its boxes are fixed).
GRID_FLAGS = ("mu", "log10_sigma", "y", "y_max", "tile_mu")


def build_v2_command(args: argparse.Namespace) -> int:
    """``qptables build LIK OUT --grid v2``: :func:`qptables.pipeline.v2.build_v2`, or with
    ``--dry-run`` :func:`qptables.pipeline.dry_run.plan_v2` (nothing written)."""
    from qptables.pipeline.errors import BuildError, BuildInputError
    from qptables.pipeline.v2_check import DEFAULT_KERNEL_POINTS, DEFAULT_SAMPLES, TOLERANCE

    for flag in GRID_FLAGS:
        if getattr(args, flag, None) is not None:
            name = "--" + flag.replace("_", "-")
            raise _Refused(
                f"{name}: a paper-grid flag; --grid v2 has fixed boxes (docs/tables-v2.md)"
            )
    tolerance = TOLERANCE if args.tolerance is None else args.tolerance
    if not (math.isfinite(tolerance) and tolerance > 0):
        raise _Refused(f"--tolerance: must be a positive number, got {tolerance!r}")
    samples = DEFAULT_SAMPLES if args.samples is None else args.samples
    try:
        if args.dry_run:
            from qptables.pipeline.dry_run import plan_v2

            plan = plan_v2(
                args.likelihood, args.out, workers=args.workers, scheduler=args.scheduler,
                force=args.force, samples=samples, kernel_points=DEFAULT_KERNEL_POINTS,
                say=lambda msg: print(msg, file=sys.stderr, flush=True),
            )  # fmt: skip
            if args.json:
                print(json.dumps({"dry_run": True, **plan}))
            return 0
        from qptables.pipeline.v2 import build_v2

        result = build_v2(
            args.likelihood, args.out, scheduler=args.scheduler, workers=args.workers,
            force=args.force, samples=samples, seed=args.seed, tolerance=tolerance,
            dps=args.verify_dps, progress=not args.no_progress,
        )  # fmt: skip
    except (BuildInputError, ValueError) as exc:
        raise _Refused(str(exc)) from None
    except BuildError as exc:
        print(f"qptables build: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**vars(result), "path": str(result.path)}, default=str))
    return 0


def ship_destination(args: argparse.Namespace) -> Path:
    """Where ``qptables ship`` writes: ``--out``; else ``qpinfer/tables_data`` of a source checkout
    (a ``pyproject.toml`` naming quantile-propagation beside the ``qpinfer`` package); else, only
    with ``--into-package``, the installed package's folder. Anything else is refused."""
    from qpinfer.tables.shipped import DATA_DIR

    if args.out is not None:
        if args.into_package:
            raise _Refused("--into-package: cannot be combined with --out")
        return Path(args.out)
    if args.into_package:
        return DATA_DIR
    pyproject = DATA_DIR.parents[1] / "pyproject.toml"
    try:
        checkout = 'name = "quantile-propagation"' in pyproject.read_text()
    except OSError:
        checkout = False
    if not checkout:
        raise _Refused(
            f"--out: qpinfer is installed at {DATA_DIR.parent}, not in a source checkout; pass "
            f"--out DIR, or --into-package to write into the installed package"
        )
    return DATA_DIR


def ship(args: argparse.Namespace) -> int:
    """``qptables ship``: every shipped v2 table, rebuilt into :func:`ship_destination`."""
    from qpinfer.tables.shipped import SHIPPED
    from qptables.pipeline.errors import BuildError, BuildInputError
    from qptables.pipeline.v2 import build_v2

    if args.scheduler and args.workers is not None:
        raise _Refused("--workers: sizes the embedded LocalCluster, not with --scheduler")
    out = ship_destination(args)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _Refused(f"--out: cannot create {out} ({exc.strerror})") from None
    for likelihood, name in SHIPPED.items():
        try:
            build_v2(
                likelihood,
                out / name,
                scheduler=args.scheduler,
                workers=args.workers,
                force=True,
                progress=not args.no_progress,
            )
        except BuildInputError as exc:
            raise _Refused(f"{likelihood}: {exc}") from None
        except BuildError as exc:
            print(f"qptables ship: error: {likelihood}: {exc}", file=sys.stderr)
            return 1
    return 0


def info_v2(path: Path, attrs: dict) -> int:
    """``qptables info`` of a v2 (reduced-coordinate) store."""
    from qpinfer.tables.reduced import open_reduced

    try:
        open_reduced(path)  # schema, integrity, verification
        status = "opens: integrity ok"
    except ValueError as exc:
        status = f"REFUSED by the reader: {exc}"
    ver = attrs.get("verification") or {}
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    print(f"{path}\n  likelihood: {attrs.get('likelihood')}   schema v2 (reduced coordinates)")
    for box in attrs.get("boxes") or []:
        axes = ", ".join(
            f"{a['name']} [{a['start']:g}, {a['start'] + a['n_cells'] * a['width']:g}] "
            f"{a['n_cells']} cells x {a['nodes_per_cell']} nodes"
            for a in box["axes"]
        )
        print(f"  box {box['name']} ({box['kind']}): {axes}; {len(box['labels'])} label(s)")
    print(f"  interpolation: {attrs.get('interpolation')}")
    print(f"  size on disk: {size / 1e6:.2f} MB; {status}")
    print(
        f"  verification: passed={ver.get('passed')}; vs kernel {ver.get('kernel_max_rel_err')} "
        f"on {ver.get('kernel_points')} points, vs mpmath {ver.get('mpmath_max_rel_err')} on "
        f"{ver.get('mpmath_points')} (tolerance {ver.get('tolerance')})"
    )
    return 0


def _format_v2(report: dict[str, Any]) -> str:
    """The text of a v2 verification report (:func:`qptables.pipeline.v2_check.verify_v2`)."""
    build = report.get("build_verification") or {}
    dps = report.get("dps", "the reference's default")
    integrity = "ok" if not report["integrity"] else "BROKEN: " + "; ".join(report["integrity"])
    return "\n".join(
        [
            f"verification: {'PASSED' if report['passed'] else 'FAILED'} "
            f"({report['seconds']:.1f} s; the store is not written to)",
            f"  integrity record: {integrity}; complete: {report['complete']}",
            f"  exact kernel: max rel error {report['kernel_max_rel_err']:.3g} on "
            f"{report['kernel_points']} random points (seed {report['seed']})",
            f"  mpmath ({dps} digits): max rel error {report['mpmath_max_rel_err']:.3g} on "
            f"{report['mpmath_points']} points of boxes {', '.join(report['mpmath_boxes'])}",
            f"  tolerance {report['tolerance']:g}; the build recorded passed={build.get('passed')} "
            f"(kernel {build.get('kernel_max_rel_err')}, mpmath {build.get('mpmath_max_rel_err')})",
        ]
    )


def verify_v2_command(path: Path, args: argparse.Namespace) -> int:
    """``qptables verify`` of a v2 store: :func:`qptables.pipeline.v2_check.verify_v2` (nothing is
    written to the store, so ``--no-write`` holds always)."""
    from qpinfer.tables import TableError
    from qptables.pipeline.errors import BuildInputError
    from qptables.pipeline.v2_check import DEFAULT_KERNEL_POINTS, DEFAULT_SAMPLES, verify_v2

    kwargs = {
        "kernel_points": args.kernel_points or DEFAULT_KERNEL_POINTS,
        "samples": DEFAULT_SAMPLES if args.samples is None else args.samples,
        "seed": args.seed,
        "tolerance": args.tolerance,
        "dps": args.verify_dps,
        "workers": args.workers,
        "boxes": args.boxes,
    }
    try:
        if args.scheduler:
            from qptables.pipeline.dask_run import connect_scheduler

            with connect_scheduler(args.scheduler) as client:
                report = verify_v2(path, client=client, **kwargs)
        else:
            report = verify_v2(path, **kwargs)
    except TableError as exc:
        raise _Refused(f"OUT: {exc}") from None
    except BuildInputError as exc:  # a scheduler that does not answer; --boxes it lacks
        raise _Refused(str(exc)) from None
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    print(_format_v2(report), file=sys.stderr)
    return 0 if report["passed"] else 1


def publish_v2_command(path: Path, args: argparse.Namespace) -> int:
    """``qptables publish`` of a v2 store: :func:`qptables.pipeline.publish_v2.publish_v2`."""
    from qptables.pipeline.publish import PublishError
    from qptables.pipeline.publish_v2 import publish_v2

    try:
        entry = publish_v2(path, args.to, name=args.name, manifest=args.manifest)
    except PublishError as exc:
        raise _Refused(str(exc)) from None
    manifest = args.manifest or str(Path(args.to) / "manifest.json")
    v = entry["verification"]
    print(
        f"published {entry['name']}: {Path(args.to) / entry['file']} ({entry['size']:,} bytes, "
        f"store {entry['store_bytes']:,}), sha256 {entry['sha256']}\n  {entry['likelihood']} (v2, "
        f"boxes {', '.join(entry['boxes'])}); verified on {v['kernel_points']} kernel and "
        f"{v['points']} mpmath points, max rel error {v['max_rel_error']:.2e}\n"
        f"  manifest: {manifest}",
        file=sys.stderr,
    )
    if args.json:
        print(json.dumps(entry, indent=2))
    return 0

"""The ``qptables`` commands for v2 (reduced-coordinate) tables: ``build --grid v2``, ``ship``
and ``info`` of a v2 store (parsers in :mod:`qptables.cli.commands`; the work in
:mod:`qptables.pipeline.v2`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qptables.cli.parser import Refused as _Refused

__all__ = ["build_v2_command", "info_v2", "ship"]


def build_v2_command(args: argparse.Namespace) -> int:
    """``qptables build LIK OUT --grid v2``: :func:`qptables.pipeline.v2.build_v2`."""
    from qptables.pipeline.errors import BuildError, BuildInputError
    from qptables.pipeline.v2 import build_v2

    flags = [f for f in ("mu", "log10_sigma", "y", "y_max", "tile_mu") if getattr(args, f, None)]
    if flags:
        raise _Refused(f"--grid v2 takes no grid flags; got --{flags[0].replace('_', '-')}")
    try:
        build_v2(
            args.likelihood,
            args.out,
            scheduler=args.scheduler,
            workers=args.workers,
            force=args.force,
            progress=not args.no_progress,
        )
    except (BuildInputError, ValueError) as exc:
        raise _Refused(str(exc)) from None
    except BuildError as exc:
        print(f"qptables build: error: {exc}", file=sys.stderr)
        return 1
    return 0


def ship(args: argparse.Namespace) -> int:
    """``qptables ship``: every shipped v2 table, rebuilt into ``--out``."""
    from qpinfer.tables.shipped import DATA_DIR, SHIPPED
    from qptables.pipeline.errors import BuildError
    from qptables.pipeline.v2 import build_v2

    out = Path(args.out) if args.out else DATA_DIR
    out.mkdir(parents=True, exist_ok=True)
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

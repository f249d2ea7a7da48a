"""``qptables ship``: (re)build every table shipped inside qpinfer
(:data:`qpinfer.tables.shipped.SHIPPED`) -- each ``qptables build LIK DIR/NAME --grid cells
--force`` with the default checks, which gives the shipped stores bit for bit (parser in
:mod:`qptables.cli.parser`; the build :func:`qptables.pipeline.build.build`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qptables.cli.parser import Refused as _Refused

__all__ = ["ship", "ship_destination"]


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
    """``qptables ship``: every shipped table, rebuilt into :func:`ship_destination`."""
    from qpinfer.tables.shipped import SHIPPED
    from qptables.pipeline.build import build
    from qptables.pipeline.errors import BuildError, BuildInputError
    from qptables.pipeline.plan import check_options

    if args.scheduler and args.workers is not None:
        raise _Refused("--workers: sizes the embedded LocalCluster, not with --scheduler")
    try:  # before DIR is created (each build checks them again)
        check_options(workers=args.workers)
    except BuildInputError as exc:
        raise _Refused(str(exc)) from None
    out = ship_destination(args)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _Refused(f"--out: cannot create {out} ({exc.strerror})") from None
    for likelihood, name in SHIPPED.items():
        try:
            build(
                likelihood,
                out / name,
                "cells",
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

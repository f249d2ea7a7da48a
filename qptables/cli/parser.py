"""The ``qptables`` argument parser: its commands, flags and their value checks (the commands
themselves are :mod:`qptables.cli.commands`)."""

from __future__ import annotations

import argparse
import re

from qpinfer.cli_errors import OneLineParser, add_debug_flag

__all__ = ["Refused", "parser"]

_EPILOG = """examples:
  qptables build probit tables/probit-small.zarr --mu -5 5 0.01 --log10-sigma -1 1 0.01
  qptables build probit tables/probit-paper.zarr --grid paper
  qptables build poisson_square tables/poisson.zarr --grid paper --y-max 10
  qptables verify tables/probit-paper.zarr --samples 100
  qptables info tables/probit-paper.zarr
  qptables plot tables/probit-paper.zarr --y 1 --output ratio.png
  qptables publish tables/probit-paper.zarr --to dist/   # dist/probit-paper.tar.gz + manifest.json
"""


def _int_at_least(minimum: int, flag: str):
    """The argparse type of ``flag``: an integer >= ``minimum``."""
    kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        return v

    parse.__name__ = flag
    return parse


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


#: Any negative number ``float()`` reads, ``-inf`` and ``-nan`` included: argparse takes only
#: ``-1`` and ``-.5`` forms as values, and would read ``--mu -inf 1 0.1`` or ``--mu -1e3 ...``
#: as an unknown flag ("expected 3 arguments") instead of naming the value.
_NEGATIVE_NUMBER = re.compile(
    r"^-(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?)$", re.IGNORECASE
)


def _numbers_may_be_negative(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Let ``p``'s flag values be any negative number (:data:`_NEGATIVE_NUMBER`); ``p`` has no
    flag that looks like one, so this cannot shadow a flag."""
    p._negative_number_matcher = _NEGATIVE_NUMBER  # private, but in argparse since 3.2
    return p


def _add_check_flags(p: argparse.ArgumentParser) -> None:
    """The flags of the check against mpmath, shared by ``build`` and ``verify``."""
    p.add_argument(
        "--samples",
        type=_int_at_least(0, "--samples"),
        default=None,
        help="random points checked against mpmath, besides corners and edge "
        "midpoints (default 24)",
    )
    p.add_argument(
        "--tolerance",
        type=_float,
        default=None,
        help="largest accepted relative error against mpmath (default 1e-10)",
    )
    p.add_argument("--seed", type=int, default=0, help="verification sample seed")
    p.add_argument(
        "--verify-dps",
        type=int,
        default=40,
        help="decimal digits of the mpmath reference (default 40, >= 15)",
    )


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
        type=_int_at_least(0, "--y-max"),
        default=None,
        help="poisson_square paper preset: y = 0..Y_MAX (default 10)",
    )
    b.add_argument(
        "--tile-mu",
        type=_int_at_least(1, "--tile-mu"),
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
        type=_int_at_least(1, "--workers"),
        default=None,
        help="worker processes of the embedded LocalCluster (default: CPU count)",
    )
    b.add_argument(
        "--force",
        action="store_true",
        help="replace an existing OUT (only after the new one is verified) and "
        "discard an incompatible unfinished build",
    )
    _add_check_flags(b)
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.add_argument(
        "--dry-run",
        action="store_true",
        help="validate, probe the kernel and print the plan and estimate only",
    )
    b.add_argument("--json", action="store_true", help="print the result as JSON on stdout")

    v = sub.add_parser("verify", help="re-check a store against mpmath and its checksums")
    v.add_argument("out", metavar="OUT")
    _add_check_flags(v)
    v.add_argument(
        "--workers",
        type=_int_at_least(1, "--workers"),
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
        description="Build every v2 table that ships with qpinfer (qpinfer.tables.shipped.SHIPPED) "
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
    _numbers_may_be_negative(b)
    return p


class Refused(ValueError):
    """Exit 2 with a message."""

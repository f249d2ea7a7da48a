"""The ``qptables`` argument parser: its commands, flags and their value checks (the commands
themselves are :mod:`qptables.cli.commands`)."""

from __future__ import annotations

import argparse
import re

from qpinfer.cli_errors import OneLineParser, add_debug_flag

__all__ = ["Refused", "likelihood_names", "parser"]

_EPILOG = """examples:
  qptables build probit tables/probit-small.zarr --mu -5 5 0.01 --log10-sigma -1 1 0.01
  qptables build probit tables/probit-paper.zarr --grid paper
  qptables build logit tables/logit.zarr --grid cells --dry-run
  qptables build poisson_square tables/poisson.zarr --grid paper --y-max 10
  qptables verify tables/probit-paper.zarr --samples 100
  qptables info tables/probit-paper.zarr
  qptables plot tables/probit-paper.zarr --y 1 --output ratio.png
  qptables verify qpinfer/tables_data/probit.zarr --samples 4   # a shipped (cells) table
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


def likelihood_names() -> list[str]:
    """The likelihood names :func:`qpinfer.get_likelihood` knows, sorted (its registry)."""
    from qpinfer.likelihoods import registry

    return sorted(registry._REGISTRY)


def _add_check_flags(p: argparse.ArgumentParser) -> None:
    """The flags of the check against mpmath, shared by ``build`` and ``verify``."""
    p.add_argument(
        "--samples",
        type=_int_at_least(0, "--samples"),
        default=None,
        help="points checked against mpmath (default 24): the grid, random grid points "
        "besides each label's corners and edge midpoints; the cells, a stratified sample of the "
        "random points checked against the exact kernel, at least one per box",
    )
    p.add_argument(
        "--tolerance",
        type=_float,
        default=None,
        help="largest accepted relative error (default: the grid 1e-10 against mpmath; the "
        "cells 1e-12 against the exact kernel and mpmath, or what a cells store's build recorded)",
    )
    p.add_argument(
        "--seed",
        type=_int_at_least(0, "--seed"),
        default=0,
        help="seed of the checked points' draw, >= 0",
    )
    p.add_argument(
        "--verify-dps",
        type=int,
        default=None,
        help="decimal digits of the mpmath reference, 15..100 (default 40; cells Student-t 30); "
        "its cost grows steeply: ~0.3 s a point at 40, ~6 s at 100",
    )


def _add_cluster_flags(p: argparse.ArgumentParser, *, scheduler: str, workers: str) -> None:
    """Where the work runs, shared by ``build``, ``verify`` and ``ship``: ``--scheduler`` (a
    running dask scheduler) and ``--workers`` (local processes), with each command's help."""
    p.add_argument("--scheduler", metavar="ADDRESS", default=None, help=scheduler)
    p.add_argument("--workers", type=_int_at_least(1, "--workers"), default=None, help=workers)


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``qptables`` (all subcommands)."""
    p = OneLineParser(
        prog="qptables",
        description="Build, verify and inspect precomputed sigma* lookup tables for "
        "Quantile Propagation (Zhang et al. (2020), App. J).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_debug_flag(p, top=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    names = likelihood_names()
    b = sub.add_parser(
        "build",
        help="build a verified table store with dask",
        description="Compute sigma* over a grid as a dask graph (one task per tile/chunk), "
        "verify it (mpmath; cells: also the exact kernel), then atomically publish it at OUT. "
        "Interrupted builds resume from OUT.partial. The default grid is the paper's App. J "
        "grid (--grid paper): mu -10..10 and log10 sigma -1..1, both in steps of 0.001, i.e. "
        "20001 x 2001 points per label, the product's specification. --grid cells builds instead "
        "the reduced-coordinate table qpinfer ships (Chebyshev cells: every finite mu and "
        "sigma > 0, ~1e-12 relative, a few MB).",
    )
    b.add_argument(
        "likelihood",
        metavar="LIKELIHOOD",
        help=f"one of {', '.join(names)}; step_noise takes --eps, student_t is nu=4, scale=1 "
        "unless named as student_t(nu=NU, scale=S) (--grid cells: scale 1, any nu); or a "
        "likelihood you wrote, package.module:ClassName or package.module:ClassName(param=value) "
        "(a qpinfer.CustomLikelihood subclass in an importable module; --grid cells)",
    )
    b.add_argument("out", metavar="OUT", help="destination zarr directory")
    b.add_argument(
        "--grid",
        default="paper",
        choices=["paper", "cells"],
        help="paper (default): the paper's App. J grid, 20001 x 2001 points per label (mu "
        "-10..10, log10 sigma -1..1, steps 0.001; y = -1,+1 for probit and step_noise, 0..--y-max "
        "for poisson_square, --y for the others), which --mu, --log10-sigma, --y, --y-max and "
        "--tile-mu modify; cells: the reduced-coordinate Chebyshev-cell table of "
        "docs/development/tables-v2.md, as shipped in qpinfer (fixed boxes: the grid flags are refused)",
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
        help="poisson_square, paper grid: y = 0..Y_MAX (default 10)",
    )
    b.add_argument(
        "--tile-mu",
        type=_int_at_least(1, "--tile-mu"),
        default=None,
        help="paper grid: mu rows per tile/chunk (default: ~150k points per tile)",
    )
    _add_cluster_flags(
        b,
        scheduler="existing dask scheduler (e.g. tcp://host:8786); OUT must be on a file "
        "system the workers share",
        workers="worker processes of the embedded LocalCluster (default: CPU count; with "
        "--scheduler only for --dry-run's estimate)",
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
        help="validate, probe the kernel and print the plan and time estimate only; writes "
        "nothing (no OUT, no OUT.partial, no lock) and starts no cluster",
    )
    b.add_argument(
        "--json", action="store_true", help="print the result (or the dry run's plan) as JSON"
    )

    v = sub.add_parser(
        "verify",
        help="re-check a store against mpmath and its checksums",
        description="Grid stores (App. J): checksums, a sanity scan and mpmath at sample points; "
        "the report is stored in the store unless --no-write. Cells stores (built with --grid "
        "cells, or shipped in qpinfer/tables_data): the integrity record, then the exact kernel at "
        "random points of every box and mpmath at --samples of them; never written to.",
    )
    v.add_argument("out", metavar="OUT")
    _add_check_flags(v)
    v.add_argument(
        "--kernel-points",
        type=_int_at_least(1, "--kernel-points"),
        default=None,
        help="cells stores: random points checked against the exact kernel (default 20000)",
    )
    v.add_argument(
        "--boxes",
        nargs="+",
        metavar="BOX",
        default=None,
        help="cells stores: check only these boxes (names as `qptables info` lists them; default: "
        "every box), e.g. the ones a kernel change touched",
    )
    _add_cluster_flags(
        v,
        scheduler="run the checks on a dask cluster",
        workers="local processes for the mpmath points (default: CPU count)",
    )
    v.add_argument(
        "--no-write",
        action="store_true",
        help="do not store the report in a grid store (needed for one you cannot write; a "
        "cells store is never written to)",
    )
    v.add_argument("--json", action="store_true", help="print the report as JSON")

    sh = sub.add_parser(
        "ship",
        help="(re)build the tables shipped inside qpinfer",
        description="Build every table that ships with qpinfer (qpinfer.tables.shipped.SHIPPED) "
        "into DIR, replacing the stores there; the result is bit for bit the same on every run. "
        "Default DIR: qpinfer/tables_data of a source checkout (a pyproject.toml of "
        "quantile-propagation beside the package); an installed package's folder only with "
        "--into-package.",
    )
    sh.add_argument("--out", metavar="DIR", default=None, help="destination directory")
    sh.add_argument(
        "--into-package",
        action="store_true",
        help="write into the installed qpinfer package's tables_data (e.g. in site-packages)",
    )
    _add_cluster_flags(
        sh, scheduler="address of a running dask scheduler", workers="LocalCluster worker processes"
    )
    sh.add_argument("--no-progress", action="store_true", help="no progress bars")
    i = sub.add_parser("info", help="describe a store: grid, sizes, verification")
    i.add_argument("out", metavar="OUT")
    i.add_argument("--json", action="store_true", help="print the attributes as JSON")

    pl = sub.add_parser(
        "plot",
        help="PNG heatmap of sigma_qp / sigma_ep for one label",
        description="Grid stores: the stored values over the store's grid. Cells stores: "
        "the table's lookups over --mu and --log10-sigma (default: the paper's window, mu "
        "-10..10, log10 sigma -1..1), divided by the exact EP standard deviation for "
        "sigma_ratio.",
    )
    pl.add_argument("out", metavar="OUT")
    pl.add_argument("--y", type=_float, required=True, help="label to plot")
    pl.add_argument("--output", required=True, metavar="FILE.png")
    pl.add_argument("--var", default="sigma_ratio", choices=["sigma_ratio", "sigma_qp"])
    for flag, what in (("--mu", "mu"), ("--log10-sigma", "log10 sigma")):
        pl.add_argument(
            flag,
            nargs=2,
            type=_float,
            default=None,
            metavar=("START", "STOP"),
            help=f"cells stores: the {what} range drawn (a grid store is drawn over its grid)",
        )

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
    _numbers_may_be_negative(pl)
    return p


class Refused(ValueError):
    """Exit 2 with a message."""

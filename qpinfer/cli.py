"""The ``qpinfer`` command line: ``list`` the sigma* tables (shipped and installed) and
``download`` prebuilt ones.

``list`` shows every table shipped inside qpinfer and every installed one with its coverage
(mu, sigma, y) and verified error, and marks the one ``table=None`` uses for each likelihood
(:mod:`qpinfer.tables.choice`: a downloaded table is the default only where it is at least as
good as the shipped one in coverage and verified error).

Exit status: 0 success; 1 the download failed (host unreachable, interrupted, truncated or
mismatching file -- nothing was installed); 2 bad usage (unknown table name, invalid name, a
cache path holding something that is not a table store) and
any other error (an unusable table, an I/O error). Errors are one line,
``qpinfer COMMAND: error: ...`` (:mod:`qpinfer.cli_errors`); ``--debug`` shows the traceback.
Needs only qpinfer's own dependencies (numpy, scipy, zarr).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from qpinfer.cli_errors import OneLineParser, add_debug_flag, run_command

__all__ = ["main", "parser"]

_EPILOG = """examples:
  qpinfer list                               # shipped and installed tables, and the defaults
  export QPINFER_TABLES_URL=https://example.org/qp-tables   # a directory holding manifest.json
  qpinfer list                               # ... and the tables the host offers
  qpinfer download probit-paper
  qpinfer download probit-small --url file:///shared/qp-tables
  QPINFER_TABLES=/data/qp-tables qpinfer download poisson_square-paper   # another cache dir

The estimators' table=None uses, per likelihood, the better of the shipped and the installed
table (coverage and verified error; `qpinfer list` marks it); table='probit-paper' (an
installed name) or table='/path/to/store.zarr' uses that table, always.
"""


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``qpinfer`` (all subcommands)."""
    from qpinfer.tables.remote.install import URL_ENV
    from qpinfer.tables.remote.transfer import (
        DEFAULT_TIMEOUT,
        LOW_SPEED_LIMIT,
        LOW_SPEED_TIME,
        STALL_TIMEOUT,
    )

    p = OneLineParser(
        prog="qpinfer",
        description="List the sigma* lookup tables of Quantile Propagation (shipped with "
        "qpinfer and installed) and download prebuilt ones.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_debug_flag(p, top=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    d = sub.add_parser(
        "download",
        help="download a table by name, verify its sha256 and install it",
        description="Fetch NAME from the table host's manifest.json, verify size and sha256, "
        "validate every chunk and install it atomically into the table cache "
        "($QPINFER_TABLES, default ~/.cache/qpinfer/tables) as NAME.zarr, and link it as the "
        "installed default of its likelihood (<likelihood>.zarr). table=None uses it only if it "
        "covers every cavity the shipped table covers with a verified error at most the "
        "shipped one's (qpinfer list shows which is used); table='NAME' always uses it. "
        "Interrupted downloads resume when re-run.",
    )
    d.add_argument("name", metavar="NAME", help="table name in the host's manifest")
    d.add_argument(
        "--url",
        metavar="URL",
        help=f"http(s):// or file:// URL (or directory) of the table host (default ${URL_ENV})",
    )
    d.add_argument(
        "--force",
        action="store_true",
        help="download even if the installed table already holds this content",
    )
    d.add_argument(
        "--no-default",
        action="store_true",
        help="do not link it as the installed default of its likelihood (use it with table='NAME')",
    )
    d.add_argument(
        "--retries",
        type=int,
        default=3,
        help="extra attempts after a failed or interrupted transfer, 0 to 10 (default 3)",
    )
    d.add_argument(
        "--timeout",
        type=_positive("--timeout", "seconds"),
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="give up after this many seconds for the whole download, retries included "
        "(default: no total limit); a transfer slower than "
        f"{LOW_SPEED_LIMIT / 1024:g} KiB/s over {LOW_SPEED_TIME:g} s, or a connect or read "
        f"silent for {STALL_TIMEOUT:g} s, is abandoned and retried",
    )
    d.add_argument(
        "--speed-limit",
        type=_positive("--speed-limit", "bytes per second"),
        default=LOW_SPEED_LIMIT,
        metavar="BYTES_PER_S",
        help="abandon (and retry) a transfer slower than this many bytes per second over "
        f"--speed-time, as curl's option of that name (default {LOW_SPEED_LIMIT:g}, 10 KiB/s)",
    )
    d.add_argument(
        "--speed-time",
        type=_positive("--speed-time", "seconds"),
        default=LOW_SPEED_TIME,
        metavar="SECONDS",
        help=f"the window of --speed-limit (default {LOW_SPEED_TIME:g})",
    )
    d.add_argument("--quiet", action="store_true", help="no progress output")

    ls = sub.add_parser(
        "list",
        help="list the shipped and installed tables (coverage, verified error, the default of "
        "each likelihood) and, with a host, the available ones",
        description="List the tables shipped inside qpinfer and those installed in the table "
        "cache ($QPINFER_TABLES, default ~/.cache/qpinfer/tables): coverage in mu, sigma and y, "
        "verified error, and which one the estimators' table=None uses for each likelihood. "
        f"With --url or ${URL_ENV}, also the tables the host offers.",
    )
    ls.add_argument("--url", metavar="URL", help=f"table host (default ${URL_ENV}, if set)")
    add_debug_flag(d)
    add_debug_flag(ls)
    return p


def _positive(flag: str, unit: str) -> Callable[[str], float]:
    """argparse type of ``flag``: a positive, finite number of ``unit``
    (:func:`qpinfer.tables.remote.deadline.check_positive`)."""

    def parse(text: str) -> float:
        from qpinfer.tables.remote.deadline import check_positive

        try:
            return check_positive(text, flag, unit)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be a positive, finite number of {unit}, got {text!r}"
            ) from None

    parse.__name__ = flag
    return parse


class _Progress:
    """Prints ``downloaded X of Y MiB`` to stderr at most every half second."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < 0.5 and done < total:
            return
        self.last = now
        end = "\n" if done >= total else "\r"
        print(
            f"  {self.name}: {done / 2**20:8.1f} of {total / 2**20:.1f} MiB",
            end=end,
            file=sys.stderr,
            flush=True,
        )


def _cmd_download(args: argparse.Namespace) -> int:
    from qpinfer.tables import open_table
    from qpinfer.tables.remote.install import MAX_RETRIES, download

    if not 0 <= args.retries <= MAX_RETRIES:
        raise ValueError(
            f"--retries must be in [0, {MAX_RETRIES}] (the pause before a retry doubles each "
            f"time), got {args.retries}"
        )
    path = download(
        args.name,
        args.url,
        force=args.force,
        make_default=not args.no_default,
        retries=args.retries,
        timeout=args.timeout,
        low_speed_limit=args.speed_limit,
        low_speed_time=args.speed_time,
        progress=None if args.quiet else _Progress(args.name),
    )
    from qpinfer.tables.choice import choose_default

    table = open_table(path, verify_checksums=False)
    print(f"installed {path}: {table!r}", file=sys.stderr)
    choice = choose_default(table.likelihood)
    if choice.table is not None and choice.table.path.resolve() != path.resolve():
        print(
            f"note: table=None keeps using {choice.table} for {table.likelihood!r}: "
            f"{choice.reason}. Use the downloaded one with table={args.name!r} (e.g. "
            f"qpinfer.GPClassifier('qp', table={args.name!r})); `qpinfer list` shows every table.",
            file=sys.stderr,
        )
    print(path)
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    import os

    from qpinfer.tables import tables_dir
    from qpinfer.tables.remote.install import URL_ENV, DownloadError, fetch_manifest
    from qpinfer.tables.shipped import DATA_DIR, SHIPPED

    defaults: dict[str, Any] = {}  # likelihood -> choose_default(likelihood)
    print(f"shipped with qpinfer ({DATA_DIR}):")
    for key, store in SHIPPED.items():
        _list_entry(DATA_DIR / store, "shipped", defaults)
    root = tables_dir()
    print(f"installed in {root} ($QPINFER_TABLES, default ~/.cache/qpinfer/tables):")
    stores = sorted(root.glob("*.zarr")) if root.is_dir() else []
    for p in stores:
        _list_entry(p, "installed", defaults)
    if not stores:
        print("  (none; `qpinfer download NAME` installs one)")
    print("table=None uses, per likelihood (table='NAME' or a path uses that table, always):")
    for lik, choice in defaults.items():
        t = choice.table
        used = "exact sigma* (no usable table)" if t is None else f"{t.source} {t.path.name}"
        other = choice.other
        if t is None or other is None:
            print(f"  {lik}: {used}")
        else:
            print(
                f"  {lik}: {used} -- {choice.reason}; table={str(other.path)!r} uses the "
                f"{other.source} one"
            )
    if args.url or os.environ.get(URL_ENV):
        try:
            manifest = fetch_manifest(args.url)
        except DownloadError as exc:
            print(f"qpinfer list: error: {exc}", file=sys.stderr)
            return 1
        print(f"available from {args.url or os.environ[URL_ENV]}:")
        for name, e in manifest["tables"].items():
            print(_host_line(name, e))
    return 0


def _host_line(name: Any, entry: Any) -> str:
    """One line of ``qpinfer list`` for a host's manifest entry, whatever the host wrote in
    it: a field of the wrong type prints as ``?`` (``qpinfer download`` checks the entry)."""
    from qpinfer.tables.remote.transfer import printable

    e = entry if isinstance(entry, dict) else {}
    v = e.get("verification") if isinstance(e.get("verification"), dict) else {}

    def number(value: Any, scale: float, spec: str) -> str:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return format(value / scale, spec) if ok else "?"

    return (
        f"  {printable(name, 60)}: {printable(e.get('likelihood'), 60)}, shape "
        f"{printable(e.get('shape'), 60)}, {number(e.get('size'), 2**20, '.1f')} MiB, max rel "
        f"error {number(v.get('max_rel_error'), 1, '.2g')} "
        f"({printable(v.get('points'), 20)} mpmath points)"
    )


def _list_entry(path: Path, source: str, defaults: dict[str, Any]) -> None:
    """Print one table of ``qpinfer list``: name, likelihood, whether ``table=None`` uses it,
    coverage and verified error (or why it cannot be used)."""
    import os

    from qpinfer.tables import TableError, open_table
    from qpinfer.tables.choice import choose_default, summarize

    link = f" -> {os.readlink(path)}" if path.is_symlink() else ""
    try:
        summary = summarize(path, source)
        if source == "installed":
            open_table(path, verify_checksums=False).close()  # validated, as table=None would
    except TableError as exc:
        print(f"  {path.name}{link}  UNUSABLE: {exc} (remove it, or `qpinfer download NAME "
              "--force` to reinstall it)")  # fmt: skip
        return
    lik = summary.likelihood
    if lik not in defaults:
        defaults[lik] = choose_default(lik)
    chosen = defaults[lik].table
    mark = ""
    if chosen is not None and chosen.source == source and chosen.path == path:
        mark = "  [default for table=None]"
    print(f"  {path.name}{link}  {lik}{mark}")
    print(f"      covers {summary.coverage_text()}")
    print(f"      {summary.error_text()}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``qpinfer`` command; returns the exit status."""
    args = parser().parse_args(argv)
    handler = {"download": _cmd_download, "list": _cmd_list}[args.command]
    try:
        from qpinfer.tables.remote.install import (
            DownloadError,
            InstallRefusedError,
            UnknownTableError,
        )

        return run_command(
            "qpinfer",
            args.command,
            handler,
            args,
            failed=(DownloadError,),
            refused=(UnknownTableError, InstallRefusedError),
        )
    except KeyboardInterrupt:
        print(f"qpinfer {args.command}: interrupted; re-run to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

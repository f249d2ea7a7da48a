"""The ``qpinfer`` command line: ``download`` prebuilt sigma* tables and ``list`` them.

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
from collections.abc import Sequence

from qpinfer.cli_errors import OneLineParser, add_debug_flag, run_command

__all__ = ["main", "parser"]

_EPILOG = """examples:
  export QPINFER_TABLES_URL=https://example.org/qp-tables   # a directory holding manifest.json
  qpinfer list
  qpinfer download probit-paper
  qpinfer download probit-small --url file:///shared/qp-tables
  QPINFER_TABLES=/data/qp-tables qpinfer download poisson_square-paper   # another cache dir
"""


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``qpinfer`` (all subcommands)."""
    from qpinfer.tables.remote.install import URL_ENV
    from qpinfer.tables.remote.transfer import DEFAULT_TIMEOUT, STALL_TIMEOUT

    p = OneLineParser(
        prog="qpinfer",
        description="Download and list prebuilt sigma* lookup tables for Quantile Propagation.",
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
        "($QPINFER_TABLES, default ~/.cache/qpinfer/tables) as NAME.zarr, the default table of "
        "its likelihood. Interrupted downloads resume when re-run.",
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
        help="do not make it the default table of its likelihood",
    )
    d.add_argument(
        "--retries",
        type=int,
        default=3,
        help="extra attempts after a failed or interrupted transfer (default 3)",
    )
    d.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="give up after this many seconds for the whole download, retries included "
        f"(default {DEFAULT_TIMEOUT:g}); each connect or read also gives up after "
        f"{STALL_TIMEOUT:g} s of silence and is retried while time is left",
    )
    d.add_argument("--quiet", action="store_true", help="no progress output")

    ls = sub.add_parser("list", help="list installed tables and, with a host, available ones")
    ls.add_argument("--url", metavar="URL", help=f"table host (default ${URL_ENV}, if set)")
    add_debug_flag(d)
    add_debug_flag(ls)
    return p


def _seconds(text: str) -> float:
    """argparse type of ``--timeout``: a positive, finite number of seconds."""
    from qpinfer.tables.remote.deadline import check_timeout

    try:
        return check_timeout(float(text), "--timeout")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a positive, finite number of seconds, got {text!r}"
        ) from None


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
    from qpinfer.tables.remote.install import download

    if args.retries < 0:
        raise ValueError("--retries must be >= 0")
    path = download(
        args.name,
        args.url,
        force=args.force,
        make_default=not args.no_default,
        retries=args.retries,
        timeout=args.timeout,
        progress=None if args.quiet else _Progress(args.name),
    )
    table = open_table(path, verify_checksums=False)
    print(f"installed {path}: {table!r}", file=sys.stderr)
    print(path)
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    import os

    from qpinfer.tables import TableError, open_table, tables_dir
    from qpinfer.tables.remote.install import URL_ENV, DownloadError, fetch_manifest

    root = tables_dir()
    print(f"installed in {root}:")
    found = False
    if root.is_dir():
        for p in sorted(root.glob("*.zarr")):
            found = True
            link = f" -> {os.readlink(p)}" if p.is_symlink() else ""
            try:
                t = open_table(p, verify_checksums=False)
                desc = f"{t.likelihood}, shape {t.shape}"
            except TableError as exc:
                desc = f"UNUSABLE: {exc}"
            print(f"  {p.name}{link}  ({desc})")
    if not found:
        print("  (none)")
    if args.url or os.environ.get(URL_ENV):
        try:
            manifest = fetch_manifest(args.url)
        except DownloadError as exc:
            print(f"qpinfer list: error: {exc}", file=sys.stderr)
            return 1
        print(f"available from {args.url or os.environ[URL_ENV]}:")
        for name, e in manifest["tables"].items():
            v = e.get("verification", {})
            print(
                f"  {name}: {e.get('likelihood')}, shape {e.get('shape')}, "
                f"{e.get('size', 0) / 2**20:.1f} MiB, max rel error "
                f"{v.get('max_rel_error', float('nan')):.2g} ({v.get('points')} mpmath points)"
            )
    return 0


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

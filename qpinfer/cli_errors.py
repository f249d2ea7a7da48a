"""How the ``qpinfer`` and ``qptables`` command lines report failure: in one line.

Every command's bad input, corrupt store and I/O error ends as a single line on stderr,
``<prog> <command>: error: <message>``, and exit status 2 (:func:`run_command`); work that ran
and failed (a build task, a verification, a download transfer) keeps exit status 1 where the
command documents it. Argument errors are one line too (:class:`OneLineParser`: no usage block).
``--debug`` (before or after the command) shows the Python traceback instead of the line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["OneLineParser", "add_debug_flag", "one_line", "run_command"]

DEBUG_HELP = "on an error, show the Python traceback instead of the one-line message"


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: ``PROG: error: MESSAGE``, exit 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` on one line and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def add_debug_flag(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """Add ``--debug`` to ``parser``; on subcommand parsers (``top=False``) it does not
    override a ``--debug`` given before the command."""
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help=DEBUG_HELP,
    )


def one_line(exc: BaseException | str) -> str:
    """The message of ``exc`` on one line; an exception of a type that does not explain itself
    (not a ``ValueError``, ``OSError`` or ``RuntimeError``) is named, with a ``--debug`` hint."""
    text = " ".join(str(exc).split())
    if isinstance(exc, str):
        return text
    if isinstance(exc, ValueError | OSError | RuntimeError) and text:
        return text
    return f"{type(exc).__name__}: {text or '(no message)'} (run with --debug for the traceback)"


def run_command(
    prog: str,
    command: str,
    func: Callable[[Any], int],
    args: Any,
    *,
    failed: tuple[type[BaseException], ...] = (),
    refused: tuple[type[BaseException], ...] = (),
) -> int:
    """``func(args)``, with any exception turned into one line on stderr and exit status 2
    (1 for the ``failed`` types that are not ``refused`` types) -- or re-raised with its
    traceback if ``args.debug``. ``KeyboardInterrupt`` and ``SystemExit`` pass through."""
    try:
        return func(args)
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        print(f"{prog} {command}: error: {one_line(exc)}", file=sys.stderr)
        return 1 if isinstance(exc, failed) and not isinstance(exc, refused) else 2

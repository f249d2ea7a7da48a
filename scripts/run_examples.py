"""Run every code example of Markdown pages, in order, as a reader would.

    python scripts/run_examples.py README.md docs/guide/classification.md ...

Each page's fenced ``python`` and ``bash`` blocks run in the order they appear, in a fresh
temporary working folder per page: the ``python`` blocks share one namespace (as cells of a
notebook do) and run with warnings as errors (an example that warns has rotted too); the
``bash`` blocks run with ``set -euo pipefail`` and this interpreter's ``bin`` folder first on
``PATH``, so a table a ``bash`` block builds is there for the next ``python`` block. Each page
starts with an empty table cache (``QPINFER_TABLES`` in its folder), as a new user. A block is
left out only when the line before its fence says why::

    <!-- not run: needs a SLURM cluster -->

Blocks in other languages (``text``, bare fences) are output, not examples. Exit status 0 when
every page ran, else 1 with the failing page, block and output. Standard library only, so that
it runs in a fresh venv holding nothing but an installed wheel (``scripts/check_wheel.sh``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
import warnings
from pathlib import Path

RUN = ("python", "bash")
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<why>\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>\S*)")


def blocks(path: Path) -> list[tuple[str, str, int, str | None]]:
    """``(language, code, first code line, reason it is not run or None)`` of each fenced block."""
    out: list[tuple[str, str, int, str | None]] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].lstrip().startswith("```"):
            j += 1
        if j == len(lines):
            raise ValueError(f"{path}:{i + 1}: unclosed code fence")
        skip = NOT_RUN.match(lines[i - 1].strip()) if i else None
        code = textwrap.dedent("\n".join(lines[i + 1 : j]))
        out.append((m["lang"], code, i + 2, skip["why"] if skip else None))
        i = j + 1
    return out


def runnable(path: Path) -> list[tuple[str, str, int]]:
    """The blocks of ``path`` that run: ``(language, code, first code line)``."""
    return [(lang, code, line) for lang, code, line, why in blocks(path) if lang in RUN and not why]


def run_page(path: Path, workdir: Path, first: int | None = None) -> None:
    """Run the examples of ``path`` in ``workdir`` (only the ``first`` ones if given); raise
    ``RuntimeError`` naming the failing block."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("MPLBACKEND", "Agg")
    env["QPINFER_TABLES"] = str(workdir / "table-cache")  # a new user's empty table cache
    saved = dict(os.environ)
    os.environ.update(env)
    namespace: dict[str, object] = {"__name__": "__main__"}
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        for lang, code, line in runnable(path)[:first]:
            print(f"--- {path.name}: {lang} block at line {line}", flush=True)
            start = time.perf_counter()
            if lang == "bash":
                r = subprocess.run(["bash", "-euo", "pipefail", "-c", code], env=env)
                if r.returncode:
                    raise RuntimeError(f"{path}:{line}: bash block exited {r.returncode}")
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    try:
                        exec(compile(code, f"{path}:{line}", "exec"), namespace)
                    except BaseException as e:
                        traceback.print_exc()
                        raise RuntimeError(f"{path}:{line}: python block failed: {e!r}") from e
            print(f"--- {path.name}: line {line} ran in {time.perf_counter() - start:.1f} s")
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pages", nargs="+", type=Path, help="Markdown files")
    p.add_argument("--list", action="store_true", help="list the blocks and what is left out")
    p.add_argument("--first", type=int, help="run only the first N examples of each page")
    args = p.parse_args(argv)
    if args.list:
        for page in args.pages:
            for lang, _, line, why in blocks(page):
                if lang in RUN:
                    print(f"{page}:{line}: {lang}: {'not run: ' + why if why else 'runs'}")
        return 0
    for page in args.pages:
        with tempfile.TemporaryDirectory(prefix="examples-") as tmp:
            try:
                run_page(page.resolve(), Path(tmp), args.first)
            except RuntimeError as e:
                print(f"FAILED {e}", file=sys.stderr)
                return 1
        print(f"ok {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

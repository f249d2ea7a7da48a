"""What the inference benchmarks share: the sigma* table to use, best-of-N timing, and this
process's memory from ``/proc/self/status``."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import qpinfer
from qpinfer.tables import installed_table_path


def default_table_cache() -> Path:
    """``$XDG_CACHE_HOME/qpinfer/bench`` (default ``~/.cache/qpinfer/bench``)."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "qpinfer" / "bench"


def resolve_table(
    table: Path | None, likelihood: str, cache: Path, write: Callable[[Path], None], what: str
) -> qpinfer.SigmaTable:
    """``table`` if given, else the installed table for ``likelihood``, else the store ``cache``,
    made once by ``write(cache)`` (announced on stderr as ``what``, with its duration)."""
    if table is not None:
        return qpinfer.open_table(table)
    path = installed_table_path(likelihood)
    if path.exists():
        return qpinfer.open_table(path)
    if not cache.exists():
        print(f"{what} (once) ...", file=sys.stderr)
        t = time.perf_counter()
        cache.parent.mkdir(parents=True, exist_ok=True)
        write(cache)
        print(f"  done in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return qpinfer.open_table(cache)


def best_time(fit: Callable[[], object], repeats: int) -> float:
    """The shortest of ``repeats`` wall-clock timings of ``fit()``."""
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fit()
        best = min(best, time.perf_counter() - t0)
    return best


def proc_status_mb(field: str) -> float | None:
    """``VmHWM`` / ``VmRSS`` (``field``) of this process in MB (Linux), else ``None``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None

"""Keep glibc's allocator from handing the kernel's temporaries back to the OS after each call.

The sigma* kernel allocates many temporaries of 0.1-10 MB per call. glibc ``malloc`` serves
blocks above ``M_MMAP_THRESHOLD`` (128 KiB at start, adapting up to 32 MiB) with fresh ``mmap``
pages and returns the top of the heap above ``M_TRIM_THRESHOLD``, so every call page-faults
its memory in again and the kernel zeroes it: measured here on a 75 x 2001 paper tile, 0.7 s of
system time beside 2.3 s of user time (a quarter of a worker's CPU; the build's
``/usr/bin/time`` showed 505 s sys against 737 s user on the paper grid), and worse when every
core does it at once. Raising both thresholds once per process (:func:`tune_malloc`, called by
the tile, calibration and probe functions) makes the same tile 2.3 s user, ~0 s sys: ~30 %
more points per CPU-second. The price: a worker keeps up to ~0.5 GiB of freed memory for reuse
instead of returning it to the OS. Results are unaffected (allocation never changes a value).
Does nothing where glibc is not the C library (macOS, musl). Used by the table build's tiles
(qptables) and by the partitions of the dask sweep (:mod:`qpinfer.inference.sparse.dask_sweep`),
whose per-sweep M x 8192 temporaries would otherwise be mapped and zeroed again at every sweep
(dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``). Pure ctypes: light enough for
qpinfer.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["tune_malloc"]

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
#: Blocks below this come from the heap (glibc caps M_MMAP_THRESHOLD at 32 MiB on 64-bit).
MMAP_THRESHOLD = 32 * 2**20
#: Free memory at the top of the heap kept for reuse before it is returned to the OS.
TRIM_THRESHOLD = 512 * 2**20
#: Extra heap requested with each growth (fewer brk calls).
TOP_PAD = 64 * 2**20


@functools.cache
def tune_malloc() -> bool:
    """Set glibc's mmap/trim thresholds for this process once; ``True`` if glibc accepted."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    ok &= mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    ok &= mallopt(M_TOP_PAD, TOP_PAD) == 1
    return bool(ok)

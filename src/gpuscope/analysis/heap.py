"""How the commands that read a whole report in one run (``analyze``, ``stats``) use the C heap.

They make and free arrays of tens to hundreds of megabytes one after another (a column of ten
million operations is 80 MB). glibc's malloc maps each block above 32 MB afresh and unmaps it when
it is freed, so every such array is paid again in page faults: on a virtual machine about 10 µs
each, 6 s of system time in an ``analyze`` of ten million kernels. :func:`freed_memory_kept` makes
malloc serve those blocks from its heap and keep what is freed there for the next one while the
command runs. The peak resident set stays the same (within a few per cent); malloc's own settings
come back when the command ends (a long-running command, ``view``, does not ask for it).

Between parts of a command whose arrays do not outlive them (``stats``' tables), :func:`give_back`
returns what is kept to the system, so that one part's peak is not added to the next one's.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from collections.abc import Callable, Iterator

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_MAX = -4
TRIM_THRESHOLD = 2**31 - 1  # the largest it takes: free memory at the heap's top is kept up to 2 GiB
DEFAULT_TRIM_THRESHOLD = 128 * 1024  # glibc's defaults, set back afterwards
DEFAULT_MMAP_MAX = 65536


def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``; None where the C library has none (not Linux, or not glibc)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt  # type: ignore[no-any-return]


def give_back() -> bool:
    """Return the freed memory malloc keeps to the system (glibc's ``malloc_trim``); False where the
    C library has none."""
    if _mallopt() is None:
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except AttributeError:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True


@contextlib.contextmanager
def freed_memory_kept() -> Iterator[bool]:
    """While inside, glibc's malloc takes large blocks from its heap (no separate mapping each) and
    keeps freed memory there; gives whether it took both settings (False where the C library is not
    glibc's: the command then runs as it would have). Its defaults are set back on the way out."""
    mallopt = _mallopt()
    took = mallopt is not None and bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    try:
        yield took
    finally:
        if mallopt is not None:
            mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
            mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)

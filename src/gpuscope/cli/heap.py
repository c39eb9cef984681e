"""How the commands that read a whole report in one run (``analyze``, ``stats``) use the C heap.

They make and free arrays of tens to hundreds of megabytes one after another (a column of ten
million operations is 80 MB). glibc's malloc maps each block above 32 MB afresh and unmaps it when
it is freed, so every such array is paid again in page faults: on a virtual machine about 10 µs
each, 6 s of system time in an ``analyze`` of ten million kernels. :func:`keep_freed_memory` makes
malloc serve those blocks from its heap and keep what is freed there for the next one. The peak
resident set stays the same (within a few per cent); the memory is given back when the command
ends, which is why a long-running command (``view``) does not ask for it.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_MAX = -4
TRIM_THRESHOLD = 2**31 - 1  # the largest it takes: free memory at the heap's top is kept up to 2 GiB


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to take large blocks from its heap (no separate mapping each) and to keep
    freed memory there; return whether it took both settings. False where the C library is not
    glibc's (no ``mallopt``, or one that takes nothing): the command then runs as it would have."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))

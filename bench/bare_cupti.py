"""Run a Python program with CUPTI's kernel records on and nothing else: CUPTI's own floor.

The cost of kernel records alone, without gpuscope: libcupti called directly through ctypes,
the concurrent-kernel activity kind enabled before the program starts, CUPTI's buffers handed
back unread (a completed buffer is only counted). What a run costs here is what any CUPTI-based
profiler pays at least; what ``gpuscope profile -t cuda`` costs beyond it is gpuscope's.

    python3 bench/bare_cupti.py PROGRAM.py [ARGS...]

The libcupti loaded is the one beside the installed CUDA wheels (``nvidia/*/lib/libcupti.so*``),
the one torch loads, or the path in ``BARE_CUPTI_LIB``. At exit the number of completed buffers and
their bytes go to stderr.
"""

from __future__ import annotations

import atexit
import ctypes
import glob
import os
import runpy
import sys

CONCURRENT_KERNEL = 10  # CUpti_ActivityKind
BUFFER_BYTES = 8 << 20
REQUEST = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint8)), ctypes.POINTER(ctypes.c_size_t),
                           ctypes.POINTER(ctypes.c_size_t))
COMPLETE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint8), ctypes.c_size_t,
                            ctypes.c_size_t)


def find_libcupti() -> str:
    """The libcupti to load: ``BARE_CUPTI_LIB``, else the one among the installed ``nvidia`` wheels."""
    if os.environ.get("BARE_CUPTI_LIB"):
        return os.environ["BARE_CUPTI_LIB"]
    for base in sys.path:
        found = sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", "libcupti.so*"))
                       + glob.glob(os.path.join(base, "nvidia", "cuda_cupti", "lib", "libcupti.so*")))
        if found:
            return found[0]
    sys.exit("bare_cupti: no libcupti found beside the installed nvidia wheels (set BARE_CUPTI_LIB)")


class Bare:
    """CUPTI's kernel records enabled, its buffers recycled unread."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.free: list[ctypes.Array] = []
        self.lent: dict[int, ctypes.Array] = {}
        self.buffers = 0
        self.bytes = 0
        self._request = REQUEST(self.request)  # kept alive: CUPTI holds the pointers
        self._complete = COMPLETE(self.complete)

    def request(self, buf: object, size: object, max_records: object) -> None:
        block = self.free.pop() if self.free else ctypes.create_string_buffer(BUFFER_BYTES)
        self.lent[ctypes.addressof(block)] = block
        buf[0] = ctypes.cast(block, ctypes.POINTER(ctypes.c_uint8))  # type: ignore[index]
        size[0] = BUFFER_BYTES  # type: ignore[index]
        max_records[0] = 0  # type: ignore[index]

    def complete(self, context: object, stream: int, buf: object, size: int, valid: int) -> None:
        block = self.lent.pop(ctypes.addressof(buf.contents), None)  # type: ignore[attr-defined]
        self.buffers += 1
        self.bytes += int(valid)
        if block is not None:
            self.free.append(block)

    def start(self) -> None:
        check(self.lib.cuptiActivityRegisterCallbacks(self._request, self._complete), "register callbacks")
        check(self.lib.cuptiActivityEnable(CONCURRENT_KERNEL), "enable kernel records")
        atexit.register(self.stop)

    def stop(self) -> None:
        self.lib.cuptiActivityFlushAll(1)
        self.lib.cuptiActivityDisable(CONCURRENT_KERNEL)
        self.lib.cuptiFinalize()
        print(f"bare_cupti: {self.buffers} buffers, {self.bytes} bytes of kernel records", file=sys.stderr)


def check(result: int, what: str) -> None:
    if result != 0:
        sys.exit(f"bare_cupti: CUPTI could not {what} (CUptiResult {result})")


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: bare_cupti.py PROGRAM.py [ARGS...]")
    path = find_libcupti()
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        sys.exit(f"bare_cupti: could not load {path}: {exc}")
    Bare(lib).start()
    program = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(program)))
    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main()

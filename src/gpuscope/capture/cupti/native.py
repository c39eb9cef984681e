"""The C buffer callbacks of ``handoff.c``, compiled on first use and loaded with ctypes.

Why C: CUPTI hands over completed buffers on its own thread while holding its own locks; a Python
callback must take the GIL there, and a program thread that holds the GIL while it waits for one
of those locks (torch.compile loading a kernel with ``cuModuleLoad``) then hangs forever. No
library offers CUPTI buffer callbacks that need no GIL, so gpuscope ships a few hundred lines of C. They
use no Python headers, so one build serves every Python version; it is cached in gpuscope's cache
directory (:func:`cache_dir`), keyed by the source's hash, and built with the C compiler that Triton and
torch.compile need anyway (``$CC``, else ``cc``/``gcc``). Without a compiler gpuscope falls back
to Python callbacks and says so.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

SOURCE = Path(__file__).with_name("handoff.c")
NATIVE_ENV = "GPUSCOPE_NATIVE_HANDOFF"  # "0": Python callbacks even where the C ones build


class NativeUnavailable(RuntimeError):
    """The C callbacks cannot be built or loaded here (the message says why)."""


def cache_dir() -> Path:
    """Where built libraries are kept: ``$GPUSCOPE_CACHE_DIR/native``, else
    ``$XDG_CACHE_HOME/gpuscope/native``, else ``~/.cache/gpuscope/native`` (as the roofline's
    calibrations are)."""
    base = os.environ.get("GPUSCOPE_CACHE_DIR")
    if base:
        return Path(base) / "native"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "gpuscope" / "native"


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def build(directory: Path | None = None) -> Path:
    """Return the path of the built library, building it first if needed; NativeUnavailable if
    it cannot be built."""
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    directory = directory or cache_dir()
    target = directory / f"libgpuscope_handoff_{digest}.so"
    if target.exists():
        return target
    cc = _compiler()
    if cc is None:
        raise NativeUnavailable("no C compiler (cc, gcc, clang or $CC) to build gpuscope's CUPTI buffer callbacks")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".handoff.", suffix=".so", dir=directory)
        os.close(fd)
    except OSError as exc:
        raise NativeUnavailable(f"cannot write to {directory}: {exc.strerror}") from None
    try:
        res = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread", "-o", tmp, str(SOURCE)],
                             capture_output=True, text=True, timeout=120, check=False)
        if res.returncode != 0:
            first = (res.stderr.strip().splitlines() or ["(no message)"])[0]
            raise NativeUnavailable(f"{cc} could not build gpuscope's CUPTI buffer callbacks: {first}")
        os.replace(tmp, target)  # atomic: processes building at once each leave a whole library
    except (OSError, subprocess.SubprocessError) as exc:
        raise NativeUnavailable(f"building gpuscope's CUPTI buffer callbacks failed: {exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def load(directory: Path | None = None) -> ctypes.CDLL:
    """Build (if needed) and load the library, with its functions' signatures set."""
    if os.environ.get(NATIVE_ENV) == "0":
        raise NativeUnavailable(f"{NATIVE_ENV}=0")
    lib = ctypes.CDLL(str(build(directory)))  # CDLL: the GIL is released during each call
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.gs_set_buffer_size.argtypes, lib.gs_set_buffer_size.restype = [sz], None
    lib.gs_pop.argtypes, lib.gs_pop.restype = [ctypes.POINTER(vp), ctypes.POINTER(sz)], ctypes.c_int
    lib.gs_release.argtypes, lib.gs_release.restype = [vp, sz], None
    lib.gs_requested.argtypes = [ctypes.POINTER(vp), ctypes.POINTER(sz), ctypes.POINTER(sz)]
    lib.gs_requested.restype = None
    lib.gs_completed.argtypes = [vp, ctypes.c_uint32, vp, sz, sz]
    lib.gs_completed.restype = None
    for name in ("gs_allocated", "gs_dropped_buffers", "gs_failed_allocations"):
        getattr(lib, name).restype = ctypes.c_uint64
    lib.gs_queued.restype = sz
    u32 = ctypes.c_uint32
    lib.gs_api_callback.argtypes, lib.gs_api_callback.restype = [vp, u32, u32, vp], None
    lib.gs_set_forward.argtypes, lib.gs_set_forward.restype = [vp], None
    lib.gs_set_anchor.argtypes, lib.gs_set_anchor.restype = [u32, u32, vp], None
    lib.gs_anchors_pending.argtypes, lib.gs_anchors_pending.restype = [], sz
    lib.gs_anchors_take.argtypes, lib.gs_anchors_take.restype = [ctypes.POINTER(ctypes.c_int64), sz], sz
    lib.gs_anchors_forget_since.argtypes, lib.gs_anchors_forget_since.restype = [sz], None
    lib.gs_anchors_lost.argtypes, lib.gs_anchors_lost.restype = [], ctypes.c_uint64
    lib.gs_set_timed.argtypes, lib.gs_set_timed.restype = [u32, u32], ctypes.c_int
    lib.gs_clear_timed.argtypes, lib.gs_clear_timed.restype = [], None
    lib.gs_set_timed_on.argtypes, lib.gs_set_timed_on.restype = [ctypes.c_int], None
    lib.gs_timed_reset.argtypes, lib.gs_timed_reset.restype = [], None
    lib.gs_timed_take.argtypes, lib.gs_timed_take.restype = [ctypes.POINTER(ctypes.c_int64), sz], sz
    lib.gs_timed_pending.argtypes, lib.gs_timed_pending.restype = [], sz
    lib.gs_timed_lost.argtypes, lib.gs_timed_lost.restype = [], ctypes.c_uint64
    lib.gs_timed_count.argtypes, lib.gs_timed_count.restype = [], ctypes.c_uint64
    lib.gs_set_graph_watch.argtypes, lib.gs_set_graph_watch.restype = [u32, u32], ctypes.c_int
    lib.gs_set_graph_switch.argtypes = [vp, vp, ctypes.c_int, ctypes.c_int64]
    lib.gs_set_graph_switch.restype = None
    lib.gs_graph_state.argtypes, lib.gs_graph_state.restype = [ctypes.POINTER(ctypes.c_int64)], None
    return lib


def anchor_function(lib: ctypes.CDLL) -> Callable[[], int]:
    """Return ``gs_anchor`` of the loaded library, called keeping the GIL (it takes well under a
    microsecond: releasing and taking the GIL again would cost as much, and let another thread in)."""
    fn = ctypes.PyDLL(lib._name).gs_anchor
    fn.argtypes, fn.restype = [], ctypes.c_uint32
    return fn

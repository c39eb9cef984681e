"""C++ name demangling through the C++ runtime's own ``__cxa_demangle`` (libstdc++ or libc++)."""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache
from typing import Any

_LIBS = ("libstdc++.so.6", "libc++.so.1", "libc++abi.so.1", "libc++.1.dylib")


@lru_cache(maxsize=1)
def _cxa_demangle() -> Any:
    for name in (*_LIBS, ctypes.util.find_library("stdc++"), ctypes.util.find_library("c++")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        fn = getattr(lib, "__cxa_demangle", None)
        if fn is None:
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        return fn
    return None


@lru_cache(maxsize=1)
def _free() -> Any:
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    return libc.free


def demangle(name: str) -> str:
    """Return the demangled form of an Itanium-ABI mangled name, or ``name`` unchanged."""
    if not name.startswith("_Z"):
        return name
    fn = _cxa_demangle()
    if fn is None:
        return name
    status = ctypes.c_int(0)
    ptr = fn(name.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        return name
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        _free()(ptr)

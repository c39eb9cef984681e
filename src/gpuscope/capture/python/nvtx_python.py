"""The ``nvtx`` package, recorded by gpuscope while it profiles the process.

CUPTI records NVTX calls made through the nvtx package in a named domain, but nothing made in its
default domain (``nvtx.annotate("x")``; see bench/RESULTS.md). So while gpuscope profiles, the
package's module-level functions and ``annotate`` record into gpuscope's range recorder instead
(its ``Domain`` objects still call NVTX). No profiler other than gpuscope can listen meanwhile, so
nothing is lost by not calling NVTX itself.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from ... import annotation
from .ranges import RangeRecorder

if TYPE_CHECKING:
    from ..collectors import Context

SOURCE = "nvtx-python"


def install(nvtx: types.ModuleType, recorder: RangeRecorder) -> None:
    """Point the nvtx package's annotate, push/pop, start/end and mark at ``recorder``."""
    backend = annotation.RecorderBackend(recorder, SOURCE)
    api = annotation.make_api(lambda: backend)
    targets = [nvtx]
    inner = getattr(nvtx, "nvtx", None)
    if isinstance(inner, types.ModuleType):
        targets.append(inner)
    for module in targets:
        for name, value in api.items():
            if hasattr(module, name):
                _replaced.append((module, name, getattr(module, name)))
                setattr(module, name, value)


_replaced: list[tuple[types.ModuleType, str, object]] = []


def uninstall() -> None:
    """Give the nvtx package back its own functions (after profiling a block of a process)."""
    while _replaced:
        module, name, original = _replaced.pop()
        setattr(module, name, original)



class NvtxPackage:
    """The nvtx package pointed at the range recorder: a collector with no rows of its own (its
    ranges are the range recorder's) that gives the package back its functions at :meth:`uninstall`."""

    def set_collecting(self, on: bool) -> None:
        """Nothing: the range recorder follows the capture window."""

    def take_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Nothing: the range recorder delivers the ranges."""
        return {}

    def uninstall(self) -> None:
        """Give the nvtx package back its own functions."""
        uninstall()


def start(ctx: Context, module: Any = None) -> NvtxPackage:
    """Point the imported nvtx package (``module``) at the process's range recorder."""
    install(module, ctx.collector("ranges"))
    return NvtxPackage()

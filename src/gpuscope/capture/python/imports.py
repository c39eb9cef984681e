"""Run a function right after a module is imported by the profiled program (post-import hooks).

gpuscope hooks into libraries (torch, the nvtx package) only if and when the program imports them,
so a program that never imports torch pays nothing for PyTorch support. Standard library only.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import importlib.machinery
import sys
import types
from typing import Callable, Sequence

Hook = Callable[[types.ModuleType], None]


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, hooks: dict[str, list[Hook]], on_error: Callable[[str, BaseException], None]) -> None:
        self.hooks = hooks
        self.on_error = on_error
        self._busy: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.hooks or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)  # the spec the rest of sys.meta_path finds
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module
        hooks, on_error = self.hooks.pop(fullname), self.on_error

        def exec_then_hook(module: types.ModuleType) -> None:
            exec_module(module)
            for hook in hooks:
                try:
                    hook(module)
                except Exception as exc:  # noqa: BLE001  (a failed hook never breaks the import)
                    on_error(fullname, exc)

        loader.exec_module = exec_then_hook  # type: ignore[method-assign]
        return spec


def when_imported(hooks: dict[str, list[Hook]], on_error: Callable[[str, BaseException], None]) -> None:
    """Call each hook with its module once the module is imported (now, if it already is)."""
    pending = {}
    for name, funcs in hooks.items():
        module = sys.modules.get(name)
        if module is None:
            pending[name] = list(funcs)
            continue
        for hook in funcs:
            try:
                hook(module)
            except Exception as exc:  # noqa: BLE001
                on_error(name, exc)
    if pending:
        sys.meta_path.insert(0, _Finder(pending, on_error))


def forget_all() -> None:
    """Drop every hook still waiting for its module (after profiling a block of a process)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]

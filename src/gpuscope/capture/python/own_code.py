"""The code objects of gpuscope's own loaded modules, for torch.compile to run as they are
(:meth:`.torch_hooks.TorchHooks._not_compiled_alone`)."""

from __future__ import annotations

import sys
import types
import weakref
from typing import Any, Iterator


def own_code() -> Iterator[Any]:
    """Every code object of gpuscope's loaded modules: functions, methods, and the closures they make
    (the wrappers of ``Module.__call__`` among them)."""
    seen: set[int] = set()

    def walk(code: Any) -> Iterator[Any]:
        if id(code) in seen:
            return
        seen.add(id(code))
        yield code
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                yield from walk(const)

    def of(obj: Any) -> Iterator[Any]:
        func = getattr(obj, "__func__", obj)
        code = getattr(func, "__code__", None)
        if isinstance(code, types.CodeType):
            yield from walk(code)

    root = __name__.split(".")[0]
    for name, module in list(sys.modules.items()):
        if module is None or not (name == root or name.startswith(root + ".")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == name:
                for member in list(vars(value).values()):
                    yield from of(member.fget if isinstance(member, property) else member)
            elif getattr(value, "__module__", None) == name:
                yield from of(value)
    # the standard library's Python code the wrappers call (their names of modules live in a WeakKeyDictionary)
    for member in vars(weakref.WeakKeyDictionary).values():
        yield from of(member)

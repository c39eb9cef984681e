"""The code objects of gpuscope's own loaded modules, for torch.compile to run as they are
(:meth:`.torch_hooks.TorchHooks._not_compiled_alone`)."""

from __future__ import annotations

import _weakrefset
import sys
import threading
import types
import weakref
from typing import Any, Callable, Iterator


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

    def members(member: Any) -> Iterator[Any]:  # a property's getter, setter and deleter are three codes
        for part in (member.fget, member.fset, member.fdel) if isinstance(member, property) else (member,):
            yield from of(part)

    def of(obj: Any) -> Iterator[Any]:
        func = getattr(obj, "__func__", obj)
        code = getattr(func, "__code__", None)
        if isinstance(code, types.CodeType):
            yield from walk(code)

    def module_code(module: Any, name: str, kind: Any) -> Iterator[Any]:
        """The code of the classes and functions ``module`` defines (``kind``: what a function is)."""
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == name:
                for member in list(vars(value).values()):
                    yield from members(member)
            elif isinstance(value, kind) and getattr(value, "__module__", None) == name:
                yield from of(value)

    root = __name__.split(".")[0]
    for name, module in list(sys.modules.items()):
        if module is not None and (name == root or name.startswith(root + ".")):
            yield from module_code(module, name, object)
    # the standard library's Python code the wrappers call (their names of modules live in a WeakKeyDictionary)
    for member in vars(weakref.WeakKeyDictionary).values():
        yield from of(member)
    # and the threads gpuscope starts, and wakes, from a step mark: a program that compiles its
    # model's ``__call__`` (transformers' static cache) marks its steps from inside the compiled call,
    # and dynamo would count each of these frames as one compiled (threading.Thread.start, Event.wait,
    # Condition.notify, the WeakSet of threads): 16 frames where the program untraced compiles one
    for module in (threading, _weakrefset):
        yield from module_code(module, module.__name__, types.FunctionType)


def run_as_is(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` (where dynamo's frame evaluation needs no unsetting)."""
    return fn()


def outside_dynamo() -> Callable[[Callable[[], Any]], Any]:
    """Return a caller that runs a function with torch.compile's frame evaluation off on this thread.

    A step mark can run inside a compiled call: where the program compiles its model's own
    ``__call__`` (``torch.compile(model.__call__)``, as transformers does for a static-cache decode), the
    compiled function is gpuscope's wrapper, and the mark after the outermost module call is made
    inside it. What the mark does then (the overhead probe starting its watcher thread, collection
    switched off and on through CUPTI's Python bindings) would be frames dynamo sees and counts as
    compiled, one per function, which the program untraced never has: the mark's work runs with
    dynamo's callback unset, as ``torch._dynamo.disable`` does, and set back after. Without the
    call (an older torch), the function is run as it is."""
    try:
        from torch._C._dynamo.eval_frame import set_eval_frame  # noqa: PLC0415
    except Exception:  # noqa: BLE001
        return run_as_is

    def outside(fn: Callable[[], Any]) -> Any:
        prior = set_eval_frame(None)
        try:
            return fn()
        finally:
            set_eval_frame(prior)

    return outside


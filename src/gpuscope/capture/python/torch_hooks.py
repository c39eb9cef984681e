"""PyTorch ranges without code changes: every module's forward and backward, optimizer steps,
``zero_grad``, ``loss.backward()``, the wait for a DataLoader batch, and step boundaries.

Installed right after the program imports torch. Forward ranges come from wrapping
``nn.Module.__call__``: global module hooks would force every module call onto PyTorch's slow
hook path (about 1 µs more per call on the CPU machine before any hook runs, 2.8 µs with two hooks
that only append a time; the wrapper that passes a call through costs 0.07 µs). Where nothing else
is asked of a forward range (no backward ranges, no capture range that watches range names), the
wrapper only logs ``(time, ~kind)`` and ``time`` in its thread's log of the range recorder
(ranges.py), the kind being a small int for the module's qualified name, found once per module; the
launcher pairs them into ranges (trace/range_log.py), out of the program's interpreter. Where
launch anchors are on, the wrapper makes one right before each of the two clock reads (the push/pop path cost about 3 µs more per module call on an H200 host,
bench/RESULTS.md).
Module backward ranges (``--trace torch-backward``) come from tensor hooks (backward_ranges.py).
Parameterless leaf modules (activations, dropout) get no backward range of their own: their few
backward kernels count to the module around them, which saves two tensor hooks a call. Module
ranges may be left out of some steps, but for the outermost call (module_steps.py).
Tensor hooks leave the autograd graph as it is, so in-place ops on module outputs keep working.
Inside code that torch.compile traces, the wrapper does nothing, so compiled graphs are not
broken; the compiled module's own call is still a range.

Nothing here may raise into the program: a failing hook is disabled and reported once.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

from .backward_ranges import SOURCE, BackwardRanges
from .imports import when_imported
from .module_steps import DEFAULT, SAMPLED, StepGate, from_env
from .own_code import outside_dynamo, own_code, run_as_is
from .ranges import RangeRecorder

if TYPE_CHECKING:
    from ..collectors import Context


OUTER = "model"  # the outermost call's range in a step without module ranges (module_steps.py)


class TorchHooks(BackwardRanges):
    """Records PyTorch ranges in a RangeRecorder (module backward ranges: :class:`.backward_ranges.BackwardRanges`)."""

    def __init__(self, recorder: RangeRecorder, diag: Callable[[str, str], None], backward: bool = True) -> None:
        self.r = recorder
        self.diag = diag
        self.counts = {"reentrant_calls": 0, "modules_with_own_hooks": 0, "backward_closed_at_pass_end": 0,
                       "hook_errors": 0, "dataloader_cpu_ns": 0, "dataloader_wall_ns": 0}
        self._names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._classes: set[tuple[str, str]] = set()  # (qualified name, class name) said already
        self._class_rows: collections.deque[tuple[str, str]] = collections.deque()  # to the report's module_class
        self._active: threading.local = threading.local()
        self._open_backward: dict[int, str] = {}  # range id -> module name, of the running pass
        self._closed_at_pass_end: dict[str, int] = {}  # module name -> backward ranges ended with the pass
        self._waiting: dict[Any, list[Callable[[Any], None]]] = {}  # parameter -> ends to signal
        self._accumulate_hooked: set[int] = set()
        self._step_optimizer: int | None = None
        self._disabled = False
        self.backward = backward  # per-module backward ranges (--trace torch-backward)
        self.collecting = True  # False outside a capture window: calls pass straight through
        self._is_compiling: Callable[[], bool] = lambda: False
        self._kinds: dict[int, int] = {}  # id(module) -> ~kind of its forward range (recorder.kind), 0: none
        self._outer_kinds: dict[int, int] = {}  # id(module) -> ~kind of its range as an outermost call (OUTER)
        self._alive: dict[int, Any] = {}  # id(module) -> a weak reference that forgets the kind with the module
        self.force_full = False  # forward ranges through push/pop always (for measuring that path)
        self._depth = 0  # module calls open on the main thread, counted while nothing marks steps
        self._skipping = False  # torch.compile runs gpuscope's frames as they are (_not_compiled_alone)
        self._outside: Callable[[Callable[[], Any]], Any] = run_as_is  # runs a step mark's work (_not_compiled_alone)
        self.fast = False  # forward ranges go to the thread's log (see _refresh)
        self.gate = StepGate(DEFAULT)  # which steps record module ranges (module_steps.py)
        self.modules_on = True  # this step records module ranges
        self._refresh()

    # -- installation ----------------------------------------------------------------------
    def set_collecting(self, on: bool) -> None:
        """Open ranges (``on``), or let every call pass straight through."""
        self.collecting = on
        self._refresh()

    @property
    def logged(self) -> bool:
        """Whether forward ranges go to the thread's log while collecting: no backward ranges, and no
        capture window watching range names (those need push/pop). Launch anchors are made there too."""
        return not (self.backward or self.force_full or self.r.watch is not None)

    def _refresh(self) -> None:
        """Decide, once per change of state, whether module calls take the logged path."""
        self.fast = self.collecting and not self._disabled and self.logged and self.modules_on
        # module calls go straight to PyTorch: collection off, or a step without module ranges
        self.passing = not self.collecting or self._disabled or (self.logged and not self.modules_on)
        # a step without module ranges: its outermost module calls on the main thread are ranges still
        self.outer_only = self.collecting and not self._disabled and self.logged and not self.modules_on
        self.fast_steps = self.collecting and not self._disabled and self.r.watch is None

    def step_ended(self, count: int) -> None:
        """A step ended, ``count`` steps counted now (the capture window's count): decide whether the
        next one records module ranges (module_steps.py)."""
        on = self.gate.step_ended(count)
        self.counts.update(self.gate.counts())
        if on != self.modules_on:
            self.modules_on = on
            self._refresh()

    def take_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """The class of each module named since the last call (``module_class`` rows: name, class);
        the hooks' ranges are delivered by the range recorder."""
        rows = []
        while self._class_rows:  # appended on the program's threads: popleft takes each once
            rows.append(self._class_rows.popleft())
        return {"module_class": rows} if rows else {}

    def install(self, torch: Any) -> None:
        """Register the global hooks and wrap the few functions that have no hook."""
        import torch.nn.modules.module as module_mod  # noqa: PLC0415
        import torch.optim.optimizer as optim_mod  # noqa: PLC0415
        import torch.utils.data.dataloader as data_mod  # noqa: PLC0415

        compiler = getattr(torch, "compiler", None)
        if compiler is not None and hasattr(compiler, "is_compiling"):
            self._is_compiling = compiler.is_compiling
        self._torch = torch
        module_mod.Module.__call__ = self._module_call(module_mod.Module.__call__)  # type: ignore[method-assign]
        pre, post = self._step_hooks()
        self._handles = [optim_mod.register_optimizer_step_pre_hook(pre),
                         optim_mod.register_optimizer_step_post_hook(post)]
        optim_mod.Optimizer.zero_grad = self._ranged(  # type: ignore[method-assign]
            optim_mod.Optimizer.zero_grad, "zero_grad", lambda a: f"{type(a[0]).__name__}.zero_grad")
        data_mod._BaseDataLoaderIter.__next__ = self._ranged(  # type: ignore[method-assign]
            data_mod._BaseDataLoaderIter.__next__, "dataloader", lambda a: "DataLoader.__next__")
        torch.autograd.backward = self._backward_pass(torch.autograd.backward, "backward")
        torch.autograd.grad = self._backward_pass(torch.autograd.grad, "grad")
        os.register_at_fork(after_in_child=self._forked)
        self._patched = [(module_mod.Module, "__call__"), (optim_mod.Optimizer, "zero_grad"),
                         (data_mod._BaseDataLoaderIter, "__next__"), (torch.autograd, "backward"),
                         (torch.autograd, "grad")]
        self._not_compiled_alone()

    def _not_compiled_alone(self) -> None:
        """Tell torch.compile never to compile gpuscope's own code as frames of their own.

        Where a compiled model breaks its graph, dynamo compiles, one by one, the frames that the
        rest of its forward calls. torch's own ``Module.__call__`` is not among them (dynamo skips
        torch's files as such frames), but gpuscope's wrapper of it would be: one code object for
        every module, whose guards (the module's class) fail at each new class, recompiling it
        until dynamo's cache limit sends the model back to eager; and so would every gpuscope
        function the wrappers call. Each of gpuscope's code objects is skipped as a frame of its
        own: it runs as it is, the frames it calls (the modules' forward) are compiled as before,
        and traced from inside a compiled forward it is inlined as before."""
        if "torch._dynamo.eval_frame" not in sys.modules:
            # importing dynamo costs about 2 s of CPU: told when the program itself brings it in
            # (torch.compile, torch.export), which is before it can compile anything
            when_imported({"torch._dynamo.eval_frame": [lambda _: self._not_compiled_alone()]},
                          lambda name, exc: self.diag("warning", f"after importing {name}: {exc!r}"))
            return
        try:
            from torch._dynamo.eval_frame import skip_code  # noqa: PLC0415
        except Exception:  # noqa: BLE001  (an older torch: nothing to tell)
            return
        try:
            for code in own_code():
                skip_code(code)
        except Exception as exc:  # noqa: BLE001
            self.diag("warning", f"torch.compile may recompile at module calls after a graph break: {exc!r}")
        else:
            self._skipping = True
        self._outside = outside_dynamo()

    def _forked(self) -> None:
        """In a forked child (a DataLoader worker), which is not recorded and has no flush thread: pass
        every call through, so that nothing piles up in its logs."""
        self._disabled = True
        self._refresh()

    def uninstall(self) -> None:
        """Put back what :meth:`install` replaced (for profiling a block of a longer-running process).

        A wrapper that someone else has wrapped again since stays, passing calls straight through.
        """
        self._disabled = True
        self._refresh()
        for handle in getattr(self, "_handles", ()):
            handle.remove()
        for owner, name in getattr(self, "_patched", ()):
            current = getattr(owner, name)
            original = getattr(current, "__wrapped__", None)
            if original is not None and getattr(current, "_gpuscope_hooks", None) is self:
                setattr(owner, name, original)

    def _ranged(self, func: Callable[..., Any], category: str, name: Callable[[tuple[Any, ...]], str]) -> Callable[..., Any]:
        """Wrap ``func`` so that each call is a range."""
        r = self.r

        timed = category == "dataloader"  # its CPU time against its wall time: loading that computes or waits
        counts = self.counts

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self._is_compiling() or self._disabled or not self.collecting:  # compiling first: no guards
                return func(*args, **kwargs)
            r.push(name(args), "", SOURCE, category)
            if timed:
                cpu0, wall0 = time.thread_time_ns(), time.monotonic_ns()
            try:
                return func(*args, **kwargs)
            finally:
                if timed:
                    counts["dataloader_cpu_ns"] += time.thread_time_ns() - cpu0
                    counts["dataloader_wall_ns"] += time.monotonic_ns() - wall0
                r.pop()

        wrapper.__wrapped__ = func  # type: ignore[attr-defined]
        wrapper.__name__ = getattr(func, "__name__", "wrapper")
        wrapper.__doc__ = func.__doc__
        wrapper._gpuscope_hooks = self  # type: ignore[attr-defined]
        return wrapper

    # -- modules ---------------------------------------------------------------------------
    def name_of(self, module: Any) -> str:
        """Return a module's qualified name: its root's class name, then the attribute path."""
        name = self._names.get(module)
        if name is None:
            orig = getattr(module, "_orig_mod", None)  # torch.compile's wrapper: name the original
            root = type(orig if orig is not None else module).__name__
            for sub_name, sub in module.named_modules(prefix=root):
                qualified = self._names.setdefault(sub, sub_name.replace("._orig_mod", ""))
                inner = getattr(sub, "_orig_mod", None)  # a compiled wrapper stands for the original's class
                said = (qualified, type(inner if inner is not None else sub).__name__)
                if said not in self._classes:
                    self._classes.add(said)
                    self._class_rows.append(said)
                if sub._forward_hooks or sub._forward_pre_hooks or sub._backward_hooks:
                    self.counts["modules_with_own_hooks"] += 1
            name = self._names[module]
        return name

    def _module_call(self, call: Callable[..., Any]) -> Callable[..., Any]:
        """Wrap ``nn.Module.__call__``: each call is a forward range. On the logged path (:attr:`fast`)
        the wrapper reads the clock twice and appends to its thread's log, making a launch anchor
        before each read where anchors are on; otherwise it takes the full path
        (:meth:`_full_module_call`). Return the wrapper."""
        full = self._full_module_call(call)
        r, kinds, local, clock, is_compiling = self.r, self._kinds, self.r._local, time.monotonic_ns, self._is_compiling
        outer_kinds = self._outer_kinds
        get_ident, main = threading.get_ident, threading.main_thread().ident

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            # First, before any state is read: torch.compile traces this frame (the compiled module's
            # own __call__), and every attribute it reads here would become a guard of the compiled
            # graph, failing (and recompiling) whenever collection switches on or off.
            if is_compiling():
                return call(module, *args, **kwargs)
            if not self.fast:
                if self.passing:  # outside a capture window or a step with module ranges: one frame
                    return call(module, *args, **kwargs)
                return full(module, *args, **kwargs)
            try:
                kind = kinds[id(module)]
                log = local.log
            except (KeyError, AttributeError):
                try:
                    kind, log = self._first_call(module)
                except Exception as exc:  # noqa: BLE001
                    self._fail(exc)
                    return call(module, *args, **kwargs)
            if not kind:  # torch.compile's wrapper: the range is the original module's call inside it
                return call(module, *args, **kwargs)
            anchor = r.anchor
            if anchor is None:
                log.extend((clock(), kind))
                try:
                    return call(module, *args, **kwargs)
                finally:
                    log.append(clock())
            anchor()
            log.extend((clock(), kind))
            try:
                return call(module, *args, **kwargs)
            finally:
                anchor()
                log.append(clock())

        def counting(module: Any, *args: Any, **kwargs: Any) -> Any:
            if is_compiling():  # first, as above
                return call(module, *args, **kwargs)
            if self.outer_only:
                if self._depth or get_ident() != main:
                    return call(module, *args, **kwargs)
                return outer(module, *args, **kwargs)
            if r.step_marked or get_ident() != main:
                return call(module, *args, **kwargs) if self.passing else __call__(module, *args, **kwargs)
            self._depth += 1
            try:
                return call(module, *args, **kwargs) if self.passing else __call__(module, *args, **kwargs)
            finally:
                self._depth -= 1
                if not self._depth and not self._disabled:
                    self._iteration_mark()

        def outer(module: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                kind = outer_kinds[id(module)]
                log = local.log
            except (KeyError, AttributeError):
                try:
                    kind, log = self._first_call(module, OUTER)
                except Exception as exc:  # noqa: BLE001
                    self._fail(exc)
                    return call(module, *args, **kwargs)
            anchor = r.anchor
            if anchor is not None:
                anchor()
            log.extend((clock(), kind))
            self._depth += 1
            try:
                return call(module, *args, **kwargs)
            finally:
                self._depth -= 1
                if anchor is not None:
                    anchor()
                log.append(clock())
                if not self._depth and not r.step_marked and not self._disabled:
                    self._iteration_mark()

        counting.__wrapped__ = call  # type: ignore[attr-defined]
        counting._gpuscope_hooks = self  # type: ignore[attr-defined]
        return counting

    def _iteration_mark(self) -> None:
        """An outermost module call of the main thread returned, in a program that has made no step mark
        (yet): mark it, so that an inference loop's iterations are counted (the overhead probe)."""
        try:
            self._outside(self._mark_iteration)
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)

    def _mark_iteration(self) -> None:
        self.r.mark("iteration", "", "module", "iteration")

    def _first_call(self, module: Any, category: str = "forward") -> tuple[int, list[Any]]:
        """Return the complement of the kind of ``module``'s range of ``category`` (0: no forward range of
        its own), kept until the module is gone, and this thread's log."""
        key = id(module)
        kinds = self._kinds if category == "forward" else self._outer_kinds
        kind = kinds.get(key)
        if kind is None:
            wrapper = category == "forward" and self._compiled_wrapper(module)
            kind = 0 if wrapper else ~self.r.kind(self.name_of(module), "", SOURCE, category)
            all_kinds, alive = (self._kinds, self._outer_kinds), self._alive

            def forget(_: Any, key: int = key) -> None:  # the id may be reused by the next module
                for known in all_kinds:
                    known.pop(key, None)
                alive.pop(key, None)

            alive[key] = weakref.ref(module, forget)
            kinds[key] = kind
        return kind, self.r.thread_log()

    def _compiled_wrapper(self, module: Any) -> bool:
        """Whether ``module`` is torch.compile's wrapper of another module whose own call this wrapper
        records: where torch.compile is told to run gpuscope's frames as they are, the original module's
        call is a range of its own, inside the wrapper's (named alike: one range is enough)."""
        return self._skipping and type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod")

    def _full_module_call(self, call: Callable[..., Any]) -> Callable[..., Any]:
        """Return ``nn.Module.__call__`` wrapped through push/pop (launch anchors and a capture window's
        watch see each range), arming the module's backward range where those are recorded."""
        r, names, active, torch = self.r, self._names, self._active, self._torch

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if self._is_compiling() or self._disabled or not self.collecting:  # compiling first: no guards
                return call(module, *args, **kwargs)
            try:
                if self._compiled_wrapper(module):  # the range is the original module's call inside it
                    return call(module, *args, **kwargs)
                name = names.get(module) or self.name_of(module)
                running = getattr(active, "modules", None)
                if running is None:
                    running = active.modules = set()
                reentrant = module in running
                if reentrant:
                    self.counts["reentrant_calls"] += 1
                else:
                    running.add(module)
                r.push(name, "", SOURCE, "forward")
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)
                return call(module, *args, **kwargs)
            try:
                output = call(module, *args, **kwargs)
            finally:
                r.pop()
                if not reentrant:
                    running.discard(module)
            if self.backward and torch.is_grad_enabled() and (module._parameters or module._modules):
                try:
                    self._arm_backward(module, name, args, output)
                except Exception as exc:  # noqa: BLE001
                    self._fail(exc)
            return output

        __call__.__wrapped__ = call  # type: ignore[attr-defined]
        __call__._gpuscope_hooks = self  # type: ignore[attr-defined]
        return __call__

    def _fail(self, exc: BaseException) -> None:
        self.counts["hook_errors"] += 1
        if not self._disabled:
            self.diag("warning", f"PyTorch ranges stopped after an error in gpuscope's hook: {exc!r}")
        self._disabled = True
        self._refresh()

    # -- optimizer and steps -------------------------------------------------------------
    def _step_hooks(self) -> tuple[Callable[..., None], Callable[..., None]]:
        """Return the optimizer step's pre and post hooks: a range around each step, then a step mark
        for the first optimizer's steps.

        They run once a step, inside the program's loop, where a few microseconds are a few percent
        of a small model's step; so they do as little as the state allows. While collecting on the
        logged path (no capture window watching range names) the range goes to the
        thread's log, like a module call's (with a launch anchor before each clock read where anchors
        are on). Outside a capture window, with nothing watching range
        names, there is no range at all. Otherwise it is pushed and popped. Which of the three the
        pre hook did is kept on the thread, so that its post hook ends what was begun even where
        collection switched in between. The step mark is recorded always.
        """
        r, local, clock, is_compiling = self.r, self.r._local, time.monotonic_ns, self._is_compiling
        kinds: dict[type, int] = {}  # optimizer class -> its logged range's kind
        names: dict[type, str] = {}

        def step_mark() -> None:
            r.mark("step", "", SOURCE, "step")

        def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
            if is_compiling() or self._disabled:
                return None
            try:
                began = getattr(local, "optimizer_steps", None)
                if began is None:
                    began = local.optimizer_steps = []
                cls = type(optimizer)
                if self.fast_steps:
                    kind = kinds.get(cls)
                    if kind is None:
                        kind = kinds[cls] = ~r.kind(f"{cls.__name__}.step", "", SOURCE, "optimizer")
                    log = r.thread_log()
                    if r.anchor is not None:
                        r.anchor()
                    log.extend((clock(), kind))
                    began.append(log)
                elif self.collecting or r.watch is not None:
                    name = names.get(cls) or names.setdefault(cls, f"{cls.__name__}.step")
                    r.push(name, "", SOURCE, "optimizer")
                    began.append(True)
                else:
                    began.append(None)
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)
            return None

        def post(optimizer: Any, args: Any, kwargs: Any) -> None:
            if is_compiling() or self._disabled:
                return None
            try:
                began = getattr(local, "optimizer_steps", None)
                how = began.pop() if began else None
                if how is True:
                    r.pop()
                elif how is not None:
                    if r.anchor is not None:
                        r.anchor()
                    how.append(clock())
                if self._step_optimizer is None:
                    self._step_optimizer = id(optimizer)
                if id(optimizer) == self._step_optimizer:  # with several optimizers, the first one's steps count
                    self._outside(step_mark)
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)
            return None

        return pre, post


def start(ctx: Context, torch: Any = None) -> TorchHooks:
    """Install the PyTorch hooks in the imported ``torch``, recording into the process's range
    recorder (module backward ranges with ``torch-backward``); return them."""
    hooks = TorchHooks(ctx.collector("ranges"), ctx.diag, backward="torch-backward" in ctx.trace)
    # on a GPU the layers come from the kernels, which repeat from step to step: sampled steps are
    # enough; on the CPU they come from the Python samples inside the ranges, which are sparse already
    hooks.gate = StepGate(from_env(ctx.diag, SAMPLED if ctx.collector("cuda") is not None else DEFAULT))
    hooks.install(torch)
    return hooks


"""The operator recorder's dispatch mode on the main thread's stack: off it while collection is off.

A ``TorchDispatchMode`` on a thread's stack makes every operator of that thread call into Python,
even where the mode passes the call straight through (about 9 µs an operator on a CPU). PyTorch keeps
the stack per thread, and only the thread itself can change its own, so the mode is taken off and put
back on the main thread, at a point where that is safe:

- at once, where the capture window switches on the main thread (a step mark, ``gpuscope.start()``,
  an NVTX range);
- from another thread (the ``--delay`` and ``--duration`` timers, a program thread), through a
  pending call (``Py_AddPendingCall``): the interpreter runs it on the main thread between two
  bytecodes.

While PyTorch dispatches an operator to the mode it holds the mode aside (off the stack) and puts it
back after: the mode is therefore put back only where it was taken off here, and where it is not seen
when it should leave, its handler asks again at its next call, and the move waits for the thread's
first Python event after that call (a one-shot profile function; where the program has its own
profile function, a retry a millisecond later).

Nor is it moved where torch will restore a dispatch state saved before the move (:class:`SafePoint`):
while autograd evaluates a node on the thread (the engine restores the thread's stack after), and
inside a guard that saves the thread's dispatch keys and puts them back whole when it ends (the
wrapper of every ``torch.compile``d call, fake and functional tensors, and ``torch.inference_mode``
entered other than through torch's Python class). Taking the last mode off the stack drops the Python
key from the thread's keys; such a guard, entered while the mode was on, adds it back with the stack
empty, and the next operator without tensor arguments (``torch.tensor(list)``, ``torch.zeros(3)``)
fails inside torch ("Hit Python dispatch key but no arguments had PyInterpreter"). Putting the mode
back inside one is undone the other way: the key goes, the mode stays, and it and every mode the
program enters later are skipped. Such a move waits for the first Python event outside these (a
bounded number of events, then tries again later, less and less often): until then the mode stays
where it is, passing calls through.

``torch.inference_mode`` entered through its Python class (``with torch.inference_mode():``, the
decorator) is followed instead (:class:`InferenceGuards`): a program that runs its whole loop inside
one would otherwise keep the mode, and pay PyTorch's Python dispatch on every operator, to its end.
The class's ``__enter__`` notes whether the mode was on the stack and the thread's keys inside the
guard; inside it, a move is safe where the keys are still those; and right after its ``__exit__``
has restored the keys, the mode is put back where it was at the entry (so stack and keys agree), and
then moved where it is wanted.

The mode goes back at the bottom of the stack's user modes, where it was put when torch was imported,
beneath any mode the program entered meanwhile; it is taken off from under them too.

Other threads keep the mode while collection is off and pass calls through: the main thread is the
only one that another thread can reach (autograd's worker threads take the stack of the thread that
calls ``backward()``, so the backward pass of the main thread follows it). Where the mode is not to
come back (the sample windows of ``--trace torch-shapes`` are over), a thread takes it off its own
stack at its first safe Python event after an operator reached the mode (:func:`leave_on_next_event`).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from typing import Any, Callable

RETRY_S = 0.001  # a deferred move that no profile function can wait for (the program has its own) is tried
# again after this, and after each try that found no safe point twice as long
PATIENCE = 2_000  # Python events a deferred move waits for a safe point before it tries again later
MAX_WAIT_S = 1.0  # ... up to this


class SafePoint:
    """Tells whether the calling thread is at a point where its dispatch mode stack may change for good.

    Torch keeps the Python dispatch key among a thread's keys while a mode is on its stack. A guard that
    saves the thread's keys and restores them whole at its end would, after a change of the stack inside
    it, bring back keys that no longer match the stack (see the module docstring). Such a guard is
    recognized by what it does to the keys (``torch.inference_mode`` drops autograd's: the keys are not
    those of the thread outside every guard, read at install) or, where it leaves them as they were, by
    the frames of the torch code that holds it (``torch.compile``'s wrapper, fake and functional tensors,
    higher-order operators); autograd by its graph task. Unknown guards of the same kind are not seen.
    """

    HOLDERS = ("_dynamo", "_subclasses", "_higher_order_ops", "_export", "_functorch")  # packages of torch

    def __init__(self, torch: Any, guards: InferenceGuards | None = None) -> None:
        """Call with no guard active (where the mode is installed): the thread's keys now are its plain ones.
        ``guards``: the inference-mode guards followed (inside one, its keys are the plain ones)."""
        self.guards = guards
        c = torch._C
        self._include, self._exclude = c._dispatch_tls_local_include_set, c._dispatch_tls_local_exclude_set
        self._graph_task = getattr(c, "_current_graph_task_id", lambda: -1)
        python = [c.DispatchKeySet(k).raw_repr() for k in (c.DispatchKey.Python, c.DispatchKey.PythonTLSSnapshot)]
        self._not_python = ~(python[0] | python[1])  # the keys of the mode stack: they follow it
        self.include = self._include().raw_repr() & self._not_python
        self.exclude = self._exclude().raw_repr()  # autocast's keys: autocast takes them out, not a guard
        root = os.path.dirname(torch.__file__) + os.sep
        self._holders = tuple(root + name + os.sep for name in self.HOLDERS)

    def keys(self) -> tuple[int, int]:
        """The calling thread's included keys (those of the mode stack left out) and excluded keys."""
        return self._include().raw_repr() & self._not_python, self._exclude().raw_repr()

    def __call__(self) -> bool:
        if self._graph_task() != -1:
            return False
        inside = self.guards.innermost() if self.guards is not None else None
        include, exclude = (self.include, self.exclude) if inside is None else (inside[1], inside[2])
        if self._include().raw_repr() & self._not_python != include:
            return False
        if self._exclude().raw_repr() & ~exclude:  # more than autocast's keys are excluded
            return False
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename.startswith(self._holders):
                return False
            frame = frame.f_back
        return True


class InferenceGuards:
    """The ``torch.inference_mode`` guards each thread is inside, entered through torch's Python class.

    :meth:`install` wraps the class's ``__enter__`` and ``__exit__``. Each entry keeps whether ``mode``
    was on the thread's stack and the thread's keys inside the guard (:meth:`SafePoint.keys`); at the
    exit, once the guard has put the keys back, the mode is put back where it was at the entry and, where
    that moved it, ``after_exit`` (if set) is called on the thread to move it where it is wanted.
    """

    def __init__(self, torch_c: Any, mode: Any, fail: Callable[[BaseException], None]) -> None:
        self.mode = mode
        self.after_exit: Callable[[], None] | None = None
        self._torch_c = torch_c
        self._infra_keys = list(torch_c._TorchDispatchModeKey.__members__.values())
        self._fail = fail
        self._local = threading.local()

    def _entries(self) -> list[tuple[bool, int, int]]:
        entries = getattr(self._local, "entries", None)
        if entries is None:
            entries = self._local.entries = []
        return entries

    def innermost(self) -> tuple[bool, int, int] | None:
        """The calling thread's innermost followed guard: (mode on the stack at its entry, keys inside)."""
        entries = getattr(self._local, "entries", None)
        return entries[-1] if entries else None

    def install(self, cls: Any, keys: Callable[[], tuple[int, int]]) -> None:
        """Follow the guards of ``cls`` (``torch.inference_mode``), reading the keys inside with ``keys``."""
        enter, leave = cls.__enter__, cls.__exit__
        guards, torch_c, mode = self, self._torch_c, self.mode

        def __enter__(guard: Any) -> Any:
            try:
                had = _position(torch_c, mode) is not None
            except Exception as exc:  # noqa: BLE001  (not followed: moves inside wait for its end)
                guards._fail(exc)
                return enter(guard)
            out = enter(guard)
            try:
                guards._entries().append((had, *keys()))
            except Exception as exc:  # noqa: BLE001
                guards._fail(exc)
            return out

        def __exit__(guard: Any, *exc_info: Any) -> Any:
            entries = guards._entries()
            entry = entries.pop() if entries else None
            try:
                return leave(guard, *exc_info)
            finally:
                if entry is not None:
                    guards._restore(entry[0])

        __enter__.__wrapped__ = enter  # type: ignore[attr-defined]
        __exit__.__wrapped__ = leave  # type: ignore[attr-defined]
        cls.__enter__, cls.__exit__ = __enter__, __exit__

    def _restore(self, had: bool) -> None:
        """Right after a guard's exit: the mode where it was at its entry, then where it is wanted."""
        try:  # where the mode did not move inside, nothing changes here (a move waiting goes on waiting)
            if place(self._torch_c, self._infra_keys, self.mode, had) and self.after_exit is not None:
                self.after_exit()
        except Exception as exc:  # noqa: BLE001  (the mode stays where it is)
            self._fail(exc)


class MainThreadMode:
    """Keeps a dispatch mode on the main thread's stack while it is wanted and off it while it is not."""

    def __init__(self, torch: Any, mode: Any, fail: Callable[[BaseException], None],
                 safe: SafePoint | None = None) -> None:
        """Call on the main thread, with ``mode`` on its stack and no guard active; ``fail`` is told of errors
        (never raised)."""
        self.mode = mode
        self.thread = threading.get_ident()
        self.wanted = True
        self.moves = 0  # times the mode was taken off or put back
        self.waits = 0  # times a move waited for a safe point
        self._torch_c = torch._C
        self._infra_keys = list(torch._C._TorchDispatchModeKey.__members__.values())
        self._safe = safe or SafePoint(torch)
        self._on_stack = True  # as far as this object knows: put there, and not taken off since
        self._fail = fail
        self._queued = False  # a pending call is queued
        self._deferred = False  # a profile function or a timer will try again
        self._busy = False  # a move is under way
        self._again = False  # asked for again while under way
        self._patience = 0  # Python events the profile function still waits for a safe point
        self._tries = 0  # deferred tries in a row that found none (the next waits longer)
        self._add_pending = _pending_call(self._on_pending)
        # off: the mode stays on the stack (in a forked child; where another thread could not put it back)
        self.enabled = self._add_pending is not None

    def want(self, on: bool) -> None:
        """Have the mode on the main thread's stack (``on``) or off it: at once where called on the main
        thread, otherwise at its next bytecode (or as soon as that is safe)."""
        self.wanted = on
        if not self.enabled:
            return
        if threading.get_ident() == self.thread:
            self.sync()
        else:
            self._wake()

    def after_guard(self) -> None:
        """A followed guard ended (:class:`InferenceGuards`), the mode put back where it was at its entry:
        on the main thread, move it where it is wanted now that the keys are the guard's entry's again."""
        if not self.enabled or threading.get_ident() != self.thread:
            return
        self._on_stack = self._seen()
        self.sync()

    def request(self) -> None:
        """Called by the mode's handler on the main thread while the mode is not wanted: take it off once the
        operator has returned."""
        if self.enabled and not self._deferred and not self.wanted:
            self._on_stack = True  # it was, to be dispatched to (put there by something else: a restored stack)
            self._defer()

    def sync(self) -> None:
        """On the main thread: move the mode where it is wanted, now if that is safe, else as soon as it is."""
        if self._busy:  # a pending call or the profile function between two bytecodes of the move itself
            self._again = True
            return
        self._busy = True
        try:
            self._again = True
            while self._again:  # ``wanted`` may have changed meanwhile
                self._again = False
                self._move()
        except Exception as exc:  # noqa: BLE001  (the mode stays where it is, and only costs time)
            self._fail(exc)
        finally:
            self._busy = False

    def _move(self) -> None:
        if self.wanted == self._on_stack:
            self._tries = 0  # nothing to do
        elif not self._safe():  # inside a node, or a guard that would undo the change or make it wrong
            self.waits += 1
            self._defer()
        elif self.wanted:
            # Only where it was taken off here: a mode that is on the stack but not seen is one that PyTorch
            # holds aside while dispatching an operator to it, and puts back after.
            if not self._on_stack:
                if place(self._torch_c, self._infra_keys, self.mode, True):
                    self.moves += 1
                self._on_stack = True
            self._tries = 0
        elif place(self._torch_c, self._infra_keys, self.mode, False):
            self.moves += 1
            self._on_stack = False
            self._tries = 0
        # else: not seen, either off already or held aside; in the latter case the handler asks again

    def _seen(self) -> bool:
        return _position(self._torch_c, self.mode) is not None

    def _defer(self) -> None:
        if self._deferred:
            return
        self._deferred = True
        if sys.getprofile() is None:
            self._patience = PATIENCE
            sys.setprofile(self._on_event)
        else:  # the program's own profile function stays
            self._later()

    def _on_event(self, frame: Any, event: str, arg: Any) -> None:
        try:  # an exception here would surface in the program
            if self.wanted != self._on_stack and (
                    (not self.wanted and not self._seen()) or not self._safe()):
                # inside an operator dispatched to the mode (held aside until it returns); a node; a guard
                self._patience -= 1
                if self._patience > 0:
                    return
                sys.setprofile(None)  # the mode stays where it is, passing calls through; tried again later
                self._later()
                return
        except Exception as exc:  # noqa: BLE001  (the mode stays where it is)
            sys.setprofile(None)
            self._fail(exc)
            return
        sys.setprofile(None)
        self._deferred = False
        self.sync()

    def _later(self) -> None:
        wait = min(MAX_WAIT_S, RETRY_S * 2 ** min(self._tries, 20))
        self._tries += 1
        timer = threading.Timer(wait, self._retry)
        timer.name = "gpuscope-dispatch"
        timer.daemon = True
        timer.start()

    def _retry(self) -> None:
        self._deferred = False
        self._wake()

    def _wake(self) -> None:
        if self._queued:  # the queued call reads ``wanted`` when it runs
            return
        self._queued = True
        if self._add_pending is None or not self._add_pending():
            self._queued = False
            self._fail(RuntimeError("the interpreter's pending-call queue is full: the PyTorch operator "
                                    "recorder stays on the main thread's mode stack until the next switch"))

    def _on_pending(self) -> None:
        self._queued = False  # first: a switch from now on queues another call
        if self.enabled:
            self.sync()


LEAVE_PATIENCE = PATIENCE  # Python events a thread waits for a safe point before it keeps the mode for a while
_left_alone: dict[int, tuple[float, float]] = {}  # thread -> (no try before this time, the wait after the next)


def leave_on_next_event(torch_c: Any, mode: Any, safe: Callable[[], bool],
                        fail: Callable[[BaseException], None]) -> None:
    """Take ``mode`` off the calling thread's stack at its first Python event where that is safe: the mode is
    on the stack (not held aside by an operator dispatched to it) and ``safe()`` (a :class:`SafePoint`).

    Call it on the thread itself (from the mode's handler, say); it returns at once. A thread with a profile
    function of its own (or one already waiting to leave) keeps the mode, passing calls through; so does one
    that found no safe point in :data:`LEAVE_PATIENCE` events, until it is asked again a while later.
    """
    if sys.getprofile() is not None:
        return
    thread = threading.get_ident()
    not_before, wait = _left_alone.get(thread, (0.0, RETRY_S))
    if time.monotonic() < not_before:
        return
    patience = [LEAVE_PATIENCE]

    def on_event(frame: Any, event: str, arg: Any) -> None:
        try:  # an exception here would surface in the program
            if _position(torch_c, mode) is None or not safe():
                patience[0] -= 1
                if patience[0] > 0:
                    return
                _left_alone[thread] = (time.monotonic() + wait, min(MAX_WAIT_S, 2 * wait))
            else:
                _left_alone.pop(thread, None)
                place(torch_c, list(torch_c._TorchDispatchModeKey.__members__.values()), mode, False)
        except Exception as exc:  # noqa: BLE001  (the mode stays, and only passes calls through)
            fail(exc)
        sys.setprofile(None)

    sys.setprofile(on_event)


def place(torch_c: Any, infra_keys: list[Any], mode: Any, on: bool) -> bool:
    """Put ``mode`` at the bottom of this thread's user modes (``on``) or take it off; return whether the
    stack changed. Modes above it are popped and pushed again in their order, without running their code."""
    if (_position(torch_c, mode) is not None) == on:
        return False
    infra = sum(torch_c._get_dispatch_mode(k) is not None for k in infra_keys)
    depth = torch_c._len_torch_dispatch_stack()
    above = [torch_c._pop_torch_dispatch_stack(None) for _ in range(depth - infra)]  # user modes, top first
    if on:
        torch_c._push_on_torch_dispatch_stack(mode)
    for m in reversed(above):
        if m is not mode:
            torch_c._push_on_torch_dispatch_stack(m)
    return True


def _position(torch_c: Any, mode: Any) -> int | None:
    """Where ``mode`` is on this thread's stack (0: the bottom); None where it is not seen."""
    depth = torch_c._len_torch_dispatch_stack()
    for i in range(depth):
        if torch_c._get_dispatch_stack_at(i) is mode:
            return i
    return None


def _pending_call(fn: Callable[[], None]) -> Callable[[], bool] | None:
    """A function that queues ``fn`` to run on the main thread between two bytecodes (``Py_AddPendingCall``)
    and returns False where the queue was full; None where the interpreter has no such call (not CPython)."""
    pythonapi = getattr(ctypes, "pythonapi", None)
    if pythonapi is None:
        return None
    thunk_type = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

    def call(arg: Any) -> int:
        try:  # an exception here would surface in whatever the main thread runs
            fn()
        except Exception:  # noqa: BLE001,S110  (fn reports its own errors; this is its report failing)
            pass
        return 0

    thunk = thunk_type(call)
    pythonapi.Py_IncRef(ctypes.py_object(thunk))  # never freed: a queued call may run during shutdown
    add = ctypes.PYFUNCTYPE(ctypes.c_int, thunk_type, ctypes.c_void_p)(("Py_AddPendingCall", pythonapi))

    def queue() -> bool:
        return int(add(thunk, None)) == 0

    return queue


def dynamo_skips(handler: Callable[..., Any]) -> bool:
    """Tell TorchDynamo never to trace the handler or what it calls; return whether that worked.

    Without it, torch wraps a mode's handler in a per-call ``torch._dynamo.disable`` (and imports
    torch._dynamo at the first operator).
    """
    try:
        from torch._C._dynamo.eval_frame import (  # noqa: PLC0415
            _FrameAction,
            _FrameExecStrategy,
            set_code_exec_strategy,
        )

        set_code_exec_strategy(handler.__code__, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP))
    except Exception:  # noqa: BLE001  (an older or newer torch: its own wrapper does it)
        return False
    return True

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
profile function, a retry a millisecond later). Nor is it moved while autograd evaluates a node on
the thread (the engine gives the node the stack of the ``backward()`` call and restores the thread's
own after, so a change made there would be undone): that too waits for the first event after.

The mode goes back at the bottom of the stack's user modes, where it was put when torch was imported,
beneath any mode the program entered meanwhile; it is taken off from under them too.

Other threads keep the mode while collection is off and pass calls through: the main thread is the
only one that another thread can reach (autograd's worker threads take the stack of the thread that
calls ``backward()``, so the backward pass of the main thread follows it).
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any, Callable

RETRY_S = 0.001  # where the program has its own profile function: a deferred move is tried again after this


class MainThreadMode:
    """Keeps a dispatch mode on the main thread's stack while it is wanted and off it while it is not."""

    def __init__(self, torch: Any, mode: Any, fail: Callable[[BaseException], None]) -> None:
        """Call on the main thread, with ``mode`` on its stack; ``fail`` is told of errors (never raised)."""
        self.mode = mode
        self.thread = threading.get_ident()
        self.wanted = True
        self.moves = 0  # times the mode was taken off or put back
        self._torch_c = torch._C
        self._infra_keys = list(torch._C._TorchDispatchModeKey.__members__.values())
        self._graph_task = getattr(torch._C, "_current_graph_task_id", lambda: -1)
        self._on_stack = True  # as far as this object knows: put there, and not taken off since
        self._fail = fail
        self._queued = False  # a pending call is queued
        self._deferred = False  # a profile function or a timer will try again
        self._busy = False  # a move is under way
        self._again = False  # asked for again while under way
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
        if self._graph_task() != -1:  # inside autograd's evaluation of a node: a change would be undone
            self._defer()
        elif self.wanted:
            # Only where it was taken off here: a mode that is on the stack but not seen is one that PyTorch
            # holds aside while dispatching an operator to it, and puts back after.
            if not self._on_stack:
                if place(self._torch_c, self._infra_keys, self.mode, True):
                    self.moves += 1
                self._on_stack = True
        elif place(self._torch_c, self._infra_keys, self.mode, False):
            self.moves += 1
            self._on_stack = False
        # else: not seen, either off already or held aside; in the latter case the handler asks again

    def _seen(self) -> bool:
        return _position(self._torch_c, self.mode) is not None

    def _defer(self) -> None:
        if self._deferred:
            return
        self._deferred = True
        if sys.getprofile() is None:
            sys.setprofile(self._on_event)
        else:  # the program's own profile function stays
            timer = threading.Timer(RETRY_S, self._retry)
            timer.name = "gpuscope-dispatch"
            timer.daemon = True
            timer.start()

    def _on_event(self, frame: Any, event: str, arg: Any) -> None:
        if self._graph_task() != -1 or (not self.wanted and self._on_stack and not self._seen()):
            return  # inside a node; inside an operator dispatched to the mode (held aside until it returns)
        sys.setprofile(None)
        self._deferred = False
        self.sync()

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

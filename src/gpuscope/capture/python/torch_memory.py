"""PyTorch CPU tensor memory: every storage a PyTorch operator creates, when, where, and when it dies.

A ``TorchDispatchMode`` sees each ATen operator's outputs; a storage not seen before (not a view,
not an in-place result) is an allocation of ``nbytes`` bytes, and a weak reference on its Python
storage object tells when the storage is freed (PyTorch keeps that object alive as long as any
tensor uses the storage, so the callback runs at the free itself, before the memory can be reused).
Storages created before the recorder started are never seen, so their frees are not either: the
running total never goes below zero. Buffers a kernel allocates and frees inside one operator are not
seen (they are not tensors the program holds).

Each row carries the process's running total after the event, exact whatever is dropped. Allocations
of at least ``KEEP_BYTES`` are always kept (with their Python stack when of at least ``STACK_BYTES``);
smaller ones only while fewer than ``SMALL_BUDGET`` have been kept; past that they are counted as
dropped (``dropped`` rows, source ``memory``), and the free of a dropped allocation is dropped too.
Where the highest total of a flush interval fell on a dropped event, a ``peak`` row keeps it, so the
peak and its time stay exact.

Nothing here may raise into the program: a failure is counted, said once, and the operator runs as usual.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from .stacks import StackTable

if TYPE_CHECKING:
    from ..collectors import Context

CPU_DEVICE = -1  # device_id of host memory in ``memory_event``
KEEP_BYTES = 64 * 1024
STACK_BYTES = 1 << 20
SMALL_BUDGET = 100_000

# ts_ns, tid, device_id, kind, address, bytes, allocated_bytes, reserved_bytes, stream_id, stack_id,
# source: the memory_event columns (pid left out)
Row = tuple[Any, ...]


class MemoryTotals:
    """The running total of one device, its peak, and the highest total of the current flush interval."""

    def __init__(self) -> None:
        self.allocated = 0
        self.peak = 0
        self.peak_ns = 0
        self.interval_max = -1  # highest total since the last flush, and whether a kept row shows it
        self.interval_ns = 0
        self.interval_kept = True

    def add(self, nbytes: int, t: int, kept: bool) -> int:
        """Add ``nbytes`` (negative for a free) at ``t``; return the new total."""
        total = self.allocated = max(0, self.allocated + nbytes)
        if total > self.interval_max:
            self.interval_max, self.interval_ns, self.interval_kept = total, t, kept
        if total > self.peak:
            self.peak, self.peak_ns = total, t
        return total

    def take_peak(self) -> tuple[int, int] | None:
        """Return (time, total) of this interval's highest total if no kept row shows it, and start a new one."""
        out = None if self.interval_kept or self.interval_max < 0 else (self.interval_ns, self.interval_max)
        self.interval_max, self.interval_kept = -1, True
        return out


class TorchMemory:
    """Records the CPU storages PyTorch operators create and free; the agent takes the rows at each flush."""

    def __init__(self, clock_offset_ns: int, stacks: StackTable, diag: Callable[[str, str], None],
                 keep_bytes: int = KEEP_BYTES, stack_bytes: int = STACK_BYTES, small_budget: int = SMALL_BUDGET) -> None:
        self.offset = clock_offset_ns
        self.stacks = stacks
        self.diag = diag
        self.keep_bytes, self.stack_bytes, self.small_budget = keep_bytes, stack_bytes, small_budget
        self.on = True
        self.totals = MemoryTotals()
        self.counts = {"allocations": 0, "frees": 0, "kept": 0, "dropped": 0, "failed": 0}
        self._small_kept = 0
        self._dropped_taken = 0
        self._live: dict[int, tuple[Any, int, bool]] = {}  # address -> (weak ref, bytes, kept)
        self._refs: dict[int, int] = {}  # id(weak ref) -> address
        self._rows: deque[Row] = deque()
        self._said = False
        self.mode: Any = None
        self._previous_profile: Any = None

    # -- installation ----------------------------------------------------------------------
    def install(self, torch: Any) -> None:
        """Push the recording mode on this thread and on every thread started from now on."""
        from torch.utils import _python_dispatch as dispatch  # noqa: PLC0415

        handler = self._handler(torch)

        class GpuscopeMemory(dispatch.TorchDispatchMode):  # type: ignore[misc]
            supports_higher_order_operators = True

            @classmethod
            def ignore_compile_internals(cls) -> bool:
                return True

            __torch_dispatch__ = handler

        mode = GpuscopeMemory()
        previous = threading.getprofile() if hasattr(threading, "getprofile") else None
        push = dispatch._push_mode

        def on_thread_start(frame: Any, event: str, arg: Any) -> None:
            sys.setprofile(previous)
            try:
                push(mode)
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)

        threading.setprofile(on_thread_start)
        self._previous_profile = previous
        mode.__enter__()
        self.mode = mode

    def close(self) -> None:
        """Take the mode off this thread's stack and stop pushing it on new threads (for a recorder used in a block)."""
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            threading.setprofile(self._previous_profile)
            self.mode = None

    # -- the hot path ----------------------------------------------------------------------
    def _handler(self, torch: Any) -> Callable[..., Any]:
        tensor_type = torch.Tensor
        seen = self._seen

        def __torch_dispatch__(mode: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **kwargs) if kwargs else func(*args)
            if not self.on:
                return out
            try:
                if isinstance(out, tensor_type):
                    seen(out)
                elif type(out) in (tuple, list):
                    for o in out:
                        if isinstance(o, tensor_type):
                            seen(o)
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)
            return out

        return __torch_dispatch__

    def _seen(self, tensor: Any) -> None:
        """Record the storage of an operator's output if it is new and on the CPU."""
        if tensor.device.type != "cpu":
            return
        storage = tensor.untyped_storage()
        address = storage.data_ptr()
        if not address or address in self._live:
            return
        nbytes = storage.nbytes()
        if not nbytes:
            return
        t = time.monotonic_ns()
        self.counts["allocations"] += 1
        kept = nbytes >= self.keep_bytes or self._small_kept < self.small_budget
        if kept and nbytes < self.keep_bytes:
            self._small_kept += 1
        ref = weakref.ref(storage, self._freed)
        self._refs[id(ref)] = address
        self._live[address] = (ref, nbytes, kept)
        total = self.totals.add(nbytes, t, kept)
        if kept:
            stack = self.stacks.stack_of(sys._getframe(2)) if nbytes >= self.stack_bytes else None
            self._rows.append((t + self.offset, threading.get_native_id(), CPU_DEVICE, "alloc", address, nbytes,
                               total, None, None, stack, "torch-cpu"))
            self.counts["kept"] += 1
        else:
            self.counts["dropped"] += 1

    def _freed(self, ref: Any) -> None:
        try:
            address = self._refs.pop(id(ref), None)
            entry = self._live.pop(address, None) if address is not None else None
            if entry is None:
                return
            _, nbytes, kept = entry
            t = time.monotonic_ns()
            self.counts["frees"] += 1
            total = self.totals.add(-nbytes, t, kept)
            if kept:
                self._rows.append((t + self.offset, threading.get_native_id(), CPU_DEVICE, "free", address, nbytes,
                                   total, None, None, None, "torch-cpu"))
            else:
                self.counts["dropped"] += 1
        except Exception as exc:  # noqa: BLE001  (a weak reference callback must not raise)
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self.counts["failed"] += 1
        if not self._said:
            self._said = True
            self.diag("warning", f"PyTorch CPU memory: an allocation was not recorded after an error in gpuscope: "
                                 f"{exc!r}")

    # -- the collector protocol (capture/collectors.py) -------------------------------------
    def set_collecting(self, on: bool) -> None:
        """Keep recording whatever ``on`` says: a capture window's totals must count what was allocated before it.
        The report is cut to the windows, with what was live at their starts, when it is written (memory_trim.py)."""

    def take_rows(self) -> dict[str, list[Row]]:
        """Return the ``memory_event`` rows since the last call (and a ``peak`` row where one is needed)."""
        rows = [self._rows.popleft() for _ in range(len(self._rows))]
        peak = self.totals.take_peak()
        if peak is not None:
            rows.append((peak[0] + self.offset, None, CPU_DEVICE, "peak", None, 0, peak[1], None, None, None,
                         "torch-cpu"))
        out: dict[str, list[Row]] = {"memory_event": rows} if rows else {}
        dropped = self.counts["dropped"] - self._dropped_taken
        if dropped:
            self._dropped_taken += dropped
            out["dropped"] = [("memory", dropped)]
        return out

    def finish(self) -> None:
        """Nothing to read at the end: every event was recorded as it happened."""

    def shutdown(self, ctx: Context) -> None:
        """Read what is left (:meth:`finish`) and add the ``collector`` row (:meth:`summary`)."""
        self.finish()
        ctx.add_row("collector", self.summary())

    def summary(self) -> tuple[Any, ...]:
        """Return the ``collector`` row (name, records, buffers, callback_ns, failed_records, detail)."""
        import json  # noqa: PLC0415

        info = dict(self.counts, peak_bytes=self.totals.peak, live_at_end=len(self._live))
        return ("memory-cpu", self.counts["kept"], 0, 0, self.counts["failed"], json.dumps(info, sort_keys=True))

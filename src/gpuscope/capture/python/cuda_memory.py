"""PyTorch CUDA memory: the caching allocator's own history of allocations, frees and segments, and its OOMs.

PyTorch's allocator keeps a ring of its actions when ``torch.cuda.memory._record_memory_history`` is
on (alloc, free_requested, free_completed, segment_alloc/free/map/unmap, oom), each with address,
size, stream, time (µs since the epoch) and, for allocations, the Python stack. The recorder turns
it on when the program imports torch, and reads the ring once: at the end of the process, or at an
out-of-memory error (``torch._C._cuda_attach_out_of_memory_observer``), where the live allocations
and the allocator's counters are kept as they were at the failure.

Totals are exact whatever the ring lost: they are counted back from the allocator's own counters at
the read (``allocated_bytes.all.current`` minus what the kept entries added), so allocations made
before recording started, or that fell out of the ring, never make a total negative. Allocated
falls at ``free_requested`` (the allocator's ``allocated_bytes`` statistic does), reserved at
``segment_free``/``segment_unmap``. Where the allocator's peak is above every total the kept entries
show (the peak fell out of the ring), a ``peak`` row at the first kept entry says so.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Callable

from .stacks import StackTable

if TYPE_CHECKING:
    from ..collectors import Context

MAX_ENTRIES = 1_000_000  # GPUSCOPE_MEMORY_ENTRIES: the allocator's ring of actions
STACK_BYTES = 1 << 20  # allocations from this size on keep their Python stack
_ALLOCATED = {"alloc": 1, "free_requested": -1}
_RESERVED = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
_KIND = {"alloc": "alloc", "free_requested": "free", "segment_alloc": "segment_alloc", "segment_map": "segment_alloc",
         "segment_free": "segment_free", "segment_unmap": "segment_free"}

Row = tuple[Any, ...]


class _Code:
    """A frame's code as the stack table needs it (file and function), from the allocator's text frames."""

    __slots__ = ("co_filename", "co_name")

    def __init__(self, filename: str, name: str) -> None:
        self.co_filename, self.co_name = filename, name

    def __hash__(self) -> int:
        return hash((self.co_filename, self.co_name))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Code) and (self.co_filename, self.co_name) == (other.co_filename, other.co_name)


class CudaMemory:
    """Turns on the allocator's history; its rows come once, at the end or at an OOM."""

    def __init__(self, clock_offset_ns: int, stacks: StackTable, diag: Callable[[str, str], None],
                 max_entries: int = MAX_ENTRIES) -> None:
        self.offset = clock_offset_ns
        self.stacks = stacks
        self.diag = diag
        self.max_entries = max_entries
        self.torch: Any = None
        self.on = True
        self._rows: dict[str, list[Row]] = {}
        self._read = False
        self.counts = {"entries": 0, "dropped": 0, "ooms": 0}
        self._codes: dict[tuple[str, str], _Code] = {}

    def install(self, torch: Any) -> bool:
        """Start the allocator's history; return False (and say why) where there is no CUDA."""
        try:
            if not torch.cuda.is_available():
                return False
            torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                     max_entries=self.max_entries)
        except Exception as exc:  # noqa: BLE001  (an older torch, or a CPU build)
            self.diag("warning", f"CUDA memory is not recorded: {type(exc).__name__}: {exc}")
            return False
        self.torch = torch
        try:
            torch._C._cuda_attach_out_of_memory_observer(self._oom)
        except Exception as exc:  # noqa: BLE001
            self.diag("info", f"an out-of-memory error would not be recorded: {type(exc).__name__}: {exc}")
        return True

    # -- the collector protocol ------------------------------------------------------------
    def set_collecting(self, on: bool) -> None:
        """The allocator's ring records throughout (totals need every action); trimming keeps the windows."""
        self.on = on

    def take_rows(self) -> dict[str, list[Row]]:
        """Return the rows of the read (after an OOM or at the end), once."""
        rows, self._rows = self._rows, {}
        return rows

    def finish(self) -> None:
        """Read the allocator's history at the end of the process (nothing if an OOM already read it)."""
        if self.torch is not None and not self._read:
            self._read_history(None)

    # -- reading -----------------------------------------------------------------------------
    def _oom(self, device: int, requested: int, device_allocated: int, device_free: int) -> None:
        try:
            self.counts["ooms"] += 1
            t = time.monotonic_ns() + self.offset
            stats = self.torch.cuda.memory_stats(device)
            total = self.torch.cuda.get_device_properties(device).total_memory
            self._rows.setdefault("memory_oom", []).append((
                t, int(device), int(requested), int(device_free), int(stats.get("reserved_bytes.all.current", 0)),
                int(stats.get("allocated_bytes.all.current", 0)), int(total),
                json.dumps({"device_allocated": int(device_allocated)})))
            if not self._read:
                self._read_history(t)
        except Exception as exc:  # noqa: BLE001  (an observer must not raise)
            self.diag("warning", f"the out-of-memory state was not recorded: {type(exc).__name__}: {exc}")

    def _read_history(self, at_oom: int | None) -> None:
        self._read = True
        torch = self.torch
        snapshot = torch.cuda.memory._snapshot()
        epoch_to_session = time.monotonic_ns() - time.time_ns() + self.offset
        rows = self._rows.setdefault("memory_event", [])
        for device, entries in enumerate(snapshot.get("device_traces", [])):
            if not entries:
                continue
            stats = torch.cuda.memory_stats(device)
            rows += self.device_rows(device, entries, stats, epoch_to_session)
        torch.cuda.memory._record_memory_history(enabled=None)

    def device_rows(self, device: int, entries: list[dict[str, Any]], stats: dict[str, Any],
                    epoch_to_session: int) -> list[Row]:
        """Return the ``memory_event`` rows of one device's allocator entries, totals counted back from ``stats``."""
        net_alloc = sum(_ALLOCATED.get(e["action"], 0) * e.get("size", 0) for e in entries)
        net_reserved = sum(_RESERVED.get(e["action"], 0) * e.get("size", 0) for e in entries)
        allocated = max(0, int(stats.get("allocated_bytes.all.current", 0)) - net_alloc)
        reserved = max(0, int(stats.get("reserved_bytes.all.current", 0)) - net_reserved)
        seen_peak = allocated
        out: list[Row] = []
        first_ns = None
        for e in entries:
            action = e["action"]
            kind = _KIND.get(action)
            if kind is None:
                continue
            t = int(e.get("time_us", 0)) * 1000 + epoch_to_session
            first_ns = t if first_ns is None else first_ns
            size = int(e.get("size", 0))
            allocated = max(0, allocated + _ALLOCATED.get(action, 0) * size)
            reserved = max(0, reserved + _RESERVED.get(action, 0) * size)
            seen_peak = max(seen_peak, allocated)
            stack = self._stack(e.get("frames") or ()) if action == "alloc" and size >= STACK_BYTES else None
            out.append((t, None, device, kind, int(e.get("addr", 0)), size, allocated, reserved,
                        int(e.get("stream", 0)), stack, "torch-cuda"))
        self.counts["entries"] += len(entries)
        peak = int(stats.get("allocated_bytes.all.peak", 0))
        if peak > seen_peak and first_ns is not None:
            out.append((first_ns, None, device, "peak", None, 0, peak, None, None, None, "torch-cuda"))
        if len(entries) >= self.max_entries:
            made = int(stats.get("allocation.all.allocated", 0)) + int(stats.get("allocation.all.freed", 0))
            dropped = max(0, made - sum(1 for e in entries if e["action"] in _ALLOCATED))
            self.counts["dropped"] += dropped
            self._rows.setdefault("dropped", []).append(("memory", dropped))
        return out

    def _stack(self, frames: Any) -> int | None:
        """Return the stack node of the allocator's text frames (innermost first); None without frames."""
        if not frames:
            return None
        node = 0
        for f in reversed(list(frames)):
            key = (str(f.get("filename", "")), str(f.get("name", "")))
            code = self._codes.get(key)
            if code is None:
                code = self._codes[key] = _Code(*key)
            node = self.stacks.child(node, self.stacks.frame(code, int(f.get("line", 0))))
        return node

    def shutdown(self, ctx: Context) -> None:
        """Read what is left (:meth:`finish`) and add the ``collector`` row (:meth:`summary`)."""
        self.finish()
        ctx.add_row("collector", self.summary())

    def summary(self) -> tuple[Any, ...]:
        """Return the ``collector`` row (name, records, buffers, callback_ns, failed_records, detail)."""
        return ("memory-cuda", self.counts["entries"], 0, 0, 0, json.dumps(self.counts, sort_keys=True))

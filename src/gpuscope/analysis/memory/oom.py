"""The state at an out-of-memory error, and what would have fit (``memory_oom`` and ``memory_event`` in, data out).

At the failure the allocator was asked for ``requested`` bytes with ``free`` bytes free on the device,
``reserved`` held by the allocator and ``allocated`` of those in use. What the request lacked is
``shortfall = requested - free - (reserved - allocated)``: the cached but unused memory counts as
available, as it would be with ``expandable_segments`` (where it is enough alone, fragmentation is the
cause). The live allocations at the failure are grouped by the layer that made them: activation
checkpointing of a layer frees what it holds for backward. A smaller micro-batch divides what grows
with the batch: the live allocations made inside module ranges, and the request itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...trace.report import Report
from .peak import Live, layer_ranges, live_allocations, load_series


@dataclass
class OomState:
    """One out-of-memory error and what would have fit."""

    pid: int
    device: int
    ts_ns: int
    requested: int
    free: int
    reserved: int
    allocated: int
    total: int
    live: list[Live] = field(default_factory=list)  # largest first
    by_layer: list[tuple[str, int]] = field(default_factory=list)  # bytes held per layer, largest first
    source: str = ""  # the memory series its live allocations come from

    @property
    def cached_unused(self) -> int:
        """Return the bytes the allocator held but did not use."""
        return max(0, self.reserved - self.allocated)

    @property
    def shortfall(self) -> int:
        """Return the bytes the request lacked, counting the cached but unused memory as available."""
        return max(0, self.requested - self.free - self.cached_unused)

    @property
    def fragmentation(self) -> bool:
        """Return whether the cached but unused memory alone (with free memory) would have held the request."""
        return self.requested > self.free and self.shortfall == 0

    def checkpoint_layers(self) -> list[tuple[str, int]]:
        """Return the fewest layers (largest first) whose held bytes cover the shortfall; empty if none do."""
        need, out = self.shortfall, []
        for name, held in self.by_layer:
            if need <= 0:
                break
            if name != "(no range)":
                out.append((name, held))
                need -= held
        return out if need <= 0 and out else []

    def micro_batch_divisor(self) -> int | None:
        """Return k such that 1/k of the batch fits (what grows with it: layer-held bytes and the request)."""
        grows = sum(b for n, b in self.by_layer if n != "(no range)") + self.requested
        if self.shortfall == 0:
            return 1
        if grows <= self.shortfall:
            return None
        return max(2, math.ceil(grows / (grows - self.shortfall)))


def oom_states(report: Report) -> list[OomState]:
    """Return every out-of-memory error in the report with the live allocations at it."""
    rows = report.sql("""SELECT pid, device_id, ts_ns, requested_bytes, free_bytes, reserved_bytes, allocated_bytes,
                                total_bytes FROM memory_oom ORDER BY ts_ns""")
    if not rows:
        return []
    # the allocator's own series where there is one (the CUDA-level series of the same device otherwise)
    series = {(s.pid, s.device): s for s in sorted(load_series(report), key=lambda s: s.source != "cuda")}
    ranges = layer_ranges(report)
    out = []
    for pid, device, ts, requested, free, reserved, allocated, total in rows:
        state = OomState(int(pid), int(device), int(ts), int(requested or 0), int(free or 0), int(reserved or 0),
                         int(allocated or 0), int(total or 0))
        s = series.get((state.pid, state.device))
        if s is not None:
            state.source = s.source
            every = live_allocations(report, s, state.ts_ns, ranges, n=1_000_000)
            held: dict[str, int] = {}
            for live in every:
                held[live.layer] = held.get(live.layer, 0) + live.nbytes
            state.live = every[:10]
            state.by_layer = sorted(held.items(), key=lambda kv: (-kv[1], kv[0]))
        out.append(state)
    return out

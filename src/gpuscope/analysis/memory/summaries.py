"""memory_sum: the memory summary (analysis/memory/peak.py) and any out-of-memory state (memory_oom.py) as one table."""

from __future__ import annotations

import numpy as np

from ...trace.report import Report
from .peak import device_label, memory_summary
from .oom import oom_states
from ..table import Column, Table

LAYERS_LISTED = 30


def memory_sum(report: Report) -> Table:
    """Per device the peak allocated and reserved and when, per step and layer, the largest allocations live at
    the peak, and the process's peak resident memory; bytes and ns since the process started."""
    cols = [Column("Section"), Column("PID", "id"), Column("Device"), Column("Name"), Column("Bytes", "bytes"),
            Column("Kept", "bytes"), Column("Time", "ns"), Column("Count", "count"), Column("Location"),
            Column("Source")]
    s = memory_summary(report)
    if s is None:
        hint = report.not_recorded().get("memory")
        return Table("memory_sum", "Memory Summary", cols, [],
                     [f"No memory events in this report: {hint}." if hint else "No memory events were recorded."])
    starts = dict(report.sql("SELECT pid, min(start_ns) FROM process GROUP BY pid"))

    def rel(pid: int, t: int) -> int:
        return int(t) - int(starts.get(pid) or 0)

    rows: list[tuple[object, ...]] = []
    for ser in s.series:
        dev, src = device_label(ser.device), ser.source
        peak, at = ser.peak()
        rows.append(("peak allocated", ser.pid, dev, "", peak, None, rel(ser.pid, at), len(ser.ts), "", src))
        if (ser.reserved >= 0).any():
            i = int(np.argmax(ser.reserved))
            rows.append(("peak reserved", ser.pid, dev, "", int(ser.reserved[i]), None, rel(ser.pid, int(ser.ts[i])),
                         None, "", src))
            frag = np.where(ser.reserved >= 0, ser.reserved - ser.allocated, 0)
            j = int(np.argmax(frag))
            rows.append(("reserved not allocated (max)", ser.pid, dev, "", int(frag[j]), None,
                         rel(ser.pid, int(ser.ts[j])), None, "", src))
        for live in s.live.get((ser.pid, ser.device, ser.source), []):
            rows.append(("live at peak", ser.pid, dev, live.layer, live.nbytes, None, rel(ser.pid, live.ts_ns), None,
                         live.location, src))
    for w in s.windows:
        dev, name = device_label(w.device), f"window at {rel(w.pid, w.start_ns)} ns"
        rows.append(("window: live at start", w.pid, dev, name, w.baseline, None, rel(w.pid, w.start_ns),
                     w.live_at_start, "", w.source))
        rows.append(("window: peak", w.pid, dev, name, w.peak, w.peak - w.baseline, rel(w.pid, w.peak_ns), None, "",
                     w.source))
        rows.append(("window: allocations", w.pid, dev, name, w.allocated, None, None, w.allocations, "", w.source))
    for r in s.steps.itertuples(index=False):
        rows.append(("step", r.pid, device_label(r.device), f"step {r.step}", int(r.peak), int(r.peak_added), None,
                     None, "", r.source))
    for r in s.layers.head(LAYERS_LISTED).itertuples(index=False):
        rows.append(("layer", r.pid, device_label(r.device), r.name, int(r.peak_added), int(round(r.kept)), None,
                     int(r.calls), "", r.source))
    for oom in oom_states(report):
        dev = device_label(oom.device)
        rows.append(("out of memory: requested", oom.pid, dev, "", oom.requested, None, rel(oom.pid, oom.ts_ns), None,
                     "", oom.source))
        for label, value in (("free", oom.free), ("reserved", oom.reserved), ("allocated", oom.allocated)):
            rows.append((f"out of memory: {label}", oom.pid, dev, "", value, None, None, None, "", oom.source))
        for live in oom.live:
            rows.append(("live at out of memory", oom.pid, dev, live.layer, live.nbytes, None,
                         rel(oom.pid, live.ts_ns), None, live.location, oom.source))
    for pid, value, t in s.rss:
        rows.append(("peak resident memory (RSS)", pid, "cpu", "", value, None, rel(pid, t), None, "", "host"))
    notes = ["Bytes: the peak total (peak rows), the most a step or layer added over the total when it began "
             "(step, layer), or an allocation's size; Kept: what a step or layer left allocated when it ended "
             "(mean per call for layers)."]
    if any(ser.source == "cuda" for ser in s.series):
        notes.append("Source cuda: the process's CUDA-level allocations of any library (cudaMalloc, cuMemAlloc, "
                     "cudaMallocAsync, cudaHostAlloc; PyTorch's cached segments included), from CUPTI's memory "
                     "records; cpu there is pinned or pageable host memory.")
    if s.windows:
        notes.append("Capture windows: allocations and frees are those made inside each window; 'live at start' is "
                     "the total allocated when it began (Count: the recorded allocations live then), 'peak' the "
                     "highest total inside it (Kept: above the start).")
    if s.dropped:
        notes.append(f"{s.dropped} small allocations and frees were summarized (not kept one by one); every "
                     "total and peak still counts them.")
    return Table("memory_sum", "Memory Summary", cols, rows, notes)


REPORTS = {"memory_sum": memory_sum}

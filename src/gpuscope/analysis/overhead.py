"""What collecting cost the profiled program: time gpuscope and CUPTI spent inside it.

The parts, each from the report:

- **CUPTI buffers**: the CPU time of gpuscope's buffer-completion callbacks (``collector.callback_ns``
  of ``cupti``: the thread's CPU time, waits for the GIL not counted), measured;
- **CUPTI overhead records**: the ``overhead`` rows of CUPTI's own work (buffer requests and
  flushes, instrumentation, its resources), measured by CUPTI. Module loading and lazy function
  loading, which CUPTI reports as overhead too, are left out: CUDA does them with or without a
  profiler;
- **Python sampler**: the CPU time of the sampler thread (``collector.callback_ns`` of ``sampler``),
  measured;
- **PyTorch hooks** and **ranges**: estimated, as the number of module calls (forward ranges, and
  backward ranges for those that had one) and of other recorded ranges, times the per-call costs
  the process measured at its end (capture/python/hook_cost.py, in the ``ranges`` collector's detail);
  a report without those costs has no estimate;
- **launch anchors**: estimated, as the number of anchors (``launch_call`` rows of
  ``cuDriverGetVersion``) times the per-anchor cost measured the same way;
- any other collector row with a ``callback_ns``, under its own name, measured.

The total is set against the run's wall time. Processes add up, so with several processes the
share is of one wall clock, not of their summed time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..trace.report import Report

CUPTI_OWN_OVERHEAD = ("CuptiBufferFlush", "CuptiInstrumentation", "CuptiResource", "ActivityBufferRequest",
                      "CommandBufferFull", "UvmActivityInit")
PART_NAMES = {"cupti": "CUPTI buffers", "sampler": "Python sampler"}
_COUNTED_ELSEWHERE = ("ranges", "capture", *PART_NAMES)


@dataclass(frozen=True)
class OverheadPart:
    """One part of the overhead: what it is, how long, and whether it is an estimate."""

    name: str
    ns: int
    estimated: bool = False


@dataclass
class CollectionOverhead:
    """The time collection took inside the program, by part."""

    wall_ns: int | None
    parts: list[OverheadPart] = field(default_factory=list)
    not_measured: list[str] = field(default_factory=list)  # parts a report lacks the numbers for

    @property
    def total_ns(self) -> int:
        return sum(p.ns for p in self.parts)

    @property
    def percent(self) -> float | None:
        """The total as a share of the wall time (None without a wall time)."""
        return 100.0 * self.total_ns / self.wall_ns if self.wall_ns else None


def collection_overhead(report: Report) -> CollectionOverhead:
    """Return the measured and estimated time collection took inside the profiled program."""
    out = CollectionOverhead(report.meta.get("wall_ns"))
    measured = dict(report.sql(
        "SELECT name, sum(callback_ns) FROM collector WHERE callback_ns > 0 GROUP BY name ORDER BY name"))
    for name, label in PART_NAMES.items():
        if measured.get(name):
            out.parts.append(OverheadPart(label, int(measured[name])))
    kinds = ", ".join(f"'{k}'" for k in CUPTI_OWN_OVERHEAD)
    (cupti_own,) = report.sql(
        f"SELECT coalesce(sum(end_ns - start_ns), 0) FROM overhead WHERE kind IN ({kinds}) AND end_ns > start_ns")[0]
    if cupti_own:
        out.parts.append(OverheadPart("CUPTI overhead records", int(cupti_own)))
    _estimate_ranges(report, out)
    for name, ns in measured.items():
        if name not in _COUNTED_ELSEWHERE:
            out.parts.append(OverheadPart(name, int(ns)))
    return out


def _estimate_ranges(report: Report, out: CollectionOverhead) -> None:
    """Add the estimated cost of the PyTorch hooks and of the other recorded ranges."""
    costs: dict[int, dict[str, int]] = {}
    for pid, detail in report.sql("SELECT pid, detail FROM collector WHERE name = 'ranges'"):
        try:
            costs[int(pid)] = json.loads(detail or "{}")
        except ValueError:
            continue
    if not costs:
        return
    counts = report.sql(
        """SELECT pid,
                  count(*) FILTER (WHERE source = 'torch' AND category = 'forward'),
                  count(*) FILTER (WHERE source = 'torch' AND category = 'backward'),
                  count(*) FILTER (WHERE kind = 'range' AND NOT (source = 'torch' AND category IN
                                   ('forward', 'backward')) AND source <> 'nvtx')
           FROM nvtx_range GROUP BY pid""")
    torch_ns = ranges_ns = 0
    missing = False
    for pid, forward, backward, other in counts:
        c = costs.get(int(pid))
        if c is None:
            continue
        if forward:
            if "ns_per_module_call" not in c:
                missing = True
            else:
                torch_ns += (backward * c.get("ns_per_module_call_with_backward", 0)
                             + max(forward - backward, 0) * c["ns_per_module_call"])
        if other:
            if "ns_per_range" not in c:
                missing = True
            else:
                ranges_ns += other * c["ns_per_range"]
    anchors_ns = 0
    for pid, n in report.sql(
            """SELECT l.pid, count(*) FROM launch_call l JOIN string s ON s.id = l.api_name_id
               WHERE s.value = 'cuDriverGetVersion' GROUP BY l.pid"""):
        anchors_ns += n * costs.get(int(pid), {}).get("ns_per_anchor", 0)
    if torch_ns:
        out.parts.append(OverheadPart("PyTorch hooks", torch_ns, estimated=True))
    if anchors_ns:
        out.parts.append(OverheadPart("launch anchors", anchors_ns, estimated=True))
    if ranges_ns:
        out.parts.append(OverheadPart("ranges", ranges_ns, estimated=True))
    if missing:
        out.not_measured.append("ranges and PyTorch hooks")

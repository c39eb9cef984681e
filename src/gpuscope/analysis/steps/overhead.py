"""What collecting cost the profiled program: time gpuscope and CUPTI spent inside it.

The parts, each from the report:

- **CUPTI buffers**: the CPU time of gpuscope's buffer-completion callbacks (``collector.callback_ns``
  of ``cupti``: the thread's CPU time, waits for the GIL not counted), measured;
- **CUPTI overhead records**: the ``overhead`` rows of CUPTI's own work (buffer requests and
  flushes, instrumentation, its resources), measured by CUPTI. Module loading and lazy function
  loading, which CUPTI reports as overhead too, are left out: CUDA does them with or without a
  profiler; so are the driver's waits for room in a full command buffer (the host ahead of the GPU,
  waiting for it as it would untraced);
- **CUPTI in CUDA calls**: estimated, as the kernels, memory copies and sets CUPTI recorded times
  what recording one costs inside the CUDA call that launches it: the cost the process measured
  at its end (capture/cupti/launch_cost.py, ``ns_per_launch`` in its ``cupti`` row), or in a report
  without it :data:`CUPTI_NS_PER_RECORD`;
- **Python sampler**: the wall time the sampler thread held the GIL (``held_ns`` in the detail of
  its ``collector`` row: the program's threads could run no Python meanwhile), measured; in older
  reports its CPU time (``callback_ns``);
- **flush thread**: the CPU time of the agent's thread that hands the rows to the report writer
  every half second (it holds the GIL while it works), measured;
- **PyTorch operators**: estimated, as the operators recorded (``torch-ops``, or the sample windows
  of ``torch-shapes``) and those passed through while waiting for a window, times the per-operator
  costs the process measured at its end (capture/python/hook_cost.py, in the detail of the
  ``torch-ops`` or ``torch-shapes`` row);
- **PyTorch hooks** and **ranges**: estimated, as the number of module calls (forward ranges, and
  backward ranges for those that had one) and of other recorded ranges, times the per-call costs
  the process measured at its end (capture/python/hook_cost.py, in the ``ranges`` collector's detail);
  a report without those costs has no estimate;
- **launch anchors**: estimated, as the number of anchors (``launch_call`` rows of
  ``cuDriverGetVersion``) times the per-anchor cost measured the same way;
- any other collector row with a ``callback_ns``, under its own name, measured.

Where no probe measured, what the busiest GPU did bounds the cost from above (``at_most``): its
work takes as long without the profiler, so the span from its first to its last operation can have
grown by at most its idle time; on a program whose GPU is busy throughout, time collection took on
the host overlapped the GPU's work and cost the run little or nothing.

Beside these estimates, a run recorded whole with steps carries a measurement: the overhead probe
timed a few steps with collection off (analysis/steps/probe.py), so ``probes`` says how much longer a
recorded step took, whatever the parts.

The total is set against the run's wall time. Processes add up, so with several processes the
share is of one wall clock, not of their summed time. What the estimate can not see is listed in
``unseen`` (the report writer beside the program competing for the cores, above all).

The cost per launch is measured in each process, not taken from one machine, because it depends
on the CPU, the driver and the virtual machine: an empty kernel launched on the program's context
at its end, with the records on and off in turn. The constant for older reports is the H100
measurement of bench/RESULTS.md ("Memory and CPU of the target": 11.29 µs per launch with kernel
records against 10.13 µs without).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...trace.report import Report
from ..ops.own_connection import own_connection
from .probe import ProbeTiming, probe_timings

# CUPTI's own work; not its "CommandBufferFull" rows: those time the driver waiting for room in a full
# command buffer, the host ahead of its GPU by a buffer's worth of work, which a program whose GPU
# sets its pace waits as long without a profiler (on the recorded ResNet-18 inference, 1.1 s of a run
# whose GPU was busy 96% of each step)
CUPTI_OWN_OVERHEAD = ("CuptiBufferFlush", "CuptiInstrumentation", "CuptiResource", "ActivityBufferRequest",
                      "UvmActivityInit")
PART_NAMES = {"cupti": "CUPTI buffers", "sampler": "Python sampler", "flush": "flush thread"}
OPERATOR_COLLECTORS = ("torch-ops", "torch-shapes")
_COUNTED_ELSEWHERE = ("ranges", "capture", *PART_NAMES, *OPERATOR_COLLECTORS)
CUPTI_NS_PER_RECORD = 1_160  # CUPTI's cost inside a launching CUDA call per activity record (H100)
CUPTI_RECORD_TABLES = ("kernel", "memcpy", "memset")
WRITER_UNSEEN = "the report writer beside the program (it competes for the cores)"
CUPTI_UNSEEN = f"CUPTI's cost per CUDA call on this machine (an H100's, {CUPTI_NS_PER_RECORD / 1000:g} µs, is used)"
CUPTI_START_UNSEEN = "CUPTI's start (attaching, and the program's kernels loaded under it)"


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
    unseen: list[str] = field(default_factory=list)  # costs the estimate can not see
    probes: list[ProbeTiming] = field(default_factory=list)  # steps timed with collection off, where measured
    unmeasured: list[ProbeTiming] = field(default_factory=list)  # probes that timed too few steps for a verdict
    # the GPU busiest over its recorded span (analysis/overview.py's DeviceBusy; set by the overview)
    busiest: Any = None

    @property
    def at_most(self) -> float | None:
        """The most collection can have lengthened the recorded span, as a share (0.25: 25% longer):
        the busiest GPU's work takes at least as long without the profiler, so the span was at most
        span / busy of the span without it. None without GPU work; from CUPTI's kernel records,
        which do not lengthen the kernels they time."""
        d = self.busiest
        if d is None or not d.busy_ns or not d.span_ns:
            return None
        return max(0.0, d.span_ns / d.busy_ns - 1.0)

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
    timings = probe_timings(report).values()
    out.probes = [t for t in timings if t.measured]
    out.unmeasured = [t for t in timings if not t.measured]
    measured = dict(report.sql(
        "SELECT name, sum(callback_ns) FROM collector WHERE callback_ns > 0 GROUP BY name ORDER BY name"))
    held = _detail_sum(report, ("sampler",), "held_ns")
    if held is not None:
        measured["sampler"] = held
    if measured.get("cupti"):
        out.parts.append(OverheadPart(PART_NAMES["cupti"], int(measured["cupti"])))
    _estimate_cupti_in_calls(report, out)
    for name in ("sampler", "flush"):
        if measured.get(name):
            out.parts.append(OverheadPart(PART_NAMES[name], int(measured[name])))
    _estimate_operators(report, out)
    kinds = ", ".join(f"'{k}'" for k in CUPTI_OWN_OVERHEAD)
    (cupti_own,) = report.sql(
        f"SELECT coalesce(sum(end_ns - start_ns), 0) FROM overhead WHERE kind IN ({kinds}) AND end_ns > start_ns")[0]
    if cupti_own:
        out.parts.append(OverheadPart("CUPTI overhead records", int(cupti_own)))
    _estimate_ranges(report, out)
    for name, ns in measured.items():
        if name not in _COUNTED_ELSEWHERE:
            out.parts.append(OverheadPart(name, int(ns)))
    if report.count("process"):
        out.unseen.append(WRITER_UNSEEN)
    return out


TRITON_PREFIX = "triton"  # kernels of this name are launched through the driver (Triton's launchers)


def launch_costs(report: Report) -> dict[int, dict[str, int]]:
    """The cost of CUPTI's records per kernel launch that each process measured at its end, by
    launch path (``driver``, ``runtime``): ``ns_per_launch`` and ``ns_per_runtime_launch`` in the
    detail of its ``cupti`` collector row (capture/cupti/launch_cost.py)."""
    keys = {"ns_per_launch": "driver", "ns_per_runtime_launch": "runtime"}
    out: dict[int, dict[str, int]] = {}
    for pid, detail in report.sql("SELECT pid, detail FROM collector WHERE name = 'cupti'"):
        for word in (detail or "").split():
            key, _, value = word.partition("=")
            if key in keys and value.isdigit():
                out.setdefault(int(pid), {})[keys[key]] = int(value)
    return out


def _estimate_cupti_in_calls(report: Report, out: CollectionOverhead) -> None:
    """Add CUPTI's estimated cost inside the CUDA calls that launched the recorded kernels, copies
    and sets: per process, its records times the cost per launch it measured (Triton's kernels at
    the driver's cost, the rest at the runtime's where measured), else the constant."""
    # kernels counted per configuration first: the name is looked at once per configuration, not per kernel
    names = """SELECT k.pid, coalesce(s.value, '') AS name, k.n
               FROM (SELECT pid, config_id, count(*) AS n FROM kernel GROUP BY pid, config_id) k
               LEFT JOIN kernel_config c ON c.id = k.config_id LEFT JOIN string s ON s.id = c.name_id"""
    union = " UNION ALL ".join([names, *(f"SELECT pid, '', 1 FROM {t}" for t in CUPTI_RECORD_TABLES if t != "kernel")])
    # on a connection of its own: the blocks of every kernel it reads are not kept in the report's cache
    with own_connection(report) as own:
        counts = own.sql(f"""SELECT pid, coalesce(sum(n) FILTER (WHERE starts_with(lower(name), '{TRITON_PREFIX}')), 0),
                                    coalesce(sum(n) FILTER (WHERE NOT starts_with(lower(name), '{TRITON_PREFIX}')), 0)
                             FROM ({union}) GROUP BY pid""")
    if not counts:
        return
    measured = launch_costs(report)
    total = 0
    unmeasured = False
    for pid, driver_n, other_n in counts:
        cost = measured.get(int(pid)) if pid is not None else None
        if not cost or "driver" not in cost:
            unmeasured = True
            total += (int(driver_n) + int(other_n)) * CUPTI_NS_PER_RECORD
            continue
        total += int(driver_n) * cost["driver"] + int(other_n) * cost.get("runtime", cost["driver"])
    out.parts.append(OverheadPart("CUPTI in CUDA calls", total, estimated=True))
    if unmeasured:
        out.unseen.append(CUPTI_UNSEEN)
    out.unseen.append(CUPTI_START_UNSEEN)


def _details(report: Report, names: tuple[str, ...]) -> list[dict]:
    """The parsed ``detail`` of each ``collector`` row named in ``names`` (unreadable ones left out)."""
    marks = ", ".join("?" for _ in names)
    out = []
    for (detail,) in report.sql(f"SELECT detail FROM collector WHERE name IN ({marks})", list(names)):
        try:
            info = json.loads(detail or "{}")
        except ValueError:
            continue
        if isinstance(info, dict):
            out.append(info)
    return out


def _detail_sum(report: Report, names: tuple[str, ...], key: str) -> int | None:
    """The sum of ``key`` over the details of the rows named in ``names`` (None where none has it)."""
    values = [int(d[key]) for d in _details(report, names) if isinstance(d.get(key), (int, float))]
    return sum(values) if values else None


def _estimate_operators(report: Report, out: CollectionOverhead) -> None:
    """Add the estimated cost of recording PyTorch operators and of passing them through."""
    total = 0
    missing = False
    for info in _details(report, OPERATOR_COLLECTORS):
        recorded, waited = int(info.get("ops", 0)), int(info.get("waited_ops", 0))
        if not (recorded or waited):
            continue
        if "ns_per_op_recorded" not in info:
            missing = True
            continue
        total += recorded * int(info["ns_per_op_recorded"]) + waited * int(info.get("ns_per_op_passed", 0))
    if total:
        out.parts.append(OverheadPart("PyTorch operators", total, estimated=True))
    if missing:
        out.not_measured.append("PyTorch operators")


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
                  count(*) FILTER (WHERE source = 'torch' AND category IN ('forward', 'model')),
                  count(*) FILTER (WHERE source = 'torch' AND category = 'backward'),
                  count(*) FILTER (WHERE kind = 'range' AND NOT (source = 'torch' AND category IN
                                   ('forward', 'model', 'backward')) AND source <> 'nvtx')
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


def profiling_share_ns(o: CollectionOverhead, steps_ns: int, step_ns: float, launch_ns: float) -> int:
    """Return how much of a step's kernel-launch-overhead idle time (``launch_ns``, of a step of
    ``step_ns``) is profiling's own, at most ``launch_ns``: the parts paid per call (the estimated
    ones: CUPTI in CUDA calls, hooks, ranges, anchors, operators) spread evenly over the steps
    (``steps_ns``, all of them together: the program makes those calls where it launches work), and
    the parts measured as time on a thread (buffers, sampler, flush) spread evenly over the run's
    wall time. In a launch-bound loop every µs the host spends collecting delays the next launch by
    as much, so the GPU waits that long too. 0 without steps."""
    if steps_ns <= 0 or launch_ns <= 0:
        return 0
    per_call = sum(p.ns for p in o.parts if p.estimated)
    timed = o.total_ns - per_call
    own = per_call * step_ns / steps_ns + (timed * step_ns / o.wall_ns if o.wall_ns else 0.0)
    return int(min(launch_ns, own))

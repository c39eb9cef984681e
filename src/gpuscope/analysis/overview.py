"""The short summary printed at the end of ``gpuscope profile``: what ran, GPU busy time, top kernels."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..trace.report import Report
from ..units import human
from .steps.capture import CaptureSummary, capture_summary
from .cpu.summaries import cpu_hotspots_lines, host_summary
from .ops.cuda_summaries import cuda_gpu_kern_sum
from .ranges.layers import layer_sum
from .ranges.module_steps import module_steps
from .steps.overhead import CollectionOverhead, collection_overhead
from .table import Table


@dataclass
class DeviceBusy:
    """How much of the capture a GPU spent running kernels or memory operations."""

    device_id: int
    name: str
    busy_ns: int
    span_ns: int
    kernels: int

    @property
    def busy_percent(self) -> float:
        return 100.0 * self.busy_ns / self.span_ns if self.span_ns else 0.0


@dataclass
class Overview:
    """Headline facts of a report."""

    command: list[str]
    wall_ns: int | None
    exit_description: str
    processes: int
    devices: list[DeviceBusy]
    top_kernels: Table
    records: dict[str, int]
    dropped: dict[str, int]
    collector_overhead_ns: int
    not_recorded: dict[str, str]
    top_functions: Table | None = None  # the heaviest lines of the program's own code (CPU time)
    top_layers: Table | None = None
    host_advice: str | None = None
    warnings: list[str] = field(default_factory=list)
    capture: CaptureSummary | None = None  # None: the whole run was recorded
    overhead: CollectionOverhead | None = None


def busy_time(report: Report) -> list[DeviceBusy]:
    """Return, per device, the length of the union of its kernel and memory-operation intervals.

    ``span_ns`` runs from the first GPU operation's start to the last one's end.
    """
    rows = report.sql(
        """
        WITH ops AS (
            SELECT device_id, start_ns, end_ns, 1 AS is_kernel FROM kernel
            UNION ALL SELECT device_id, start_ns, end_ns, 0 FROM memcpy
            UNION ALL SELECT device_id, start_ns, end_ns, 0 FROM memset),
        ordered AS (
            SELECT *, max(end_ns) OVER (
                PARTITION BY device_id ORDER BY start_ns, end_ns
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
            FROM ops),
        islands AS (
            SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                      OVER (PARTITION BY device_id ORDER BY start_ns, end_ns) AS island
            FROM ordered),
        merged AS (
            SELECT device_id, island, min(start_ns) AS s, max(end_ns) AS e, sum(is_kernel) AS k
            FROM islands GROUP BY device_id, island)
        SELECT m.device_id, coalesce(any_value(d.name), 'device ' || m.device_id),
               sum(e - s), max(e) - min(s), sum(k)
        FROM merged m LEFT JOIN device d ON d.id = m.device_id
        GROUP BY m.device_id ORDER BY m.device_id"""
    )
    return [DeviceBusy(int(a), str(b), int(c), int(d), int(e)) for a, b, c, d, e in rows]


def overview(report: Report, top: int = 5) -> Overview:
    """Return the headline facts of ``report``, with its ``top`` kernels by total time."""
    kern = pick(cuda_gpu_kern_sum(report), ["Time", "Total Time", "Instances", "Avg", "Name"], min(top, 3))
    kern.title, kern.notes = "Heaviest kernels", []
    meta = report.meta
    if meta.get("in_process"):
        exit_description = "a block of the program, gpuscope.profile()"
    elif meta.get("exit_signal"):
        exit_description = f"killed by signal {meta['exit_signal']}"
    elif meta.get("exit_code") is not None:
        exit_description = f"exit code {meta['exit_code']}"
    else:
        exit_description = "unknown exit"
    records = {t: report.count(t) for t in ("kernel", "memcpy", "memset", "sync", "api_call")}
    dropped = dict(report.sql("SELECT source, sum(count) FROM dropped GROUP BY source HAVING sum(count) > 0"))
    overhead = report.sql("SELECT coalesce(sum(callback_ns), 0) FROM collector")[0][0]
    warnings = [m for (m,) in report.sql("SELECT DISTINCT message FROM diagnostic ORDER BY message")]
    if not report.complete:
        warnings.insert(0, "the report was not finished (the profiler was stopped); it holds what was recorded")
    capture = capture_summary(report)
    if capture is not None:
        warnings += capture.problems
    devices = busy_time(report)
    cost = collection_overhead(report)
    cost.busiest = max(devices, key=lambda d: d.busy_ns / d.span_ns if d.span_ns else 0.0, default=None)
    return Overview(
        command=list(meta.get("command") or []),
        wall_ns=meta.get("wall_ns"),
        exit_description=exit_description,
        processes=report.count("process"),
        devices=devices,
        top_kernels=kern,
        records=records,
        dropped={str(k): int(v) for k, v in dropped.items()},
        collector_overhead_ns=int(overhead),
        not_recorded=_not_recorded(report, any(records.values())),
        top_functions=_top_lines(report, top),
        top_layers=_top_layers(report, 3),
        host_advice=(lambda h: h.advice() if h else None)(host_summary(report)),
        warnings=warnings,
        capture=capture,
        overhead=cost,
    )


def _not_recorded(report: Report, gpu_work: bool) -> dict[str, str]:
    """What the report lacks by choice of collectors; without GPU work, only what needs no GPU."""
    from ..capture.collectors import TRACES

    hints: dict[str, str] = {}
    for key, text in report.not_recorded().items():  # an importer may file one hint under two keys
        if text not in hints.values():
            hints[key] = text
    if gpu_work:
        graphs = _graph_hint(report)
        if graphs:
            hints["cuda_graph"] = graphs
        return hints
    gpu_only = {t.hint_key for t in TRACES if t.needs_gpu or t.name.startswith("cuda")}
    return {k: v for k, v in hints.items() if k not in gpu_only}


GRAPHED_SHARE = 0.5  # of the kernels run inside CUDA graphs, above which the summary names graph-level records


def _graph_hint(report: Report) -> str | None:
    """What the report says of CUDA graphs: where gpuscope recorded them whole (a first graph of 64
    nodes or more, :func:`_graphs_chosen`), that their kernels are missing; where most kernels ran
    inside graphs and each was recorded (graphs below that size, or ``--trace graph-nodes``), the
    collector that records one row per graph launch from the start instead: on a reduce-overhead GPT
    it cost 1.21x of untraced against 1.52x for every node (H200, bench/results/real_clients.md)."""
    trace = report.meta.get("trace") or []
    if "cuda" not in trace or "cuda-graph" in trace:
        return None
    chosen = _graphs_chosen(report)
    if chosen:
        return chosen
    total, graphed = report.sql("SELECT count(*), count(*) FILTER (WHERE coalesce(graph_id, 0) <> 0) FROM kernel")[0]
    if not total or graphed / total < GRAPHED_SHARE:
        return None
    return (f"{graphed / total:.0%} of the kernels ran in CUDA graphs, each recorded; one row per graph launch "
            "can cost less: add --trace cuda-graph")


def _graphs_chosen(report: Report) -> str | None:
    """Where gpuscope chose graph-level records at the first graph instantiation (capture/cupti/
    graph_level.py), what the report lacks for it: each graph's kernels."""
    from .ops.graph_level import graphs_recorded_whole

    st = next(iter(graphs_recorded_whole(report).values()), None)
    if st is None:
        return None
    return (f"the kernels inside CUDA graphs: each graph launch is one operation (the first graph had "
            f"{st.get('nodes')} nodes, gpuscope records such graphs whole; kernels outside graphs are "
            "recorded one by one): add --trace graph-nodes")


def pick(table: Table, labels: list[str], top: int) -> Table:
    """Return the first ``top`` rows of ``table`` with only the columns ``labels`` (those it has), and
    its notes."""
    index = [i for i, c in enumerate(table.columns) if c.label in labels]
    return Table(table.name, table.title, [table.columns[i] for i in index],
                 [tuple(r[i] for i in index) for r in table.rows[:top]], list(table.notes))


def _top_lines(report: Report, top: int) -> Table | None:
    """The program's lines by CPU time (library time folded into them), with the sampler's notes
    past the first two (the sampling rate, when it fell short)."""
    if not report.count("cpu_sample"):
        return None
    from .cpu.profile import IMPORTS

    full = cpu_hotspots_lines(report)
    imports = [r for r in full.rows if r[6] == IMPORTS[0]]
    full.rows = [r for r in full.rows if r[6] != IMPORTS[0]]
    table = pick(full, ["CPU Self", "CPU", "Wall Self", "Function", "Line"], top)
    table.title = "Heaviest lines of the program, by CPU time, library calls included"
    table.notes = [f"Imports and start-up, apart: {human(r[0], 'ns')} CPU, {human(r[2], 'ns')} wall." for r in imports]
    table.notes += full.notes[2:]
    return table


def _top_layers(report: Report, top: int) -> Table | None:
    """The modules with the most GPU time they launched (without GPU work: forward CPU time); a note only
    where module ranges were recorded in some steps."""
    table = layer_sum(report)
    rows = [r for r in table.rows if r[1] == "module"]
    if not rows:
        return None
    if any(r[3] for r in rows):
        rows.sort(key=lambda r: -(r[3] or 0))
        labels = ["Name", "Calls", "GPU Self", "Share", "Kernels", "Top Kernel"]
    else:
        rows = [r for r in rows if "." in r[0]] or rows  # the root's forward holds every other
        rows.sort(key=lambda r: -(r[10] or 0))
        labels = ["Name", "Calls", "Fwd CPU", "Bwd CPU"]
    table.rows = rows
    out = pick(table, labels, top)
    said = module_steps(report)
    out.title = "Heaviest layers"
    out.notes = [f"Of the steps with layers: {said.describe()}."] if said is not None and said.sampled else []
    return out

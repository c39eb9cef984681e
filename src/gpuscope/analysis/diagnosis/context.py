"""What the diagnosis rules share: the report, its timelines and breakdown, computed once, and the
questions several rules ask (which data is missing, where work was launched, which Python lines
ran in given intervals)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ...units import duration, size
from ...trace.report import Report
from ..ops.attribution import innermost_table, ranges_table
from ..ops.launch_sites import after_launches, sampled_lines
from ..ranges.module_steps import ranged_ops_sql
from ..roofline.power import PowerBudget, power_budget
from ..steps.probe import ProbeTiming, probe_timings
from .breakdown import BOUNDS, ProcessBreakdown, breakdown_process
from .finding import MIN_SHARE
from .side import SideContext
from .sorted_arrays import share_piece_starts
from .step_means import PerStep
from .timeline import ProcessTimeline, Timelines, load_timelines, shared_if_constant

HOST_PARTS = ("idle_cpu", "idle_launch", "idle_sync", "idle_data")  # GPU idle whose cause is on the host


@dataclass
class Process(PerStep):
    """One process: its timeline, its breakdown, and per-step arithmetic."""

    timeline: ProcessTimeline
    breakdown: ProcessBreakdown
    probe: ProbeTiming | None = None  # its steps timed with collection off (analysis/steps/probe.py)
    power: PowerBudget | None = None  # its GPU's power over the steady steps (analysis/roofline/power.py)

    @property
    def pid(self) -> int:
        return self.timeline.pid

    @cached_property
    def host_idle_ns(self) -> float:
        """The GPU idle time of a steady step whose cause is on the host (:data:`HOST_PARTS`)."""
        parts = self.breakdown.mean_parts()
        return sum(parts.get(k, 0.0) for k in HOST_PARTS)

    @cached_property
    def profiling_ns(self) -> float:
        """The time collection added to a steady step, as the overhead probe measured it (0 without
        a probe, or within its noise). The GPU's work is the same with and without the profiler, so
        this is GPU idle time that the host's share of the breakdown holds and the program does not."""
        if self.probe is None or not self.breakdown.has_steps or not self.probe.cost_share:
            return 0.0
        # the recorded mean step also holds collection's occasional long steps (buffer hand-overs),
        # which the medians leave out: the step without collection is at most the probe's median
        added = self.step_ns * self.probe.cost_share
        if self.probe.times_steps:  # timed by the same steps: the medians compare directly
            added = max(added, self.step_ns - self.probe.base_median)
        return min(added, self.host_idle_ns)

    @cached_property
    def base_ns(self) -> float:
        """The steady step without the profiler: the recorded one less :attr:`profiling_ns`."""
        return self.step_ns - self.profiling_ns

    @cached_property
    def host_factor(self) -> float:
        """The share of the host-caused idle time (CPU work, launch overhead, syncs, data loading)
        that is the program's own: collection's measured cost is taken out of those parts in
        proportion. 1.0 without a probe."""
        if not self.profiling_ns:
            return 1.0
        host = self.host_idle_ns
        return max(0.0, 1.0 - self.profiling_ns / host) if host > 0 else 1.0

    def own(self, host_idle_ns: float) -> float:
        """A per-step host-caused idle time as it would be without the profiler (:attr:`host_factor`)."""
        return host_idle_ns * self.host_factor

    def own_text(self, host_idle_ns: float) -> str:
        """Evidence for a saving scaled by :meth:`own`; "" where nothing was taken out."""
        if self.host_factor >= 1.0:
            return ""
        return (f"without the profiler about {fmt_ns(self.own(host_idle_ns))} of it: the overhead probe measured "
                f"collection adding {fmt_ns(self.profiling_ns)} to each step, taken out of the host's idle parts in "
                "proportion")

    def gpu_gain(self, idle_ns: float) -> float:
        """What removing ``idle_ns`` of GPU idle time per step saves when the GPU ran at its power limit
        (analysis/roofline/power.py: the same work must then fit the same power); all of it otherwise."""
        if self.power is None or not self.power.limited:
            return idle_ns
        return self.power.gain_ns(self.base_ns, idle_ns)

    def power_text(self, idle_ns: float) -> str:
        """Evidence for a saving that :meth:`gpu_gain` cut; "" where it cut nothing."""
        gain = self.gpu_gain(idle_ns)
        if self.power is None or gain >= idle_ns * 0.99:
            return ""
        return (f"estimate: {self.power.text()}; without the idle time the same work must fit the same power, so "
                f"the clock drops: about {fmt_ns(gain)} of the {fmt_ns(idle_ns)} per step is gained")

    def share(self, per_step_ns: float) -> float:
        """Return a per-step time as a share of the step without the profiler (0-1)."""
        return per_step_ns / self.base_ns if self.base_ns else 0.0

    @cached_property
    def steady_idle(self) -> pd.DataFrame:
        """The idle pieces (:class:`.breakdown.ProcessBreakdown` ``idle``) inside steady steps."""
        idle = self.breakdown.idle
        warm = self.breakdown.steps["warmup"].to_numpy(bool)
        steady_rows = [int(i) for i in np.flatnonzero(~warm if (~warm).any() else np.ones(len(warm), bool))]
        mine = idle["window"].isin(steady_rows).to_numpy(bool)
        out = idle if mine.all() else idle[mine]  # every piece steady (no warm-up): no copy of millions
        ns = out["end_ns"].to_numpy(np.int64) - out["start_ns"].to_numpy(np.int64)
        if len(ns) and ns.min() >= -2**31 and ns.max() < 2**31:  # 32-bit where every length fits (the
            ns = ns.astype(np.int32)  # rules sum them, in 64 bits): ten million pieces 40 MB less
        return out.assign(ns=pd.Series(ns, index=out.index, copy=False))

    def wait_ns(self, pieces: pd.DataFrame) -> float:
        """The host time, per step, of the blocking calls behind ``pieces`` (their ``call``) that were
        made in steady steps: removing a wait saves at most this, however long the idle time after it."""
        refs = pieces.loc[pieces["call"] >= 0, "call"].unique()
        calls = self.timeline.calls.iloc[refs.astype(int)]
        w = self.steady_windows
        inside = np.searchsorted(w["start_ns"].to_numpy(np.int64), calls["start_ns"].to_numpy(np.int64), "right") - 1
        ok = (inside >= 0) & (calls["start_ns"].to_numpy(np.int64) < w["end_ns"].to_numpy(np.int64)[np.maximum(inside, 0)])
        calls = calls[ok]
        return self.per_step(float((calls["end_ns"] - calls["start_ns"]).sum()))

    def idle_ns(self, cause: str) -> float:
        """The idle time of one cause (a part name) per steady step."""
        idle = self.steady_idle
        return self.per_step(float(idle.loc[idle["cause"] == cause, "ns"].sum()))


# the columns of the steady kernels (Context.steady_kernels) the rules read
STEADY_COLUMNS = ("op_id", "name", "launch_ns", "start_ns", "end_ns", "critical", "steady_ns")

class Context(SideContext):
    """The report and everything rules share, computed on first use."""

    side = "gpu"  # the side of the report the rules read here (rule.GPU)

    def __init__(self, report: Report, min_share: float = MIN_SHARE) -> None:
        super().__init__(report, min_share)
        self.cache: dict[Any, Any] = {}  # results rules share (e.g. the GEMM loops), keyed by rule and pid

    # -- data that may be missing -------------------------------------------------------------
    @cached_property
    def _counts(self) -> dict[str, int]:
        r = self.report
        return {
            "gpu": sum(r.count(t) for t in ("kernel", "memcpy", "memset", "graph_launch")),
            "torch": int(r.sql("SELECT count(*) FROM nvtx_range WHERE source = 'torch'")[0][0]),
            "cpu_samples": r.count("cpu_sample"),
            "nvml": int(r.sql("SELECT count(*) FROM host_counter WHERE name LIKE 'gpu%.memory_used_bytes'")[0][0]),
        }

    def missing(self, need: str) -> str | None:
        """Return, in one line, why data ``need`` is not in the report; None when it is."""
        hints = self.report.not_recorded()
        if need == "gpu" and not self._counts["gpu"]:
            hint = hints.get("cuda")
            return (f"no GPU operations in this report: {hint}" if hint
                    else "no GPU operations were recorded (a run without a GPU, or no CUDA work)")
        if need == "steps" and self.timelines.step_source.kind is None:
            return ("no steps in this report: mark them with gpuscope.step(), record PyTorch's optimizer "
                    "steps with --trace torch, or wrap each step in a range named 'step'")
        if need == "torch" and not self._counts["torch"]:
            hint = hints.get("torch")
            return (f"no PyTorch ranges in this report: {hint}" if hint
                    else "no PyTorch ranges in this report (--trace torch records them when the program uses PyTorch)")
        if need == "cpu_samples" and not self._counts["cpu_samples"]:
            hint = hints.get("cpu")
            return f"no Python stack samples in this report: {hint}" if hint else "no Python stack samples were recorded"
        if need == "nvml" and not self._counts["nvml"]:
            hint = hints.get("nvml")
            return (f"no GPU memory counters in this report: {hint}" if hint
                    else "no GPU memory counters (NVML) were recorded: add --trace nvml")
        if need == "roofline" and self.roofline is None:
            return self._roofline_reason
        return None

    # -- shared computations ------------------------------------------------------------------
    @cached_property
    def cpu_side(self) -> Any:
        """The report's CPU side (:class:`.cpu_context.CpuContext`), for the rules that read both:
        the loop's wall time by part, its samples and the host's cores, beside the GPU's timeline."""
        from .cpu_context import CpuContext

        return CpuContext(self.report, self.min_share)

    @cached_property
    def timelines(self) -> Timelines:
        out = load_timelines(self.report)
        release_freed()
        return out

    @cached_property
    def names(self) -> dict[int, str]:
        """Kernel names by string id."""
        return dict(self.report.sql(
            "SELECT DISTINCT s.id, s.value FROM kernel_config c JOIN string s ON s.id = c.name_id"))

    @cached_property
    def _roofline_and_reason(self) -> tuple[pd.DataFrame | None, str]:
        try:
            from ..roofline.points import kernel_points  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            return None, "the roofline analysis is not available in this gpuscope"
        try:
            points = kernel_points(self.report)
        except Exception as exc:  # noqa: BLE001  (a failing analysis must not stop the others; said in notes)
            reason = f"the roofline analysis failed ({type(exc).__name__}: {exc})"
            self.notes.append(reason[0].upper() + reason[1:] + "; kernels have no bound class.")
            return None, reason
        if points is None or not len(points):
            return None, "no roofline points for this report (FLOPs and bytes of its kernels are not known)"
        return points, ""

    @property
    def roofline(self) -> pd.DataFrame | None:
        """``kernel_points(report)`` of the roofline analysis, or None when it is missing or empty."""
        return self._roofline_and_reason[0]

    @property
    def _roofline_reason(self) -> str:
        return self._roofline_and_reason[1]

    @cached_property
    def bound_of_name(self) -> dict[str, str]:
        """The bound class of each kernel name (its class in the roofline row with the most time)."""
        points = self.roofline
        if points is None:
            return {}
        best = points.sort_values("time_ns", ascending=False).drop_duplicates("name")
        return {str(n): (str(b) if b in BOUNDS else "unknown") for n, b in zip(best["name"], best["bound"])}

    @cached_property
    def processes(self) -> list[Process]:
        """Every process that ran GPU operations, with its breakdown."""
        out = []
        for tl in self.timelines.processes:
            names = self._name_column(tl.ops["name_id"])
            # the bound class of each name, given to its operations by code: ten million strings compared
            # four times took a second
            of_name = np.array([BOUNDS.index(self.bound_of_name.get(str(n), "unknown")) for n in names.cat.categories],
                               dtype=np.int8)
            codes = of_name[names.cat.codes.to_numpy()]
            codes[(tl.ops["kind"] != "kernel").to_numpy()] = BOUNDS.index("unknown")
            bound = pd.Categorical.from_codes(codes, categories=list(BOUNDS))
            tl.ops["name"] = names
            p = Process(tl, breakdown_process(tl, bound), self.probes.get(tl.pid))
            release_freed()
            share_piece_starts(tl.ops, p.breakdown.idle)
            p.power = self._power(p)
            out.append(p)
            release_freed()
        return out

    def _power(self, p: Process) -> PowerBudget | None:
        """The power budget of the GPU that ran most of ``p``'s kernels, over its steady steps."""
        # the kernels' devices alone, not a copy of every column of ten million operations
        ops = p.timeline.ops
        devices = ops["device_id"][(ops["kind"] == "kernel").to_numpy(bool)]
        if not len(devices) or not p.breakdown.has_steps or devices.isna().all():
            return None
        device = int(devices.mode().iloc[0])
        w = p.steady_windows
        if not len(w):
            return None
        clock = self.report.sql("SELECT max(core_clock_khz) FROM device WHERE id = ?", [device])
        max_mhz = float(clock[0][0]) / 1e3 if clock and clock[0][0] else 0.0
        return power_budget(self.report, device, int(w["start_ns"].min()), int(w["end_ns"].max()), max_mhz)

    @cached_property
    def probes(self) -> dict[int, ProbeTiming]:
        """Per process, its steps timed with collection off (the overhead probe), where it ran one."""
        return probe_timings(self.report)

    def _name_column(self, name_ids: pd.Series) -> pd.Series:
        """Kernel names for string ids, as a categorical column ("" where there is none)."""
        ids = np.array(sorted(self.names), dtype=np.int64)
        labels = [self.names[int(i)] for i in ids]
        if "" not in labels:
            ids, labels = np.append(ids, -1), [*labels, ""]
            order = np.argsort(ids, kind="stable")
            ids, labels = ids[order], [labels[i] for i in order]
        wanted = name_ids.fillna(-1).to_numpy(np.int64)
        none = labels.index("")
        if ids[0] >= -1 and ids[-1] < 1 << 24:  # string ids: a table of them, not a search per kernel
            table = np.full(int(ids[-1]) + 2, none, dtype=np.int64)
            table[ids[::-1] + 1] = np.arange(len(ids))[::-1]  # of equal ids, the first (as the search finds)
            codes = table[np.clip(wanted + 1, 0, len(table) - 1)]
            codes[(wanted < -1) | (wanted > ids[-1])] = none
        else:
            codes = np.searchsorted(ids, wanted)
            codes = np.where((codes < len(ids)) & (ids[np.minimum(codes, len(ids) - 1)] == wanted), codes, none)
        return pd.Series(pd.Categorical.from_codes(codes, categories=labels), index=name_ids.index)

    def ops(self, p: Process) -> pd.DataFrame:
        """The process's operations with their ``steady_ns`` and ``critical`` (see :mod:`.breakdown`);
        computed once per process, not to be changed."""
        key = ("ops", p.pid)
        if key not in self.cache:
            own = p.timeline.ops
            # the breakdown's columns shared, not copied (an array given to assign is copied: 90 MB
            # for ten million operations); neither frame is changed
            self.cache[key] = own.assign(**{c: pd.Series(p.breakdown.ops[c].to_numpy(), index=own.index, copy=False)
                                            for c in ("steady_ns", "critical")})
        frame: pd.DataFrame = self.cache[key]
        return frame

    def steady_kernels(self, p: Process) -> tuple[pd.DataFrame, np.ndarray]:
        """The process's kernels that ran in steady steps (the columns of :data:`STEADY_COLUMNS`), in
        GPU start order, and for each the steady step it started in (the position in
        ``p.steady_windows``, from 1; read-only); computed once per process, not to be changed."""
        key = ("steady_kernels", p.pid)
        if key not in self.cache:
            ops = self.ops(p)
            mine = ((ops["kind"] == "kernel") & (ops["steady_ns"] > 0)).to_numpy(bool)
            # the columns the rules read, of the kernels alone: a copy of every column of ten million
            # rows took 0.9 GB; a run of only steady kernels in strict start order (the operations are
            # in start order) is the frame's columns as they are
            kern = ops[list(STEADY_COLUMNS)]
            kern = kern if mine.all() else kern[mine]
            start = kern["start_ns"].to_numpy(np.int64)
            if not (start[1:] > start[:-1]).all():
                kern = kern.sort_values("start_ns")
            starts = p.steady_windows["start_ns"].to_numpy(np.int64)
            step = np.searchsorted(starts, kern["start_ns"].to_numpy(np.int64), "right")
            # 32-bit where the steps fit, one value viewed for all where there is one step
            step = shared_if_constant(step.astype(np.int32) if len(starts) < 2**31 else step)
            self.cache[key] = (kern, step)
        out: tuple[pd.DataFrame, np.ndarray] = self.cache[key]
        return out

    def framework_ranges(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """The sorted, disjoint intervals in which the process's main thread ran PyTorch's own code:
        a module's forward or backward, loss.backward(), the optimizer's step or zero_grad."""
        key = ("framework", pid)
        if key not in self.cache:
            rows = self.report.sql(
                """SELECT start_ns, end_ns FROM nvtx_range WHERE pid = ? AND source = 'torch' AND kind = 'range'
                   AND category IN ('forward', 'model', 'backward', 'autograd', 'optimizer', 'zero_grad')
                   AND end_ns IS NOT NULL AND (tid = pid OR tid IS NULL) ORDER BY start_ns""", [int(pid)])
            lo: list[int] = []
            hi: list[int] = []
            for a, b in rows:
                if lo and a <= hi[-1]:
                    hi[-1] = max(hi[-1], int(b))
                else:
                    lo.append(int(a))
                    hi.append(int(b))
            self.cache[key] = (np.array(lo, np.int64), np.array(hi, np.int64))
        out: tuple[np.ndarray, np.ndarray] = self.cache[key]
        return out

    # -- locations and evidence -----------------------------------------------------------------
    def top_launch_range(self, op_ids: Sequence[int] | np.ndarray,
                         weights: Sequence[float] | np.ndarray | None = None) -> str | None:
        """The innermost range (any source) open where most of ``op_ids`` (weighted) were launched,
        as ``name (category)``; None where none of them was launched inside a range. Where module ranges
        were recorded in some steps only, those steps' operations say it (in the others the innermost
        PyTorch range is the model's outermost call), unless none of ``op_ids`` ran in them.

        Summed in DuckDB: the operations can be millions (a rule's kernels over a long run), and one
        Python object per operation cost gigabytes.
        """
        if not len(op_ids) or not self.report.count("nvtx_range"):
            return None
        ids = np.asarray(op_ids)
        if ids.dtype.kind not in "iu" or weights is not None:
            ids = np.asarray(op_ids, np.int64)
        elif ids.dtype.itemsize > 4 and ids.min() >= -2**31 and ids.max() < 2**31:
            ids = ids.astype(np.int32)
        # unweighted, each operation counts one: no column of ones (ten million of them 80 MB)
        ops = pd.DataFrame({"op_id": ids} if weights is None else {"op_id": ids, "w": np.asarray(weights, np.float64)},
                           copy=False)
        weight = "count(*)" if weights is None else "sum(o.w)"
        name = f"gpuscope_launched_{id(ops)}"
        self.report.con.register(name, ops)
        source = self.timelines.step_source
        ranged = ranged_ops_sql(self.report, source) if source.kind is not None else None
        try:
            rows: list[Any] = []
            for where in ([f"WHERE o.op_id IN ({ranged})"] if ranged else []) + [""]:
                rows = self.report.sql(
                    f"""SELECT CASE WHEN coalesce(r.category, '') IN ('', 'step') THEN n.value
                                    ELSE n.value || ' (' || r.category || ')' END AS label, {weight} AS w
                        FROM {name} o JOIN {innermost_table(self.report)} p USING (op_id)
                        JOIN {ranges_table(self.report)} r USING (rid) JOIN string n ON n.id = r.name_id
                        {where} GROUP BY label ORDER BY w DESC, label LIMIT 1""")
                if rows:
                    break
        finally:
            self.report.con.unregister(name)
        return str(rows[0][0]) if rows else None

    def program_lines(self, pid: int, starts: np.ndarray, ends: np.ndarray, top: int = 3) -> list[tuple[str, str, float]]:
        """The program lines (``file:line``, function, share) that Python samples of the process's
        main thread (all threads, if it has none) show most within the given intervals (sorted,
        each ending no earlier than the one before)."""
        samples = self._samples.get(pid)
        if samples is None:
            return []
        lines = sampled_lines(self.report, pid, samples.rename(columns={"weight_ns": "weight"}), starts, ends)
        total = sum(ns for _, _, ns in lines)
        return [(loc, func, ns / total) for loc, func, ns in lines[:top]]

    @cached_property
    def _samples(self) -> dict[int, pd.DataFrame]:
        if not self._counts["cpu_samples"]:
            return {}
        frame = self.report.df("SELECT ts_ns, pid, tid, stack_id, weight_ns FROM cpu_sample ORDER BY ts_ns")
        out = {}
        for pid, mine in frame.groupby("pid"):
            main = mine[mine["tid"] == pid]
            out[int(pid)] = main if len(main) else mine
        return out

    def launch_lines(self, pid: int, launches: np.ndarray, top: int = 3) -> list[tuple[str, str, float]]:
        """The program lines that Python samples show just after the given launch times (within
        :data:`..ops.launch_sites.WINDOW_NS` of each): where the program launched that work, as
        :meth:`program_lines` gives them."""
        return self.program_lines(pid, *after_launches(launches), top) if len(launches) else []

    def kernel_location(self, p: Process, kern: pd.DataFrame, op_ids: list[int], fallback: str) -> str:
        """Where the operations ``op_ids`` (rows of ``kern``) were launched: the program line that
        Python samples show after their launches, else the range that launched most of them, else
        ``fallback``."""
        # without samples of the process there are no lines: no selection of millions of launches
        lines = self.launch_lines(p.pid, kern.loc[kern["op_id"].isin(op_ids), "launch_ns"].to_numpy(np.int64)
                                  ) if p.pid in self._samples else []
        if lines:
            return f"{lines[0][0]} {lines[0][1]}"
        where = self.top_launch_range(op_ids)
        return f"launched mostly in {where}" if where else fallback

    def describe_lines(self, lines: list[tuple[str, str, float]]) -> str:
        """``file:line function (share), ...`` for evidence."""
        return ", ".join(f"{loc} {func} ({share:.0%})" for loc, func, share in lines)


def release_freed() -> None:
    """Give the memory freed so far back to the system (glibc's ``malloc_trim``: ``analyze`` has malloc
    keep what is freed, :mod:`..heap`): called between the parts whose arrays do not outlive
    them (reading the timelines, the breakdown, each rule), so that the holes one part's arrays
    leave in the heap are not resident beside the next part's peak (ten million operations: about
    0.1 GB of the peak)."""
    from ..heap import give_back

    give_back()


def fmt_ns(ns: float) -> str:
    """A duration for evidence text."""
    return duration(ns)


def fmt_bytes(n: float) -> str:
    """A size for evidence text (decimal units)."""
    return size(n)


def per_step_text(p: Process, ns: float) -> str:
    """``1.2 ms per step (10.0% of the step)``, or per capture without steps."""
    return f"{fmt_ns(ns)} {p.unit} ({p.share(ns):.1%} of {'the step' if p.breakdown.has_steps else 'it'})"


def recorded_text(p: Process, ns: float) -> str:
    """As :func:`per_step_text`, for a time read off the recording as it is: where the overhead probe
    measured collection's cost its share is of the recorded step (of the step without the profiler it
    could pass 100%: 278 ms of idle time in a 320 ms recorded step that takes 265 ms untraced)."""
    if not p.profiling_ns:
        return per_step_text(p, ns)
    share = ns / p.step_ns if p.step_ns else 0.0
    return f"{fmt_ns(ns)} {p.unit} ({share:.1%} of the recorded {'step' if p.breakdown.has_steps else 'capture'})"


def data_dict(**items: Any) -> dict[str, Any]:
    """Raw numbers of a finding for machine output: ints for ns and bytes, floats rounded."""
    return {k: (int(round(v)) if isinstance(v, float) and k.endswith(("_ns", "bytes")) else v)
            for k, v in items.items()}

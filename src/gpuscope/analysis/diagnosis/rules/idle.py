"""Rules on GPU idle time whose cause is on the host: launch overhead, and the GPU side of the hot
line (:func:`gpu_hot_line`: CPU work while the GPU waits); the idle pieces they share."""

from __future__ import annotations

import numpy as np

from ..context import Context, Process, data_dict, fmt_ns, per_step_text, recorded_text
from ..finding import Finding
from ..rule import Rule
from .gemm_loops import gemm_loops, idle_inside
from .sync import mid_step_waits

GRAPH_GAP_NS = 1_000  # kernel-to-kernel gap left when a CUDA graph replays the launches
SHORT_GAP_NS = 500_000  # outside PyTorch's ranges, a host gap shorter than this is launch machinery
BUSY_GPU = 0.9  # a GPU busy more than this share of the step without the profiler ...
BUSY_GPU_MAX_SHARE = 0.05  # ... gets no launch-bound saving above this share of it
MID_STEP_WAITS = 0.95  # host waits for the GPU per step, with work launched after them, that split the step


def steady_pieces(p: Process, cause: str) -> tuple[np.ndarray, np.ndarray]:
    """The steady idle pieces of one cause (starts, ends), by start: two columns selected, not the
    frame of millions of pieces copied and sorted (they come in start order, each start once)."""
    idle = p.steady_idle
    mine = (idle["cause"] == cause).to_numpy(bool)
    starts, ends = idle["start_ns"].to_numpy(np.int64)[mine], idle["end_ns"].to_numpy(np.int64)[mine]
    if not (starts[1:] >= starts[:-1]).all():
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    return starts, ends


def _inside(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per piece [starts, ends), the time it shares with the sorted, disjoint intervals [lo, hi)."""
    out = np.zeros(len(starts), dtype=np.float64)
    if not len(lo):
        return out
    first = np.searchsorted(hi, starts, "right")
    last = np.searchsorted(lo, ends, "left")
    for i in np.flatnonzero(last > first):
        a, b = first[i], last[i]
        out[i] = float(np.clip(np.minimum(hi[a:b], ends[i]) - np.maximum(lo[a:b], starts[i]), 0, None).sum())
    return out


def _systematic(p: Process, ends: np.ndarray) -> np.ndarray:
    """Per idle piece (given its end), whether a gap ends at the same place of the step (the same
    operation of the step's sequence) in at least half the steady steps: the program's own work
    at a fixed point of its loop, rather than jitter (garbage collection, scheduling)."""
    if not p.breakdown.has_steps or not len(ends):
        return np.zeros(len(ends), bool)
    ops = p.timeline.ops
    op_start = np.sort(ops["start_ns"].to_numpy(np.int64))
    w = p.steady_windows
    w_start = w["start_ns"].to_numpy(np.int64)
    nxt = np.searchsorted(op_start, ends, "left")
    step = np.searchsorted(w_start, ends, "right") - 1
    first_op = np.searchsorted(op_start, w_start, "left")
    position = nxt - first_op[np.maximum(step, 0)]
    keys = position.astype(np.int64)
    seen: dict[int, set[int]] = {}
    for k, s in zip(keys.tolist(), step.tolist()):
        seen.setdefault(k, set()).add(s)
    need = max(2, 0.5 * len(w))
    return np.array([len(seen[k]) >= need for k in keys.tolist()], bool)


def graph_capturable(ctx: Context, p: Process) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CPU-work idle pieces of the steady steps (starts, ends) and, per piece, the time a CUDA
    graph would remove: the host ran PyTorch's own code between two launches (inside a module's
    forward, backward, the optimizer or zero_grad: dispatch, autograd, optimizer loops), or, outside
    those ranges, a gap shorter than that (below) that does not recur at the same place of
    every step (jitter of the host while it launches: a replayed graph leaves the host nothing to be
    late for). A gap longer than a whole step and than :data:`SHORT_GAP_NS`, inside those ranges or
    not, is a stall that a graph does not prevent. A gap at a fixed place of the loop outside those ranges is the
    program's own work (preprocessing, logging), which a graph does not replay. Without steps, gaps shorter than :data:`SHORT_GAP_NS` count as
    launch machinery. Computed once per process (three rules ask); the arrays are not to be changed."""
    key = ("graph_capturable", p.pid)
    if key not in ctx.cache:
        ctx.cache[key] = _graph_capturable(ctx, p)
    out: tuple[np.ndarray, np.ndarray, np.ndarray] = ctx.cache[key]
    return out


def _graph_capturable(ctx: Context, p: Process) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    starts, ends = steady_pieces(p, "idle_cpu")
    lo, hi = ctx.framework_ranges(p.pid)
    framework = _inside(starts, ends, lo, hi)
    gaps = _stretches(starts, ends)
    new = np.concatenate([[True], starts[1:] != ends[:-1]]) if len(starts) else np.array([], bool)
    stretch = gaps[np.cumsum(new) - 1] if len(starts) else np.array([], np.int64)
    # a gap longer than a whole step (and than SHORT_GAP_NS) is a stall of the host (garbage
    # collection, paging, a profiler's buffer hand-over), which a graph does not prevent: the GPU
    # drains just the same
    short = stretch < max(SHORT_GAP_NS, p.step_ns)
    if p.breakdown.has_steps:
        jitter = ~_systematic(p, ends) & (framework == 0) & short
    else:
        jitter = short & (framework == 0)
    return starts, ends, np.where(jitter, (ends - starts).astype(np.float64), np.where(short, framework, 0.0))


def one_off_stalls(ctx: Context, p: Process) -> np.ndarray:
    """Per CPU-work idle piece of :func:`graph_capturable`, whether it is part of a one-off stall of
    the host: a stretch longer than a whole step (and than :data:`SHORT_GAP_NS`) that does not recur
    at the same place of the step in at least half the steady steps (garbage collection, paging, a
    profiler's hand-over). Neither a graph nor moving the program's work off the step removes it."""
    key = ("one_off_stalls", p.pid)
    if key not in ctx.cache:
        starts, ends, _ = graph_capturable(ctx, p)
        if not p.breakdown.has_steps or not len(starts):
            ctx.cache[key] = np.zeros(len(starts), bool)
        else:
            gaps = _stretches(starts, ends)
            new = np.concatenate([[True], starts[1:] != ends[:-1]])
            stretch = gaps[np.cumsum(new) - 1]
            ctx.cache[key] = (stretch >= max(SHORT_GAP_NS, p.step_ns)) & ~_systematic(p, ends)
    out: np.ndarray = ctx.cache[key]
    return out


def _stretches(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Lengths of the stretches that touching pieces make."""
    if not len(starts):
        return np.array([], np.int64)
    new = np.concatenate([[True], starts[1:] != ends[:-1]])
    ids = np.cumsum(new) - 1
    return np.bincount(ids, weights=ends - starts).astype(np.int64)


def gpu_hot_line(ctx: Context, rule: str) -> list[Finding]:
    """The hot-line rule on a report with GPU work: GPU idle while the host ran Python or framework
    code that launched nothing (the CPU-work part of the breakdown), with the Python lines that ran
    then; findings named ``rule``."""
    out = []
    for p in ctx.processes:
        starts, ends, graphed = graph_capturable(ctx, p)
        stalls = one_off_stalls(ctx, p)
        stalled = p.per_step(float((ends - starts)[stalls].sum()))
        own = ((ends - starts) - graphed > 0) & ~stalls
        starts, ends = starts[own], ends[own]
        looped = idle_inside(p, gemm_loops(ctx, p), starts, ends)
        recorded = p.per_step(float((ends - starts).sum() - graphed[own].sum()) - looped)
        ns = p.gpu_gain(p.own(recorded))
        if p.share(ns) < ctx.min_share:
            continue
        gaps = _stretches(starts, ends)
        evidence = [f"GPU idle {recorded_text(p, recorded)} while the host ran the program's own code and "
                    "launched nothing for more than 100 µs at a time (PyTorch's own code between launches is "
                    "counted under launch overhead: a CUDA graph removes it)",
                    f"{len(gaps) / p.n_steps:.1f} such gaps per step, the longest {fmt_ns(gaps.max())}"]
        if p.own_text(recorded):
            evidence.append(p.own_text(recorded))
        if p.power_text(p.own(recorded)):
            evidence.append(p.power_text(p.own(recorded)))
        if stalled:
            evidence.append(f"left out: one-off host stalls longer than a step ({fmt_ns(stalled)} per step) that "
                            "do not recur at one place of the step")
        lines = ctx.program_lines(p.pid, starts, ends)
        if lines:
            evidence.append("Python lines running then: " + ctx.describe_lines(lines))
        else:
            evidence.append("record Python samples (--trace cpu) to see which lines ran in these gaps")
        out.append(Finding(
            rule=rule, pid=p.pid, saving_ns=ns, share=p.share(ns),
            title=f"GPU waits for Python: idle {per_step_text(p, ns)} while the host computes",
            evidence=evidence,
            location=f"{lines[0][0]} {lines[0][1]}" if lines else "host code between GPU launches",
            fix=("Take this work off the step's critical path: do per-sample preprocessing in DataLoader "
                 "workers (num_workers > 0) or as batched tensor operations on the GPU, replace Python loops "
                 "over tensors with vectorized operations, and log or checkpoint less often. Once the loop "
                 "does not wait for the GPU, the remaining host work overlaps the GPU's."),
            data=data_dict(idle_ns=ns, gaps_per_step=len(gaps) / p.n_steps, longest_gap_ns=int(gaps.max())),
        ))
    return out


class LaunchBound(Rule):
    name = "launch_bound"
    description = ("Steps whose kernels are shorter than the time the host takes to launch them: the GPU "
                   "waits between back-to-back launches (the launch-overhead part of the breakdown).")

    def evaluate(self, ctx: Context) -> list[Finding]:
        out = []
        for p in ctx.processes:
            starts, ends = steady_pieces(p, "idle_launch")
            looped = idle_inside(p, gemm_loops(ctx, p), starts, ends)
            launch_idle = p.per_step(float((ends - starts).sum()) - looped)
            del starts, ends  # millions of pieces: not held while the launches are measured below
            cpu_starts, cpu_ends, graphed = graph_capturable(ctx, p)
            keep = graphed > 0
            cpu_looped = idle_inside(p, gemm_loops(ctx, p), cpu_starts[keep], cpu_ends[keep])
            framework = p.per_step(max(0.0, float(graphed.sum()) - cpu_looped))
            recorded = launch_idle + framework
            idle = p.own(recorded)
            ops = ctx.ops(p)
            w = p.steady_windows
            # masks and the columns used, not copies of the operations (millions of rows in a long run)
            launch = ops["launch_ns"].to_numpy(np.int64)
            inside = (launch >= w["start_ns"].min()) & (launch < w["end_ns"].max())
            kernel = inside & (ops["kind"] == "kernel").to_numpy(bool)
            n_kernels = int(kernel.sum())
            per_step = n_kernels / p.n_steps
            # a kernel a graph already replays keeps its gap in the recording: only the kernels launched
            # one by one gain a graph's gap in place of their launch
            single = max(0.0, per_step - _graphed_kernels(ctx, p) / p.n_steps)
            removed = max(0.0, idle - single * GRAPH_GAP_NS)
            graphed = single < per_step / 2  # most of the step's kernels already run in graphs
            ns = p.gpu_gain(removed)
            busy_ns = sum(v for k, v in p.breakdown.mean_parts().items() if k.startswith("busy_"))
            untraced = _untraced_step(ctx, p)
            capped = untraced > 0 and busy_ns / untraced > BUSY_GPU and ns > BUSY_GPU_MAX_SHARE * p.base_ns
            if capped:
                ns = BUSY_GPU_MAX_SHARE * p.base_ns
            if p.share(ns) < ctx.min_share or not n_kernels:
                continue
            interval = _median_interval(launch, inside)
            duration = _median_duration(ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64), kernel)
            busy = p.breakdown.mean_parts()
            busy_share = sum(busy[k] for k in busy if k.startswith("busy_")) / busy["duration_ns"]
            where = ctx.top_launch_range(ops["op_id"].to_numpy()[kernel])
            waits, wait_at = (0.0, "") if graphed else mid_step_waits(ctx, p)
            # every step waits in its middle (the program's own read, not an occasional one: the ranks of a
            # job, running the same code, then get the same fix and merge): the step cannot be one graph as it is
            blocked = waits >= MID_STEP_WAITS
            out.append(Finding(
                rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
                title=(f"Launch-bound between CUDA graph replays: launch the loop as fewer, larger graphs; "
                       if graphed else "Launch-bound: capture the work between the step's waits in CUDA graphs; "
                       if blocked else "Launch-bound: capture the step in a CUDA graph; ")
                      + f"{per_step:.0f} kernels per step, GPU idle between launches {recorded_text(p, recorded)}",
                evidence=[
                    f"{per_step:.0f} kernels per step, median kernel {fmt_ns(duration)}, median time between "
                    f"launches {fmt_ns(interval)}",
                    f"GPU busy {busy_share:.0%} of the step; back-to-back launch gaps {fmt_ns(launch_idle)} and "
                    f"PyTorch's own code between launches (dispatch, autograd, optimizer) {fmt_ns(framework)} per step",
                    f"estimate: a graph replay keeps the GPU work plus about {fmt_ns(GRAPH_GAP_NS)} per kernel and "
                    "removes both" + (f" ({per_step - single:.0f} of the step's kernels already run in CUDA graphs: "
                                      "their gaps are kept as recorded, and the gaps between replays go)"
                                      if per_step - single >= 1 else ""),
                ] + [t for t in (p.own_text(recorded), p.power_text(removed)) if t] + (
                    [f"the GPU is busy {busy_ns / untraced:.0%} of the step without the profiler ({fmt_ns(untraced)}"
                     f"{'' if p.profiling_ns else ', less the collection overhead estimated for it'}): the launch gaps "
                     "of a GPU this busy are mostly where collection delayed the host, so the saving is capped at "
                     f"{BUSY_GPU_MAX_SHARE:.0%} of the step"] if capped else []) + (
                    [f"the host waits for the GPU {waits:.1f} times per step with work launched after it"
                     + (f" (most at {wait_at})" if wait_at else "") + ": a CUDA graph holds only the work between such "
                     "waits (torch.compile breaks its graph at each), unless the values read stay on the GPU"]
                    if blocked else []),
                location=f"launched mostly in {where}" if where else "the step's kernel launches",
                fix=(("The step's kernels already run in CUDA graphs (XLA's command buffers, a captured graph): "
                      "the GPU waits between replays, for the host to dispatch the next call. Run several steps "
                      "per call (jax.lax.scan or a Python loop inside one jitted function, one graph over "
                      "several steps), or give each call more work (a larger batch).") if graphed else
                     # one text whether the step waits in its middle or not (the evidence says which): the
                     # ranks of a job merge by their fix, and their counts of waits differ by timing
                     ("Launch the step as one unit: capture it in a CUDA graph (torch.cuda.CUDAGraph / "
                      "torch.cuda.make_graphed_callables, or torch.compile(mode='reduce-overhead')), or fuse its "
                      "small kernels with torch.compile; a larger batch gives each launch more work. Where the step "
                      "waits for the GPU in its middle, a graph holds only the work between the waits: capture "
                      "those parts, or keep the values read on the host on the GPU (torch.where in place of "
                      "`if tensor.item() ...`; the host-sync findings name the lines) and capture the whole step.")),
                data=data_dict(launch_idle_ns=launch_idle, framework_idle_ns=framework, kernels_per_step=per_step,
                               median_kernel_ns=duration,
                               median_launch_interval_ns=interval, mid_step_waits_per_step=waits),
            ))
        return out


def _median_interval(launch: np.ndarray, inside: np.ndarray) -> float:
    """The median time between the launches ``launch[inside]``, in launch order. Of ten million
    launches, one array at a time: the selection (none where every launch is inside; not sorted where
    they are in order already) and their differences, whose median is taken in place."""
    launches = launch if inside.all() else launch[inside]
    if len(launches) < 2:
        return 0.0
    if not (launches[1:] >= launches[:-1]).all():
        # stable: a merge of the runs already in order, the launches mostly are (the same values);
        # in place where the selection is a copy already
        if launches is launch:
            launches = np.sort(launches, kind="stable")
        else:
            launches.sort(kind="stable")
    gaps = np.subtract(launches[1:], launches[:-1])
    del launches
    return float(np.median(gaps, overwrite_input=True))


def _median_duration(start: np.ndarray, end: np.ndarray, kernel: np.ndarray) -> float:
    """The median duration of the operations ``kernel`` (a mask), computed in one array of them."""
    if kernel.all():
        dur = end - start
    else:
        dur = end[kernel]
        dur -= start[kernel]
    return float(np.median(dur, overwrite_input=True))


def _graphed_kernels(ctx: Context, p: Process) -> int:
    """The kernels of the steady steps that a CUDA graph launched (``graph_id`` set): XLA's command
    buffers, torch.compile's reduce-overhead, a captured step."""
    w = p.steady_windows
    (n,) = ctx.report.sql("SELECT count(*) FROM kernel WHERE pid = ? AND coalesce(graph_id, 0) <> 0 "
                          "AND start_ns >= ? AND start_ns < ?",
                          [int(p.pid), int(w["start_ns"].min()), int(w["end_ns"].max())])[0]
    return int(n)


def _untraced_step(ctx: Context, p: Process) -> float:
    """The steady step without the profiler: the overhead probe's measurement where it ran
    (:attr:`Process.base_ns`), else the recorded step less the collection overhead estimated for
    its kernel launch overhead (:func:`...steps.overhead.profiling_share_ns`, as the diagnosis's notes
    say it)."""
    if p.profiling_ns or (p.probe is not None and p.probe.measured):
        return p.base_ns
    key = ("untraced_step", p.pid)
    if key not in ctx.cache:
        from ...steps.overhead import collection_overhead, profiling_share_ns

        mean = p.breakdown.mean_parts()
        own = 0
        if mean.get("idle_launch", 0.0) > 0:
            own = profiling_share_ns(collection_overhead(ctx.report), int(p.breakdown.steps["duration_ns"].sum()),
                                     mean["duration_ns"], mean["idle_launch"])
        ctx.cache[key] = p.step_ns - own
    out: float = ctx.cache[key]
    return out

"""``data_loader``: the loop waits for its DataLoader, and where the batches' time goes.

On a report with GPU work the time lost is the GPU idle time behind the waits (the breakdown's
``idle_data``); on one without, the waits in the loop's wall time (``cpu_data``). Either way the fix
is workers that load beside the step; the CPU side, which sees the loop's own cores and the
loading's CPU time, models how many."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..context import Context, data_dict, fmt_ns, per_step_text as gpu_per_step_text
from ..cpu_breakdown import DATA
from ..cpu_context import CpuContext, CpuProcess
from ..cpu_frames import frame_text
from ..finding import Finding
from ..rule import CPU, GPU, Rule
from .cpu_side import by_line, describe_lines, per_step_text
from .idle import steady_pieces

MAX_WORKERS = 8
IN_PROCESS = 0.5  # share of the wait's samples in the Dataset's fetcher that says it loads in the loop's process


def hidden_wait(wait_ns: float, rest_ns: float, workers: int, cores: float = 0.0, loop_cores: float = 1.0,
                load_cpu_ns: float | None = None) -> float:
    """The wait that ``workers`` processes loading batches beside the loop hide (at most the wait).

    A batch takes ``wait_ns`` to load in the loop's process, ``load_cpu_ns`` of it on a core (None:
    all of it; the rest waits for files, sleeps, the network); the rest of the step takes
    ``rest_ns`` with ``loop_cores`` cores busy (PyTorch's threads). With ``workers`` loading side by
    side, a batch is ready every ``wait_ns / workers``; the loop keeps the cores the workers' loading
    leaves it (at least one: PyTorch's threads cut to fit, as the fix says), so its work takes
    ``loop_cores * rest_ns / kept``; and the ``cores`` (0: as many as needed) must run the loop's
    work and the loading's CPU time together. The step becomes the longest of the three.
    """
    if workers <= 0 or wait_ns <= 0:
        return 0.0
    load_cpu = wait_ns if load_cpu_ns is None else min(max(load_cpu_ns, 0.0), wait_ns)
    work = loop_cores * rest_ns
    kept = max(1.0, min(loop_cores, cores - workers * load_cpu / wait_ns)) if cores > 0 else loop_cores
    step = max(work / kept, wait_ns / workers)
    if cores > 0:
        step = max(step, (work + load_cpu) / cores)
    return max(0.0, min(wait_ns, rest_ns + wait_ns - step))


def best_workers(wait_ns: float, rest_ns: float, cores: int, usable: float, loop_cores: float,
                 load_cpu_ns: float | None = None) -> tuple[int, float]:
    """The fewest workers (up to ``min(8, cores)``) that hide the most of the wait, and that saving.

    ``min(8, cores - 1)`` workers leave the loop a core of its own; when loading takes longer than
    the rest of the step, the loop mostly waits and one worker more can use its core too.
    """
    best, saving = 0, 0.0
    for w in range(1, max(1, min(MAX_WORKERS, cores)) + 1):
        hidden = hidden_wait(wait_ns, rest_ns, w, usable, loop_cores, load_cpu_ns)
        if hidden > saving * 1.02:
            best, saving = w, hidden
    return best, saving


class DataLoading(Rule):
    name = "data_loader"
    description = ("The loop waits for the DataLoader's next batch: with GPU work, the GPU idles meanwhile; without, "
                   "the step's wall time holds the wait.")
    sides = (GPU, CPU)

    def needs_on(self, side: str) -> tuple[str, ...]:
        return ("gpu", "torch") if side == GPU else ("torch",)

    def evaluate(self, ctx: Any) -> list[Finding]:
        return self._gpu(ctx) if ctx.side == GPU else self._cpu(ctx)

    def _gpu(self, ctx: Context) -> list[Finding]:
        """GPU idle behind the waits. Where the report has the CPU side too (Python samples and
        PyTorch ranges), the loop's own wait is modelled as on a report without GPU work
        (:func:`loop_model`: how many workers, what they hide) and the saving is the GPU idle time
        they would remove, at most the wait they hide; else workers load 1/k as fast beside the step."""
        from ...cpu.summaries import host_summary

        host = host_summary(ctx.report)
        loops = self._loops(ctx)
        out = []
        for p in ctx.processes:
            starts, ends = steady_pieces(p, "idle_data")
            ns = p.own(p.per_step(float((ends - starts).sum())))
            if p.share(ns) < ctx.min_share:
                continue
            loaders = p.timeline.loaders
            w = p.steady_windows
            mine = loaders[(loaders["end_ns"] > w["start_ns"].min()) & (loaders["end_ns"] <= w["end_ns"].max())]
            wait = float((mine["end_ns"] - mine["start_ns"]).mean()) if len(mine) else 0.0
            saving, workers = ns, 4
            evidence = [f"GPU idle {gpu_per_step_text(p, ns)} while the loop waited in DataLoader.__next__",
                        f"{len(mine) / p.n_steps:.1f} batches per step, {fmt_ns(wait)} per wait"]
            loop = loops.get(p.pid)
            data = data_dict(data_idle_ns=ns, wait_ns=wait, workers=workers)
            if loop is not None:  # the loop's side: where the wait goes, and what workers would hide of it
                saving, workers = min(ns, loop.saving), loop.workers
                evidence += loop.evidence[1:]
                data = {**data, **{k: v for k, v in loop.data.items() if k != "wait_ns"}, "loop_wait_ns": loop.wait}
            elif host is not None:
                workers = max(1, min(8, host.cores - 1))
                # with k workers loading takes 1/k as long and overlaps the rest of the step
                rest = p.base_ns - ns
                load = wait * len(mine) / p.n_steps / workers
                saving = ns - max(0.0, load - rest)
                evidence.append(f"{host.cores} CPU cores: {workers} workers would load a step's batches in about "
                                f"{fmt_ns(load)}, {'within' if load <= rest else 'more than'} the {fmt_ns(rest)} "
                                "of the rest of the step")
                data["workers"] = workers
            if p.power_text(saving):
                evidence.append(p.power_text(saving))
            saving = p.gpu_gain(saving)
            if loop is not None:
                location, fix = loop.location, loop.fix
            else:
                lines = ctx.program_lines(p.pid, starts, ends)
                if lines:
                    evidence.append("Python lines running in the waits: " + ctx.describe_lines(lines))
                location = f"{lines[0][0]} {lines[0][1]}" if lines else "DataLoader.__next__"
                fix = (f"Load batches in parallel and ahead of use: DataLoader(num_workers={workers}, "
                       "pin_memory=True, persistent_workers=True, prefetch_factor=4); make __getitem__ cheap "
                       "(decode once, cache, move augmentation to the GPU).")
            out.append(Finding(
                rule=self.name, pid=p.pid, saving_ns=saving, share=p.share(saving),
                title=f"Data loading stalls the GPU: {gpu_per_step_text(p, ns)} waiting for batches",
                evidence=evidence, location=location, fix=fix, data=data,
            ))
        return out

    @staticmethod
    def _loops(ctx: Context) -> dict[int, LoopModel]:
        """Per process, the model of its loop's wait on the report's CPU side, where that side was
        recorded (Python samples and PyTorch ranges), its wait is worth a finding, and the batches
        load in the loop's own process."""
        cpu = ctx.cpu_side
        if cpu.missing("cpu_samples") or cpu.missing("torch"):
            return {}
        out = {}
        for cp in cpu.processes:
            m = loop_model(cpu, cp, gpu=True)
            # only where the samples show the Dataset running in the loop's own process: the samples are
            # the main thread's, and a loop run in another thread (as Lightning's can be) shows none of it
            if m is not None and m.data["in_process"]:
                out[cp.pid] = m
        return out

    def _cpu(self, ctx: CpuContext) -> list[Finding]:
        """The loop's wait for batches; the saving from a model of workers loading beside the loop."""
        out = []
        for p in ctx.processes:
            m = loop_model(ctx, p)
            if m is None:
                continue
            out.append(Finding(self.name, "The loop waits for its DataLoader", m.saving, p.share(m.saving), m.evidence,
                               m.location, m.fix, pid=p.pid, data=m.data))
        return out


@dataclass
class LoopModel:
    """What workers would save a loop that waits for its DataLoader (:func:`loop_model`)."""

    wait: float  # the loop's wait per step (ns)
    saving: float  # the wait they would hide per step (ns)
    workers: int  # how many (0: none would help)
    evidence: list[str]
    location: str
    fix: str
    data: dict[str, Any]


def loop_model(ctx: CpuContext, p: CpuProcess, gpu: bool = False) -> LoopModel | None:
    """The loop's wait for batches (its CPU breakdown's data part) and what worker processes would
    hide of it, from where the wait was sampled (the Dataset in the loop's own process or not), the
    machine's cores, the other programs' load, the loop's own cores and the loading's CPU time
    (:func:`best_workers`); None where the wait is under the diagnosis's threshold. ``gpu``: the
    batches go to a GPU, so the fix pins their memory too."""
    mean = p.breakdown.mean_parts()
    wait = mean["cpu_data"]
    if wait <= 0 or p.share(wait) < ctx.min_share:
        return None
    s = p.samples[p.samples["steady"] & (p.samples["part"] == DATA)]
    sampled = float(s["weight_ns"].sum())
    fetch = s[[ctx.stack(p.pid, int(i)).fetching for i in s["stack_id"]]] if len(s) else s
    fetch_ns = float(fetch["weight_ns"].sum())
    in_process = sampled > 0 and fetch_ns >= IN_PROCESS * sampled
    lines = by_line(ctx, p, fetch if in_process else s)
    cores = ctx.cores
    rest = mean["duration_ns"] - wait
    load = ctx.host_load(p)
    own, other = load if load else (1.0, 0.0)
    usable = max(1.0, cores - other) if cores else 0.0
    # the loading's time on a core: from the DataLoader calls' thread CPU time (None: not recorded)
    on_cpu = ctx.loader_cpu_share(p.pid)
    load_cpu = wait if on_cpu is None else wait * on_cpu
    # the cores the loop keeps busy outside the wait (it runs on one while it loads)
    loop_cores = 1.0
    if rest > 0:
        loop_cores = min(max((own * mean["duration_ns"] - load_cpu) / rest, 1.0), float(cores or 1))
    evidence = [f"the loop waits {per_step_text(p, wait)} for the next batch"
                + (f", over {len(p.breakdown.steady)} steady steps" if p.breakdown.has_steps else "")]
    if in_process:
        evidence.append(f"batches are loaded in the loop's own process (num_workers=0): "
                        f"{fetch_ns / sampled:.0%} of the wait runs the Dataset: "
                        f"{describe_lines(lines, fetch_ns)}")
    elif lines:
        evidence.append(f"where the wait was sampled: {describe_lines(lines, sampled)}")
    if on_cpu is not None:
        evidence.append(f"the DataLoader's calls ran on a core {on_cpu:.0%} of their time"
                        + ("; the rest they waited (files, sleeps, the network), which workers wait "
                           "for side by side without taking cores" if on_cpu < 0.9 else ""))
    workers, saving = (best_workers(wait, rest, cores or 2, usable, loop_cores, load_cpu) if in_process
                       else (0, 0.0))
    if workers:
        machine = (f"{cores} cores, {other:.1f} of them busy with other programs" if cores
                   else "cores not recorded (2 assumed)")
        evidence.append(
            f"{machine}; outside the wait the loop keeps {loop_cores:.1f} busy for {fmt_ns(rest)}; with "
            f"{workers} worker process{'es' if workers > 1 else ''} a batch is ready every "
            f"{fmt_ns(wait / workers)}, and the machine runs the loop and the loading side by side: "
            f"the step would take about {fmt_ns(mean['duration_ns'] - saving)} instead of "
            f"{fmt_ns(mean['duration_ns'])}")
        threads = ""
        if cores and workers + loop_cores > usable + 0.25:
            threads = (f", and torch.set_num_threads({max(1, cores - workers)}) so that PyTorch's threads "
                       "do not fight the workers for cores")
        pin = ", pin_memory=True" if gpu else ""
        fix = (f"DataLoader(..., num_workers={workers}, persistent_workers=True{pin}){threads}: batches load in "
               "worker processes while the step runs; past that, make the Dataset's __getitem__ cheaper"
               + (f" ({frame_text(lines[0][0])})" if lines else "") + " or load whole batches at once "
               "(a batch sampler and a Dataset that indexes a list of samples).")
    else:
        saving = 0.5 * wait
        why = (f"{cores} core{'s' if cores != 1 else ''}, {other:.1f} busy with other programs: worker "
               "processes would take turns with the loop" if in_process
               else "workers already load the batches and still fall behind")
        evidence.append(f"{why}; estimate (rough): half of the wait, for a Dataset twice as fast")
        fix = ("Make the Dataset's __getitem__ cheaper" + (f" ({frame_text(lines[0][0])})" if lines else "")
               + ": vectorize per-sample Python, decode less, cache what repeats"
               + ("" if in_process else f", or add workers (up to {min(MAX_WORKERS, max(cores, 2))})") + ".")
    location = frame_text(lines[0][0]) if lines else "the DataLoader of the training loop"
    data = data_dict(wait_ns=wait, rest_ns=rest, workers=workers, in_process=in_process, cores=cores,
                     other_cores=round(other, 2), loader_on_cpu=None if on_cpu is None else round(on_cpu, 3),
                     loop_cores=round(loop_cores, 2))
    return LoopModel(wait, saving, workers, evidence, location, fix, data)

"""``startup``: what a run pays once before its steps are steady, on either side of a report.

- With GPU work: the first steps' extra time (torch.compile, autotuning, lazy initialization), a
  finding when it shows compilation (whose caches can be kept), advisory when it is over a second.
- Without: start-up (interpreter, imports, set-up) and the first, slower steps, reported once as an
  expected cost: a note of the diagnosis, not a ranked finding, since a loop's start-up is not
  something its steps can save. Only a run that is mostly start-up (no loop found, start-up at least
  half of the wall time: a short script, a command-line tool) gets it as an advisory finding, for
  there start-up is what the user runs it for."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..context import Context, Process, data_dict, fmt_ns
from ..cpu_context import CpuContext
from ..cpu_frames import frame_text
from ..finding import Finding
from ..rule import CPU, GPU, Rule
from .cpu_side import by_line

MOSTLY = 0.5  # share of the run's wall time from which a run without steps is mostly start-up
WARMUP_MIN_NS = 1_000_000_000  # warm-up excess below this, without signs of compilation, is not reported
COMPILER_FILES = ("torch/_dynamo", "torch/_inductor", "triton/", "torch/_functorch")


class Startup(Rule):
    name = "startup"
    description = ("What a run pays once before its steps are steady: the first steps' extra time (torch.compile, "
                   "autotuning, lazy initialization) and, without GPU work, start-up before the first step.")
    sides: ClassVar[tuple[str, ...]] = (GPU, CPU)

    def needs_on(self, side: str) -> tuple[str, ...]:
        return ("gpu", "steps") if side == GPU else ("cpu_samples",)

    def evaluate(self, ctx: Any) -> list[Finding]:
        return _gpu_warmup(ctx, self.name) if ctx.side == GPU else _before_first_step(ctx, self.name)


def _before_first_step(ctx: CpuContext, rule: str) -> list[Finding]:
    """On a report without GPU work: start-up before the first step and the first steps' extra time,
    a note unless the run is mostly start-up."""
    if not ctx.processes:
        return []
    p = ctx.processes[0]  # once: the first process (the program itself)
    b = p.breakdown
    steps = b.steps
    setup = steps[steps["warmup"]]
    steady_ns = b.mean_parts()["duration_ns"]
    extra = float(np.maximum(setup["duration_ns"] - steady_ns, 0).sum()) if len(setup) < len(steps) else 0.0
    total = b.startup_ns + extra
    wall = float(ctx.report.meta.get("wall_ns") or 0) or float(b.startup_ns + steps["duration_ns"].sum())
    share = total / wall if wall else 0.0
    if total <= 0:
        return []
    first = int(steps["start_ns"].iloc[0])
    s = p.samples
    early = s[s["ts_ns"].to_numpy(np.int64) < first]
    importing = early[[ctx.stack(p.pid, int(i)).importing for i in early["stack_id"]]] if len(early) else early
    lines = by_line(ctx, p, importing if len(importing) else early)
    evidence = [f"{fmt_ns(b.startup_ns)} from the process's start to the first "
                f"{'step' if b.has_steps else 'work after start-up'}, {share:.0%} of the run's {fmt_ns(wall)}"]
    if b.import_ns:
        top = ", ".join(f"{frame_text(f)} {fmt_ns(ns)}" for f, ns, _ in lines[:3])
        evidence.append(f"imports: {fmt_ns(b.import_ns)} sampled" + (f" ({top})" if top else ""))
    if extra:
        n = len(setup)
        evidence.append(f"the first {n} step{'s' if n > 1 else ''} (set-up, first calls) took {fmt_ns(extra)} "
                        "longer than steady steps")
    if b.has_steps or share < MOSTLY:
        size = f"{fmt_ns(total)} once, {share:.0%} of the run's {fmt_ns(wall)}"
        ctx.notes.append(f"Process {p.pid}: start-up before the first {'step' if b.has_steps else 'work'}: "
                         f"{size} ({'; '.join(evidence[1:]) or evidence[0]}); not a step, and not among "
                         "the findings.")
        ctx.startup[p.pid] = data_dict(startup_ns=b.startup_ns, import_ns=b.import_ns,
                                       first_steps_extra_ns=extra, share_of_run=round(share, 4))
        return []
    if share < ctx.min_share:
        return []
    fix = ("An expected cost of starting Python and PyTorch; it matters for short runs (tests, command-line "
           "tools, many short jobs): run more steps per process, import heavy modules only where they are "
           "used, keep a warm process (a server, a notebook) for repeated runs.")
    location = frame_text(lines[0][0]) if lines else "the program's start-up"
    return [Finding(rule, "Start-up before the first step", total, share, evidence, location, fix,
                    pid=p.pid, one_time=True, advisory=True,
                    data=data_dict(startup_ns=b.startup_ns, import_ns=b.import_ns, first_steps_extra_ns=extra,
                                   share_of="run"))]


def _gpu_warmup(ctx: Context, rule: str) -> list[Finding]:
    """On a report with GPU work: the first steps' extra time (torch.compile, autotuning, lazy
    initialization), a one-time cost reported when it is over a second or shows compilation."""
    out = []
    for p in ctx.processes:
        steps = p.breakdown.steps
        warm = steps[steps["warmup"]]
        if not len(warm) or len(warm) == len(steps):
            continue
        median = float(p.breakdown.steady["duration_ns"].median())
        excess = float((warm["duration_ns"] - median).clip(lower=0).sum())
        lo, hi = int(warm["start_ns"].min()), int((warm["start_ns"] + warm["duration_ns"]).max())
        ops = p.timeline.ops
        in_warm = ops[(ops["launch_ns"] >= lo) & (ops["launch_ns"] < hi) & (ops["kind"] == "kernel")]
        triton = int(in_warm["name"].str.startswith("triton").sum())
        compiler = _compiler_share(ctx, p, lo, hi)
        compiling = triton > 0 or compiler > 0.2
        if excess < WARMUP_MIN_NS and not compiling:
            continue
        total = float(steps["duration_ns"].sum())
        which = "step 1" if len(warm) == 1 else f"steps 1-{len(warm)}"
        evidence = [f"{which} took {fmt_ns(float(warm['duration_ns'].sum()))}; a steady step takes {fmt_ns(median)}",
                    f"one-time excess {fmt_ns(excess)}, {excess / total:.0%} of the {fmt_ns(total)} of all steps"]
        if triton:
            evidence.append(f"{triton} Triton kernel launches in the warm-up: torch.compile generated code")
        if compiler:
            evidence.append(f"{compiler:.0%} of the sampled Python time of the warm-up was in the compiler "
                            "(torch._dynamo, torch._inductor, triton)")
        fix = ("Keep torch.compile's caches between runs (a persistent TORCHINDUCTOR_CACHE_DIR, or "
               "torch.compiler.save_cache_artifacts()/load_cache_artifacts()), avoid recompilations (fixed "
               "shapes, or torch._dynamo.mark_dynamic for the dimensions that vary), compile the repeated block "
               "rather than the whole model, and leave warm-up steps out of timings."
               if compiling else
               "Expected once per run (CUDA context, cuBLAS/cuDNN handles, autotuning such as "
               "cudnn.benchmark, allocator growth); run a few warm-up steps before timing, and make runs long "
               "enough that it does not matter.")
        out.append(Finding(
            rule=rule, pid=p.pid, saving_ns=excess, share=excess / total if total else 0.0,
            one_time=True, advisory=not compiling,
            title=f"{'Compilation' if compiling else 'Warm-up'} in the first steps: {fmt_ns(excess)} once",
            evidence=evidence, location=which, fix=fix,
            data=data_dict(excess_ns=excess, warmup_steps=len(warm), triton_launches=triton,
                           compiler_sample_share=round(compiler, 3)),
        ))
    return out

def _compiler_share(ctx: Context, p: Process, lo: int, hi: int) -> float:
    """The share of the sampled time in [lo, hi) whose stack holds a frame of the compiler, not
    under an import (importing torch._dynamo, which the optimizers do on first use, is no
    compilation)."""
    if ctx.missing("cpu_samples"):
        return 0.0
    like = " OR ".join(f"fl.value LIKE '%{f}%'" for f in COMPILER_FILES)
    pid, lo, hi = int(p.pid), int(lo), int(hi)
    total, compiler = ctx.report.sql(
        f"""WITH RECURSIVE s AS (SELECT stack_id, sum(weight_ns) AS w FROM cpu_sample
                                 WHERE pid = {pid} AND ts_ns >= {lo} AND ts_ns < {hi} GROUP BY stack_id),
            walk(stack_id, node) AS (
                SELECT stack_id, stack_id FROM s
                UNION ALL
                SELECT w.stack_id, st.parent_id FROM walk w JOIN cpu_stack st ON st.pid = {pid} AND st.id = w.node
                WHERE w.node <> 0),
            framed AS (
                SELECT w.stack_id, fl.value AS file FROM walk w
                JOIN cpu_stack st ON st.pid = {pid} AND st.id = w.node
                JOIN cpu_frame f ON f.pid = {pid} AND f.id = st.frame_id JOIN string fl ON fl.id = f.file_id),
            hit AS (
                SELECT DISTINCT stack_id FROM framed fl WHERE {like.replace("fl.value", "fl.file")}
                EXCEPT SELECT stack_id FROM framed WHERE file LIKE '%importlib%')
            SELECT (SELECT sum(w) FROM s), (SELECT sum(w) FROM s WHERE stack_id IN (SELECT stack_id FROM hit))""",
        )[0]
    return float(compiler or 0) / float(total) if total else 0.0

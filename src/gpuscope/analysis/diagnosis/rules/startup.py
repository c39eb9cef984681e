"""``cpu_startup``: start-up (interpreter, imports, set-up) and the first, slower steps, reported
once as an expected cost: a note of the diagnosis, not a ranked finding, since a loop's start-up is
not something its steps can save. Only a run that is mostly start-up (no loop found, start-up at
least half of the wall time: a short script, a command-line tool) gets it as an advisory finding,
for there start-up is what the user runs it for."""

from __future__ import annotations

import numpy as np

from ..context import data_dict, fmt_ns
from ..cpu_context import CpuContext
from ..cpu_frames import frame_text
from ..finding import Finding
from .cpu_side import CpuRule, by_line


MOSTLY = 0.5  # share of the run's wall time from which a run without steps is mostly start-up


class CpuStartup(CpuRule):
    name = "cpu_startup"
    description = "Time before the first step (interpreter start, imports, set-up) and the first steps' extra time."
    needs = ("cpu_samples",)

    def evaluate(self, ctx: CpuContext) -> list[Finding]:  # type: ignore[override]
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
        return [Finding(self.name, "Start-up before the first step", total, share, evidence, location, fix,
                        pid=p.pid, one_time=True, advisory=True,
                        data=data_dict(startup_ns=b.startup_ns, import_ns=b.import_ns, first_steps_extra_ns=extra,
                                       share_of="run"))]

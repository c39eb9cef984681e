"""``cpu_hot_line``: a line of the program's own Python that takes a large part of the step."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..context import data_dict, fmt_ns
from ..cpu_breakdown import FORWARD, OTHER
from ..cpu_context import CpuContext
from ..cpu_frames import Frame, frame_text, library_path
from ..finding import Finding
from .base import CpuRule, by_line, per_step_text, source_text

TOP = 3  # lines reported, at most
OWN_CODE = 0.5  # below this share of its time in its own code, a line's cost is the library it calls


class CpuHotLine(CpuRule):
    name = "cpu_hot_line"
    description = "A line of the program's Python (not PyTorch operators) that takes a large part of the step."
    needs = ("cpu_samples",)

    def evaluate(self, ctx: CpuContext) -> list[Finding]:  # type: ignore[override]
        out = []
        have_ops = ctx.missing("torch_ops") is None
        for p in ctx.processes:
            s = p.samples
            if not len(s):
                continue
            infos = [ctx.stack(p.pid, int(i)) for i in s["stack_id"]]
            # Python of the program: steady, outside data waits (cpu_data_loader's), backward and the
            # optimizer (PyTorch's own loops), outside operators, not importing, not gpuscope's recording
            plain = np.array([not (i.operator or i.overhead or i.importing) and i.user is not None
                              for i in infos], bool)
            mask = (s["steady"].to_numpy(bool) & s["part"].isin([FORWARD, OTHER]).to_numpy()
                    & ~s["in_op"].to_numpy(bool) & plain)
            chosen = s[mask]
            mean = p.breakdown.mean_parts()
            room = mean["cpu_forward"] + mean["cpu_other"]  # the parts the lines were sampled in
            for frame, total, caller in by_line(ctx, p, chosen)[:TOP]:
                ns = p.per_step(total)
                saving = min(ns, room)  # moved off the step, or one tensor operation: nearly all of it
                room -= saving
                if saving <= 0 or p.share(saving) < ctx.min_share:
                    break
                lines = chosen[[_at(ctx.stack(p.pid, int(i)).user, frame) for i in chosen["stack_id"]]]
                in_forward = float(lines.loc[lines["part"] == FORWARD, "weight_ns"].sum()) > 0.5 * total
                own, below = _own_and_below(ctx, p.pid, lines)
                evidence = [f"{per_step_text(p, ns)} of Python at this line"
                            + (" inside a module's forward" if in_forward else "")
                            + (", outside PyTorch operators" if have_ops else "")]
                text = source_text(frame)
                if text:
                    evidence.append(f"the line: {text}")
                if caller is not None:
                    evidence.append(f"called from {frame_text(caller)}")
                if own < OWN_CODE:
                    evidence.append(f"{own:.0%} in the line's own code, the rest in the library code it calls"
                                    + (f" (mostly {library_path(below)})" if below else ""))
                if not have_ops:
                    evidence.append("without --trace torch-ops, time in PyTorch operators called on this line "
                                    "counts too")
                capped = f" (capped at {fmt_ns(saving)}: the rest of forward and other Python)" if saving < ns else ""
                evidence.append("estimate: that time, for a version that moves it off the step or replaces it "
                                "with one operation over the batch" + capped)
                fix = ("Replace the per-element Python with tensor operations over the whole batch (one call "
                       "instead of a loop), or move it off the step: into a DataLoader worker, a background "
                       "thread, or run it less often.")
                if in_forward:
                    fix = "Vectorize this Python in the module's forward with tensor operations (no per-element loop)."
                if own < OWN_CODE:
                    fix = ("Call the library code on this line less often: on whole batches instead of per item, "
                           "once instead of every step, or with a cheaper call.")
                out.append(Finding(self.name, "A hot line of Python in the step", saving, p.share(saving), evidence,
                                   frame_text(frame), fix, pid=p.pid,
                                   data=data_dict(python_ns=ns, file=frame[1], line=frame[2], function=frame[0])))
        return out


def _at(user: Frame | None, frame: Frame) -> bool:
    """Whether a sample's user frame is on ``frame``'s line (whichever function)."""
    return user is not None and user[1:] == frame[1:]


def _own_and_below(ctx: CpuContext, pid: int, samples: pd.DataFrame) -> tuple[float, str | None]:
    """The share of the samples whose innermost frame is the user frame itself, and the file where
    most of the others were."""
    own = 0.0
    below: dict[str, float] = {}
    total = float(samples["weight_ns"].sum()) or 1.0
    for sid, ns in samples.groupby("stack_id")["weight_ns"].sum().items():
        info = ctx.stack(pid, int(sid))  # type: ignore[arg-type]
        if info.innermost is not None and info.user is not None and info.innermost[1:] == info.user[1:]:
            own += float(ns)
        elif info.innermost is not None:
            below[info.innermost[1]] = below.get(info.innermost[1], 0.0) + float(ns)
    return own / total, (max(below, key=lambda k: below[k]) if below else None)

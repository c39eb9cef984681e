"""What the rules that read only the CPU side share: their shape (:class:`CpuRule`, a :class:`..rule.Rule`
on a :class:`..cpu_context.CpuContext`), sampled time by folded program line, and evidence text."""

from __future__ import annotations

import linecache
import os
from collections import defaultdict
from typing import ClassVar

import pandas as pd

from ..context import fmt_ns
from ..cpu_context import CpuContext, CpuProcess
from ..cpu_frames import Frame, frame_text
from ..finding import Finding
from ..rule import CPU, Rule


class CpuRule(Rule):
    """A rule that reads the CPU side only. ``needs`` names data of :meth:`CpuContext.missing`
    (``cpu_samples``, ``torch``, ``torch_ops``, ``host``, ``steps``)."""

    sides: ClassVar[tuple[str, ...]] = (CPU,)
    needs: ClassVar[tuple[str, ...]] = ("cpu_samples",)

    def evaluate(self, ctx: CpuContext) -> list[Finding]:  # type: ignore[override]
        """Return the findings of this rule (empty when it finds nothing worth fixing)."""
        raise NotImplementedError


def by_line(ctx: CpuContext, p: CpuProcess, samples: pd.DataFrame) -> list[tuple[Frame, float, Frame | None]]:
    """Sampled time of ``samples`` by the program line they fold into (their user frame), most first:
    (frame, ns, the user frame that called it most). A line counts once whichever code object ran
    it (a comprehension and the function around it share their line). Samples without a user frame
    are left out."""
    total: dict[tuple[str, int], float] = defaultdict(float)
    funcs: dict[tuple[str, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    callers: dict[tuple[str, int], dict[Frame | None, float]] = defaultdict(lambda: defaultdict(float))
    weights = samples.groupby("stack_id")["weight_ns"].sum()
    for sid, ns in weights.items():
        info = ctx.stack(p.pid, int(sid))  # type: ignore[arg-type]
        if info.user is None:
            continue
        func, file, line = info.user
        key = (file, line)
        total[key] += float(ns)
        funcs[key][func] += float(ns)
        callers[key][info.caller] += float(ns)
    ranked = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))
    out = []
    for (file, line), ns in ranked:
        func = max(funcs[(file, line)].items(), key=lambda kv: kv[1])[0]
        known = {c: v for c, v in callers[(file, line)].items() if c is not None}
        caller = max(known.items(), key=lambda kv: kv[1])[0] if known else None
        out.append(((func, file, line), ns, caller))
    return out


def describe_lines(lines: list[tuple[Frame, float, Frame | None]], total: float, top: int = 3) -> str:
    """``file:line function (share), ...`` of the first ``top`` lines, shares of ``total``."""
    return ", ".join(f"{frame_text(f)} ({ns / total:.0%})" for f, ns, _ in lines[:top]) if total else ""


def local_file(file: str, recorded_cwd: object = None) -> str:
    """Where a file the report names is read here: its recorded path where that exists; else, for a
    file under the directory the program ran in (``recorded_cwd``), the same relative path under this
    working directory where that exists (the report read in another checkout of the program, as a
    colleague or CI reads it); else the recorded path."""
    if os.path.exists(file) or not isinstance(recorded_cwd, str) or not recorded_cwd.startswith("/"):
        return file
    base = recorded_cwd.rstrip("/") + "/"
    if not file.startswith(base):
        return file
    here = os.path.join(os.getcwd(), file[len(base):])
    return here if os.path.isfile(here) else file


def source_text(frame: Frame, width: int = 90, recorded_cwd: object = None) -> str | None:
    """The text of the frame's line where the file is readable here (None where it is not; see
    :func:`local_file` for where it is looked for). Only a Python source (``.py``) is read: a report
    names files, and showing a line of any file it names would show what a report's sender chose."""
    file = frame[1]
    if not isinstance(file, str) or not file.endswith(".py") or "\0" in file:
        return None
    try:
        text = linecache.getline(local_file(file, recorded_cwd), int(frame[2])).strip()
    except (OSError, ValueError, TypeError, UnicodeError):
        return None
    if not text:
        return None
    return text if len(text) <= width else text[: width - 3] + "..."


def per_step_text(p: CpuProcess, ns: float) -> str:
    """``1.2 ms per step (10.0% of the step)``, or over the run without steps."""
    return f"{fmt_ns(ns)} {p.unit} ({p.share(ns):.1%} of {'the step' if p.breakdown.has_steps else 'it'})"

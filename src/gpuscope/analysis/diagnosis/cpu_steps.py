"""The windows of a CPU-side diagnosis: the program's steps, or one window after start-up.

Steps are those of :mod:`..steps.source` (``find_steps``: gpuscope.step() marks, PyTorch's optimizer
steps, ranges named ``step``, or the program's repeating operator sequence); set-up and warm-up
steps are shown but left out of the means. Without steps, the run after start-up counts as one
window. Start-up (interpreter start, imports, building the model and the data) is never steady
state: the window begins when the import machinery no longer dominates the main thread (see
:func:`import_end`) and, where the program made PyTorch ranges, at the first of them; it ends at the
last sample of the program's own code or the last range, whichever is later.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...trace.report import Report
from ..steps import source as steps_mod

WARMUP_FACTOR = 1.5  # leading steps longer than this times the median are warm-up (as step_sum)
COLUMNS = ["pid", "step", "start_ns", "end_ns", "setup"]
NO_STEPS = "no steps: the run after start-up counts as one window"


@dataclass(frozen=True)
class CpuSteps:
    """Steps of every process: ``frame`` (pid, step, start_ns, end_ns, setup), where they came from
    (``source``, None without steps) and in words (``description``)."""

    source: str | None
    description: str
    frame: pd.DataFrame


def load_steps(report: Report) -> CpuSteps:
    """Return the report's steps, from ``steps.find_steps`` where this gpuscope has it."""
    find = getattr(steps_mod, "find_steps", None)
    if find is not None:
        found = find(report)
        frame = found.frame
        if "setup" not in frame.columns and "warmup" in frame.columns:
            frame = frame.rename(columns={"warmup": "setup"})
        frame = frame[COLUMNS].copy() if len(frame) else _empty()
        return CpuSteps(found.source if len(frame) else None,
                        found.description if len(frame) else NO_STEPS, frame)
    return _fallback(report)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=bool if c == "setup" else "int64") for c in COLUMNS})


def _fallback(report: Report) -> CpuSteps:
    """Steps from ``step_source`` and ``step_windows`` (the steps of step_sum)."""
    source = steps_mod.step_source(report)
    if source.kind is None:  # with why no pattern gave steps, where the step finder said
        return CpuSteps(None, source.detail or NO_STEPS, _empty())
    frame = steps_mod.step_windows(report, source).rename(columns={"warmup": "setup"})
    frame = frame[COLUMNS].astype({"pid": "int64", "step": "int64", "start_ns": "int64", "end_ns": "int64",
                                   "setup": bool})
    if not len(frame):
        return CpuSteps(None, NO_STEPS, _empty())
    return CpuSteps(source.kind, source.description, frame.reset_index(drop=True))


def leading_warmup(durations: list[int]) -> int:
    """The number of leading steps each longer than :data:`WARMUP_FACTOR` times the median."""
    if not durations:
        return 0
    median = float(np.median(durations))
    n = 0
    while n < len(durations) and durations[n] > WARMUP_FACTOR * median:
        n += 1
    return n


def import_end(ts: np.ndarray, weight: np.ndarray, importing: np.ndarray) -> int | None:
    """The end of start-up from the main thread's samples in time order: the last importing sample
    at which importing still makes up at least half of the sampled time so far (so that a lazy
    import in the middle of the run does not stretch start-up). None without importing samples."""
    if not len(ts) or not importing.any():
        return None
    cum_all = np.cumsum(weight.astype(np.float64))
    cum_imp = np.cumsum(np.where(importing, weight, 0).astype(np.float64))
    ok = importing & (cum_imp >= 0.5 * cum_all)
    idx = np.flatnonzero(ok)
    return int(ts[idx[-1]]) if len(idx) else None


def whole_run(pid: int, start_ns: int, end_ns: int) -> pd.DataFrame:
    """One window (step ``0``, shown as ``all``) for a process without steps."""
    return pd.DataFrame({"pid": [pid], "step": [0], "start_ns": [start_ns], "end_ns": [max(end_ns, start_ns + 1)],
                         "setup": [False]})


def run_window(samples: pd.DataFrame, user: np.ndarray, importing: np.ndarray,
               ranges: pd.DataFrame, process_start: int, process_end: int) -> tuple[int, int, int | None]:
    """Start and end of the window of a process without steps, and the end of its imports.

    ``samples``: its main thread's samples in time order (``ts_ns``, ``weight_ns``), with per sample
    whether it has a user frame and whether it is importing; ``ranges``: its PyTorch ranges.
    """
    ts = samples["ts_ns"].to_numpy(np.int64)
    w = samples["weight_ns"].to_numpy(np.int64)
    imports = import_end(ts, w, importing)
    start = imports if imports is not None else (int(ts[0]) if len(ts) else process_start)
    if len(ranges):
        start = max(start, int(ranges["start_ns"].min()))
    ends = [int(ranges["end_ns"].max())] if len(ranges) else []
    if user.any():
        ends.append(int(ts[np.flatnonzero(user)[-1]]))
    end = max(ends) if ends else process_end
    if end <= start:  # nothing after start-up: the whole run
        start, end = (int(ts[0]) if len(ts) else process_start), max(end, process_end)
    return start, end, imports

"""The analyses of a report as pandas DataFrames, for notebooks: the same functions the commands
run (``gpuscope stats``, ``analyze``, ``diff``), their tables turned into frames with every name
resolved (no string ids to join).

A table of ``gpuscope stats`` becomes a frame whose columns are the table's labels with their unit
(``Total Time (ns)``, as the CSV and JSON outputs name them) and whose values are raw (ns, bytes,
percent); ``frame.attrs`` holds the table's ``name``, ``title``, ``notes`` and ``units``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..errors import GpuscopeError
from ..trace.report import Report
from ..trace.stacks import is_own, short_path, stack_paths
from ..units import machine_label
from . import STATS_REPORTS, stats_reports
from .cpu.profile import user_path
from .diff.parts import line_label, part_times
from .steps.source import step_source, step_windows
from .table import Table

SAMPLE_COLUMNS = ["ts_ns", "pid", "tid", "thread", "weight_ns", "function", "file", "line", "program_line", "stack"]
FINDING_COLUMNS = ["rule", "title", "saving_ns", "share", "pid", "location", "fix", "evidence", "one_time",
                   "advisory", "work_changing"]


def table_frame(table: Table) -> pd.DataFrame:
    """Return ``table`` as a DataFrame: one column per column of the table, labelled with its unit."""
    labels = [machine_label(c.label, c.unit) for c in table.columns]
    frame = pd.DataFrame([list(r) for r in table.rows], columns=labels)
    frame.attrs.update(name=table.name, title=table.title, notes=list(table.notes),
                       units={label: c.unit for label, c in zip(labels, table.columns)})
    return frame


def stats_frame(report: Report, name: str, libraries: bool = False) -> pd.DataFrame:
    """Return the report ``name`` of ``gpuscope stats`` (:data:`..analysis.STATS_REPORTS`) as a
    frame; ``libraries``: the CPU hotspots with library frames as they are (``--libraries``)."""
    if name not in STATS_REPORTS:
        raise GpuscopeError(f"unknown stats report {name!r}; choose from {', '.join(STATS_REPORTS)}")
    make = stats_reports()[name]
    if libraries and name in ("cpu_hotspots", "cpu_hotspots_lines"):
        return table_frame(make(report, libraries=True))  # type: ignore[call-arg]
    return table_frame(make(report))


def steps_frame(report: Report) -> pd.DataFrame:
    """Every step of every process (``pid``, ``step``, ``start_ns``, ``end_ns``, ``duration_ns``,
    ``warmup``) with its time per part of the breakdown in ns, one column per part (GPU side:
    ``busy_compute`` ... ``idle_warmup``; CPU side: ``cpu_data``, ``cpu_forward``,
    ``cpu_backward``, ``cpu_optimizer``, ``cpu_other``), as ``gpuscope diff`` compares them.
    ``frame.attrs``: ``step_source`` (where the steps came from) and ``parts`` (name -> label)."""
    from .diff.parts import part_labels

    source = step_source(report)
    windows = step_windows(report, source).reset_index(drop=True)
    frame = windows[["pid", "step", "start_ns", "end_ns"]].copy()
    frame["duration_ns"] = frame["end_ns"] - frame["start_ns"]
    frame["warmup"] = windows["warmup"].astype(bool) if "warmup" in windows else False
    labels = part_labels(report)
    parts = part_times(report, windows)
    if len(parts):
        wide = parts.pivot_table(index=["pid", "step"], columns="key", values="ns", aggfunc="sum", fill_value=0)
        frame = frame.merge(wide.reset_index(), on=["pid", "step"], how="left")
        for name in labels:
            frame[name] = frame[name].fillna(0).astype(np.int64) if name in frame else 0
    frame.attrs.update(step_source=source.description, parts=labels if len(parts) else {})
    return frame


def layers_frame(report: Report) -> pd.DataFrame:
    """The layer summary of ``gpuscope stats -r layer_sum``: per PyTorch module, optimizer and
    DataLoader range, calls and GPU and CPU time."""
    return stats_frame(report, "layer_sum")


def samples_frame(report: Report) -> pd.DataFrame:
    """Every Python stack sample: time (``ts_ns``), process, thread (id and name), the wall time it
    stands for (``weight_ns``), its innermost frame (``function``, ``file``, ``line``; gpuscope's
    own frames left out), the program's line it counts to in the hotspots (``program_line``:
    ``file:line function``, library frames folded into the program's calling line) and the whole
    ``stack`` as ``file:line function`` texts, innermost first."""
    rows = report.df(
        """SELECT s.ts_ns, s.pid, s.tid, t.name AS thread, s.weight_ns, s.stack_id
           FROM cpu_sample s LEFT JOIN (SELECT pid, tid, any_value(name) AS name FROM thread_time GROUP BY ALL) t
             ON t.pid = s.pid AND t.tid = s.tid
           ORDER BY s.ts_ns, s.pid, s.tid""")
    if not len(rows):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in SAMPLE_COLUMNS})
    keys = {(int(p), int(s)) for p, s in zip(rows["pid"], rows["stack_id"])}
    paths = stack_paths(report, keys)
    per_stack: dict[tuple[int, int], tuple[Any, ...]] = {}
    for key in keys:
        path = [f for f in paths.get(key, []) if not is_own(f[1])]
        inner = path[0] if path else ("", "", 0)
        per_stack[key] = (inner[0], short_path(inner[1]) if inner[1] else "", inner[2],
                          line_label(user_path(paths.get(key, []), False)[0]),
                          tuple(line_label(f) for f in path))
    info = [per_stack[(int(p), int(s))] for p, s in zip(rows["pid"], rows["stack_id"])]
    for i, name in enumerate(["function", "file", "line", "program_line", "stack"]):
        rows[name] = [x[i] for x in info]
    return rows[SAMPLE_COLUMNS]


def findings_frame(report: Report) -> pd.DataFrame:
    """The findings of ``gpuscope analyze``, ranked as it ranks them: rule, title, estimated saving
    per step (``saving_ns``) and as a share of the step (0-1), process, location, fix and evidence.
    ``frame.attrs``: ``skipped`` (rule -> why it did not run) and ``notes``."""
    from .diagnosis import diagnose

    result = diagnose(report)
    rows = [f.as_dict() for f in result.findings]
    frame = pd.DataFrame([{c: r.get(c) for c in FINDING_COLUMNS} for r in rows], columns=FINDING_COLUMNS)
    frame.attrs.update(skipped={s.rule: s.reason for s in result.skipped}, notes=list(result.notes),
                       step_source=result.step_source)
    return frame

"""Matching collective calls across ranks step by step, and the process group of NCCL kernels whose
c10d operator was not recorded, from their place in the step.

Calls are paired across ranks by their number *within a step* (:func:`call_keys`), not over the
whole run: a rank whose collection was off for a few steps (the overhead probe times steps
untraced, on each process at its own moment) has no calls in those steps, and numbering over the
whole run would pair its later calls with the others' earlier ones.

Operators are recorded in a few sample windows; outside them an NCCL kernel's process group is not
known. A job that uses several groups (tensor parallelism inside pairs of ranks, data parallelism
across them) makes, step after step, the same collectives in the same order: the *k*-th all-reduce
of a step is on the same group in every step. So where the steps whose every collective of a kind
has a known group agree on one pattern (the same number of calls, the same group at each place),
the kernels of that kind in the other steps with as many calls take the group of their place, and
its bytes (the buffers of a step's calls are alike step after step) (:func:`fill_by_position`).
Steps that do not match the pattern, and calls outside any step, keep no group.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...trace.report import Report

_COLUMNS = ("group", "group_desc", "group_size", "bytes")
# the step number of a call outside every step, in its ``call`` key
OUTSIDE = -1
# the start of the ``call`` key of a collective paired with none on other ranks (its group is unknown)
UNMATCHED = "unmatched:"


def process_steps(report: Report) -> pd.DataFrame:
    """The steps of every process (``pid``, ``step``, ``start_ns``, ``end_ns``), as the analyses take them."""
    from ..steps.source import step_source, step_windows

    return step_windows(report, step_source(report))


def step_of(found: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """The step number of each call of ``found`` (``pid``, ``start_ns``) among ``steps`` (``pid``,
    ``step``, ``start_ns``, ``end_ns``), by its start: :data:`OUTSIDE` for none."""
    step = np.full(len(found), OUTSIDE, dtype=np.int64)
    pids = found["pid"].to_numpy()
    t = found["start_ns"].to_numpy(np.int64)
    for pid, own in steps.groupby("pid"):
        own = own.sort_values("start_ns")
        starts, ends = own["start_ns"].to_numpy(np.int64), own["end_ns"].to_numpy(np.int64)
        mine = np.flatnonzero(pids == pid)
        if not len(mine):
            continue
        i = np.searchsorted(starts, t[mine], "right") - 1
        inside = (i >= 0) & (t[mine] < ends[np.maximum(i, 0)])
        step[mine[inside]] = own["step"].to_numpy(np.int64)[i[inside]]
    return step


def fill_by_position(found: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Return ``found`` (the collectives, see :func:`.collectives.collectives`) with the groups and
    bytes of NCCL kernels left unknown filled from their place in the step (``steps``:
    :func:`process_steps`), where the steps agree."""
    kernel = (found["source"] == "kernel").to_numpy()
    known = found["group"].notna().to_numpy()
    if not (kernel & ~known).any() or not (kernel & known).any() or not len(steps):
        return found
    found = found.copy()
    for column in _COLUMNS:
        found[column] = found[column].astype(object)
    step_all = step_of(found, steps)
    for _, part in found[kernel & (step_all != OUTSIDE)].groupby(["pid", "kind"]):
        part = part.sort_values("start_ns", kind="stable")
        step = step_all[found.index.get_indexer(part.index)]
        place = part.groupby(step).cumcount().to_numpy()
        pattern = _pattern(part, step, place)
        if pattern is None:
            continue
        counts = pd.Series(step).value_counts()
        fits = np.array([counts[s] == len(pattern) for s in step]) & part["group"].isna().to_numpy()
        for n, column in enumerate(_COLUMNS):
            values = [pattern[p][n] for p in place[fits]]
            found.loc[part.index[fits], column] = pd.Series(values, index=part.index[fits], dtype=object)
    return found


def _pattern(part: pd.DataFrame, step: np.ndarray, place: np.ndarray) -> list[tuple] | None:
    """The groups (and bytes) by place of the steps whose calls all have a group, where they agree;
    else None."""
    by_step: dict[int, list[tuple]] = {}
    for s, g in zip(step.tolist(), zip(*(part[c] for c in _COLUMNS))):
        by_step.setdefault(s, []).append(g)
    whole = [calls for calls in by_step.values() if all(g[0] is not None and not pd.isna(g[0]) for g in calls)]
    if not whole or any(calls != whole[0] for calls in whole[1:]):
        return None
    return whole[0]


def call_keys(found: pd.DataFrame, steps: pd.DataFrame, keys: list[str]) -> pd.Series:
    """The key a collective is matched by across ranks: ``"<step>.<n>"``, the *n*-th call of its
    sequence (``keys``: the columns that make one, such as group and kind) in step number ``step``
    (``"-1.<n>"``: the *n*-th outside every step). A call whose group is unknown while the
    process's other calls of its kind have one belongs to one of several groups: it is paired with
    none (``"unmatched:<pid>.<n>"``). ``found`` sorted by process and start."""
    step = step_of(found, steps) if len(steps) else np.full(len(found), OUTSIDE, dtype=np.int64)
    n = found.assign(_step=step).groupby(["pid", *keys, "_step"]).cumcount().to_numpy()
    known = found["group"].notna()
    mixed = known.groupby([found["pid"], found["kind"]]).transform("any").to_numpy() & ~known.to_numpy()
    pids = found["pid"].to_numpy()
    return pd.Series([f"{UNMATCHED}{p}.{k}" if m else f"{s}.{k}"
                      for s, k, p, m in zip(step.tolist(), n.tolist(), pids.tolist(), mixed.tolist())],
                     index=found.index, dtype=object)

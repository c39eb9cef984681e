"""The innermost range open at each of many instants, in time linear in ranges plus instants.

A range join (each instant against every range of its thread) grows with their product: a 2-minute
CPU run's 1.5 million operators against its module ranges ran for many minutes. Here the ranges of
each thread are swept once in time order with a stack, giving the innermost open range as a step
function of time (a *segment* starts at each range start and end); each instant then finds its
segment with one as-of join.

Innermost means: of the ranges that contain the instant (``start_ns <= t <= end``, both ends
included), the one that started last (the later id on a tie), whether or not the ranges nest.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...trace.report import Report

_NONE = -1


def segments(ranges: pd.DataFrame) -> pd.DataFrame:
    """Return the innermost-range step function of ``ranges`` (columns ``rid``, ``pid``, ``tid``,
    ``start_ns``, ``end_eff``): one row per change, ``pid``, ``tid``, ``from_ns`` and ``rid`` (the
    innermost range from that time on, -1 for none)."""
    if ranges.empty:
        return pd.DataFrame({"pid": [], "tid": [], "from_ns": [], "rid": []}, dtype="int64")
    n = len(ranges)
    pid = ranges["pid"].to_numpy(np.int64)
    tid = ranges["tid"].fillna(-1).to_numpy(np.int64)
    start = ranges["start_ns"].to_numpy(np.int64)
    end = ranges["end_eff"].to_numpy(np.int64)
    rid = ranges["rid"].to_numpy(np.int64)
    # events: a start at start_ns, an end just after end_ns (the end itself is inside the range)
    ev_pid = np.concatenate([pid, pid])
    ev_tid = np.concatenate([tid, tid])
    ev_t = np.concatenate([start, np.minimum(end, np.iinfo(np.int64).max - 1) + 1])
    ev_kind = np.concatenate([np.ones(n, np.int8), np.zeros(n, np.int8)])  # ends first at one time
    ev_idx = np.concatenate([np.arange(n), np.arange(n)])
    order = np.lexsort((rid[ev_idx], ev_kind, ev_t, ev_tid, ev_pid))
    out_pid, out_tid, out_t, out_rid = [], [], [], []
    stack: list[int] = []
    ended: set[int] = set()
    key = None
    for p, th, t, kind, i in zip(ev_pid[order].tolist(), ev_tid[order].tolist(), ev_t[order].tolist(),
                                 ev_kind[order].tolist(), ev_idx[order].tolist()):
        if (p, th) != key:
            key, stack, ended = (p, th), [], set()
        if kind:
            stack.append(i)
        else:
            ended.add(i)
            while stack and stack[-1] in ended:
                stack.pop()
        top = int(rid[stack[-1]]) if stack else _NONE
        if out_t and out_t[-1] == t and out_pid[-1] == p and out_tid[-1] == th:
            out_rid[-1] = top  # several events at one time: the state after the last
        else:
            out_pid.append(p)
            out_tid.append(th)
            out_t.append(t)
            out_rid.append(top)
    return pd.DataFrame({"pid": out_pid, "tid": out_tid, "from_ns": out_t, "rid": out_rid}, dtype="int64")


def innermost_sql(report: Report, ranges: str, where: str, name: str) -> str:
    """Create temp table ``name`` with the innermost-range segments of the rows of ``ranges`` (a table
    with ``rid``, ``pid``, ``tid``, ``start_ns``, ``end_eff``) that ``where`` (SQL on ``r``) selects;
    return its name. Join instants to it with ``ASOF JOIN name s ON s.pid = x.pid AND s.tid = x.tid
    AND x.t >= s.from_ns`` (``s.rid`` -1: no range open)."""
    frame = report.df(f"SELECT r.rid, r.pid, r.tid, r.start_ns, r.end_eff FROM {ranges} r WHERE {where}")
    segs = segments(frame)
    report.con.register("_segments", segs)
    try:
        report.sql(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM _segments")
    finally:
        report.con.unregister("_segments")
    return name

"""The details of many GPU operations at once, for ``gpuscope report``'s file (where no server
answers a click): the same fields as :func:`.details.details` gives one slice, found with
one query per kind of operation, one for the launches and one as-of join for the Python lines,
whatever the number of slices; the range paths come from the index's range lanes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...trace.report import Report
from ...trace.stacks import stack_sites
from ..ops.launch_sites import WINDOW_NS
from .details import GPU_SOURCES, Field, op_fields, path_ends, path_text, site_text
from .tracks import SRC, TimelineIndex

_CONFIG = ("c.grid_x, c.grid_y, c.grid_z, c.block_x, c.block_y, c.block_z, c.registers_per_thread, "
           "c.static_shared_memory, c.dynamic_shared_memory, c.local_memory_per_thread")


def _slices(index: TimelineIndex, lane_ids: list[int]) -> pd.DataFrame:
    """The GPU operations of ``lane_ids``: lane, i (slice), pid, device, stream, start_ns, table."""
    parts = []
    for lid in lane_ids:
        lane = index.lanes[lid]
        track = index.tracks[lane.track]
        if track.stream is None:
            continue
        for table in GPU_SOURCES:
            i = np.flatnonzero(np.asarray(lane.src) == SRC[table])
            if len(i):
                parts.append(pd.DataFrame({"lane": lid, "i": i, "pid": track.pid, "device": track.device,
                                           "stream": track.stream, "start_ns": np.asarray(lane.start)[i],
                                           "tbl": table}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


Details = dict[tuple[int, int], tuple[list[Field], dict[str, Any] | None]]


def gpu_details(report: Report, index: TimelineIndex, lane_ids: list[int]) -> Details:
    """Return, for each GPU operation of the lanes ``lane_ids`` as ``(lane, slice)``, its fields
    after its start and duration (as :func:`.details.details` lists them) and its launch
    (``{"start_ns", "end_ns", "tid", "name"}`` or None)."""
    w = _slices(index, lane_ids)
    if w.empty:
        return {}
    con = report.con
    con.register("gs_file_ops", w)
    try:
        rows: dict[tuple[int, int], dict[str, Any]] = {}
        tables = {t: f"{t} x" for t in GPU_SOURCES}
        for table in set(w["tbl"]):
            config = (f", {_CONFIG} FROM gs_file_ops w JOIN kernel x" if table == "kernel"
                      else f" FROM gs_file_ops w JOIN {tables[table]}")
            join = " JOIN kernel_config c ON c.id = x.config_id" if table == "kernel" else ""
            df = report.df(f"""SELECT w.lane AS w_lane, w.i AS w_i, x.*{config}
                               ON x.pid = w.pid AND x.device_id = w.device AND x.stream_id = w.stream
                               AND x.start_ns = w.start_ns{join} WHERE w.tbl = ?
                               QUALIFY row_number() OVER (PARTITION BY w.lane, w.i) = 1""", [table])
            for r in df.to_dict("records"):
                key = (int(r.pop("w_lane")), int(r.pop("w_i")))
                rows[key] = {"tbl": table, **{k: (None if v != v else v) for k, v in r.items()}}
        launches = report.df("""
            SELECT w.lane, w.i, x.start_ns, x.end_ns, x.tid, x.name FROM gs_file_ops w
            JOIN (SELECT pid, device_id, stream_id, start_ns, correlation_id FROM kernel UNION ALL
                  SELECT pid, device_id, stream_id, start_ns, correlation_id FROM memcpy UNION ALL
                  SELECT pid, device_id, stream_id, start_ns, correlation_id FROM memset UNION ALL
                  SELECT pid, device_id, stream_id, start_ns, correlation_id FROM graph_launch) o
              ON o.pid = w.pid AND o.device_id = w.device AND o.stream_id = w.stream AND o.start_ns = w.start_ns
            JOIN (SELECT a.pid, a.correlation_id, a.start_ns, a.end_ns, a.tid, s.value AS name, 0 AS pri
                  FROM api_call a JOIN string s ON s.id = a.name_id
                  UNION ALL SELECT a.pid, a.correlation_id, a.start_ns, a.end_ns, a.tid, s.value, 1
                  FROM launch_call a JOIN string s ON s.id = a.api_name_id) x
              ON x.pid = o.pid AND x.correlation_id = o.correlation_id
            QUALIFY row_number() OVER (PARTITION BY w.lane, w.i ORDER BY x.pri) = 1""")
        launch = {(int(r.lane), int(r.i)): {"start_ns": int(r.start_ns),
                                            "end_ns": None if r.end_ns != r.end_ns else int(r.end_ns),
                                            "tid": None if r.tid != r.tid else int(r.tid), "name": str(r.name)}
                  for r in launches.itertuples(index=False)}
        at = pd.DataFrame({"lane": [k[0] for k in rows], "i": [k[1] for k in rows],
                           "pid": [int(r.get("pid") or 0) for r in rows.values()]})
        at["tid"] = [launch[k]["tid"] if k in launch and launch[k]["tid"] is not None else p
                     for k, p in zip(rows, at["pid"])]
        at["at"] = [launch[k]["start_ns"] if k in launch else int(r["start_ns"]) for k, r in rows.items()]
        paths, lines = _paths_and_lines(report, index, at)
    finally:
        con.unregister("gs_file_ops")
    out = {}
    for k, r in rows.items():
        fields = op_fields(r["tbl"], r) + [("Range path", paths.get(k), "text"), ("Python line", lines.get(k), "text")]
        out[k] = ([f for f in fields if f[1] is not None], launch.get(k))
    return out


def _range_paths(index: TimelineIndex, at: pd.DataFrame) -> dict[tuple[int, int], str]:
    """The ranges open on each launching thread at each launch time, outermost first (as
    :func:`.details._range_path` finds them, and as :func:`.details.path_text`
    shortens a deep path), from the index's range lanes: the slices of every lane of the thread
    with start <= time <= end. One sweep over the thread's ranges and launches in time order, so
    time and memory grow with their number, not with the depth times the launches (ranges left
    open span every later launch)."""
    tracks = {(t.pid, t.tid): t for t in index.tracks if t.tid is not None and t.label.endswith(": Ranges")}
    out: dict[tuple[int, int], str] = {}
    for (pid, tid), group in at.groupby(["pid", "tid"], sort=False):
        track = tracks.get((int(pid), int(tid)))
        if track is None:
            continue
        lanes = [index.lanes[lane_id] for lane_id in track.lanes]
        if not lanes:
            continue
        ranges = np.unique(np.stack([np.concatenate([np.asarray(ln.start, dtype=np.int64) for ln in lanes]),
                                     -np.concatenate([np.asarray(ln.end, dtype=np.int64) for ln in lanes]),
                                     np.concatenate([np.asarray(ln.name, dtype=np.int64) for ln in lanes])],
                                    axis=1), axis=0)  # by (start, -end, name), each once
        start, end, name = ranges[:, 0], -ranges[:, 1], ranges[:, 2]
        by_end = np.argsort(end, kind="stable")
        t = group["at"].to_numpy(np.int64)
        keys = list(zip(group["lane"].to_numpy(), group["i"].to_numpy()))
        open_: dict[int, None] = {}  # the ranges open at the sweep's time, by start (insertion order)
        nxt = gone = 0
        texts: dict[tuple[int, ...], str] = {}
        for k in np.argsort(t, kind="stable"):
            now = t[k]
            while nxt < len(start) and start[nxt] <= now:
                open_[nxt] = None
                nxt += 1
            while gone < len(by_end) and end[by_end[gone]] < now:
                open_.pop(int(by_end[gone]), None)
                gone += 1
            if not open_:
                continue
            shown = path_ends(open_)
            text = texts.get(shown)
            if text is None:
                names = [index.names[int(name[r])] if r >= 0 else "" for r in shown]
                text = texts[shown] = path_text(names, len(open_))
            lane, i = keys[k]
            out[(int(lane), int(i))] = text
    return out


def _paths_and_lines(report: Report, index: TimelineIndex,
                     at: pd.DataFrame) -> tuple[dict[tuple[int, int], str], dict[tuple[int, int], str]]:
    """The range path at each launch (:func:`_range_paths`), and the Python line of the first stack
    sample within ``WINDOW_NS`` after it."""
    if at.empty:
        return {}, {}
    report.con.register("gs_file_at", at)
    try:
        samples = report.sql(f"""SELECT q.lane, q.i, q.pid, c.stack_id FROM gs_file_at q ASOF JOIN cpu_sample c
                                 ON c.pid = q.pid AND c.tid = q.tid AND c.ts_ns >= q.at
                                 WHERE c.ts_ns < q.at + {WINDOW_NS} AND c.stack_id IS NOT NULL""")
    finally:
        report.con.unregister("gs_file_at")
    sites = stack_sites(report, {(int(p), int(s)) for _, _, p, s in samples}) if samples else {}
    lines = {}
    for lane, i, pid, stack in samples:
        site = sites.get((int(pid), int(stack)))
        if site is not None:
            lines[(int(lane), int(i))] = site_text(site)
    return _range_paths(index, at), lines

"""What a timeline shows on demand: one slice's details, the slices whose name matches a search,
and a summary of a selected span (top kernels, GPU busy per stream, top ranges).

Details come from the slice's row in the report: the launch configuration of a kernel, the API
call or launch anchor with the same correlation id, the ranges open on the launching thread at the
launch, and the Python line of the first stack sample after it (as :mod:`..ops.launch_sites` counts).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...trace.report import Report
from ...trace.stacks import stack_sites
from ..ops.launch_sites import WINDOW_NS
from ..table import Unit
from .tracks import SOURCES, SRC, TimelineIndex, Track
from .window import busy_before

Field = tuple[str, Any, Unit]


def _first(report: Report, query: str, params: list[Any]) -> dict[str, Any] | None:
    df = report.df(query + " LIMIT 1", params)
    return None if df.empty else {k: (None if v != v else v) for k, v in df.iloc[0].to_dict().items()}


def _row(report: Report, track: Track, table: str, start: int, end: int) -> dict[str, Any] | None:
    """The row of ``table`` behind a slice: the track's key and the slice's times."""
    if table == "kernel":
        base = ("SELECT k.*, c.grid_x, c.grid_y, c.grid_z, c.block_x, c.block_y, c.block_z, c.registers_per_thread, "
                "c.static_shared_memory, c.dynamic_shared_memory, c.local_memory_per_thread "
                "FROM kernel k JOIN kernel_config c ON c.id = k.config_id WHERE ")
    else:
        base = f"SELECT * FROM {table} WHERE "
    time_col = "ts_ns" if table == "cpu_sample" else "start_ns"
    where = [f"{time_col} = ?"]
    params: list[Any] = [start]
    if track.pid is not None:
        where.append("pid = ?")
        params.append(track.pid)
    if track.tid is not None:
        where.append("tid = ?")
        params.append(track.tid)
    if track.stream is not None and table in ("kernel", "memcpy", "memset", "graph_launch"):
        where += ["device_id = ?", "stream_id = ?"]
        params += [track.device, track.stream]
    prefix = "k." if table == "kernel" else ""
    return _first(report, base + " AND ".join(prefix + w for w in where), params)


def _launch(report: Report, pid: int, corr: int | None) -> dict[str, Any] | None:
    """The host call that launched the operation of correlation id ``corr``: an API call, else a
    launch anchor (a graph launch or an annotated launch)."""
    if corr is None:
        return None
    for table, name_col in (("api_call", "name_id"), ("launch_call", "api_name_id")):
        row = _first(report, f"SELECT a.start_ns, a.end_ns, a.tid, s.value AS name FROM {table} a "
                             f"JOIN string s ON s.id = a.{name_col} WHERE a.pid = ? AND a.correlation_id = ?",
                     [pid, corr])
        if row is not None:
            return row
    return None


# A range path deeper than PATH_OUTER + PATH_INNER ranges (ranges left open pile up) is shown as
# its outermost and innermost ranges and how many lie between.
PATH_OUTER, PATH_INNER = 4, 12


def path_ends(ordered: dict[int, None]) -> tuple[int, ...]:
    """Return the keys of ``ordered`` (a path, outermost first) that :func:`path_text` shows:
    all of them, or the first PATH_OUTER, -1, and the last PATH_INNER."""
    if len(ordered) <= PATH_OUTER + PATH_INNER:
        return tuple(ordered)
    outer = [k for k, _ in zip(ordered, range(PATH_OUTER))]
    inner = [k for k, _ in zip(reversed(ordered), range(PATH_INNER))][::-1]
    return (*outer, -1, *inner)


def path_text(names: list[str], depth: int) -> str:
    """Return a range path of ``depth`` ranges as text, ``outer > inner``: every name where
    ``names`` holds them all, else (``names`` as :func:`path_ends` chose them, ``""`` at the gap)
    the outermost and innermost with the number of ranges between."""
    if len(names) >= depth:
        return " > ".join(names)
    gap = depth - PATH_OUTER - PATH_INNER
    return " > ".join(f"({gap:,} more)" if k == PATH_OUTER else n for k, n in enumerate(names))


def _range_path(report: Report, pid: int, tid: int, t: int) -> str | None:
    where = ("FROM nvtx_range r WHERE r.pid = ? AND r.tid = ? AND r.kind <> 'mark' AND r.start_ns <= ? "
             "AND coalesce(r.end_ns, ?) >= ?")
    depth = int(report.sql(f"SELECT count(*) {where}", [pid, tid, t, t, t])[0][0])
    if not depth:
        return None
    ends = [] if depth <= PATH_OUTER + PATH_INNER else [PATH_OUTER, PATH_INNER]
    order = "ORDER BY r.start_ns, r.end_ns DESC"
    query = f"SELECT s.value FROM (SELECT r.name_id, r.start_ns, r.end_ns {where} {{order}}{{limit}}) r " \
            f"JOIN string s ON s.id = r.name_id {order}"
    params = [pid, tid, t, t, t]
    if not ends:
        return path_text([str(r[0]) for r in report.sql(query.format(order=order, limit=""), params)], depth)
    outer = report.sql(query.format(order=order, limit=f" LIMIT {PATH_OUTER}"), params)
    inner = report.sql(query.format(order="ORDER BY r.start_ns DESC, r.end_ns", limit=f" LIMIT {PATH_INNER}"),
                       params)
    return path_text([str(r[0]) for r in outer] + [""] + [str(r[0]) for r in inner], depth)


def _python_line(report: Report, pid: int, tid: int, t: int) -> str | None:
    row = _first(report, "SELECT stack_id FROM cpu_sample WHERE pid = ? AND tid = ? AND ts_ns >= ? AND ts_ns < ? "
                         "ORDER BY ts_ns", [pid, tid, t, t + WINDOW_NS])
    if row is None or row["stack_id"] is None:
        return None
    site = stack_sites(report, {(pid, int(row["stack_id"]))}).get((pid, int(row["stack_id"])))
    return None if site is None else site_text(site)


def site_text(site: Any) -> str:
    """Return a stack's site as the details show it: ``file:line function``."""
    return f"{site.location} {site.function}".strip()


GPU_SOURCES = ("kernel", "memcpy", "memset", "graph_launch")


def op_fields(table: str, row: dict[str, Any]) -> list[Field]:
    """Return the fields of a GPU operation's row of ``table`` (a kernel's with its launch
    configuration's columns): device, stream, correlation, and the configuration or the bytes."""
    fields: list[Field] = [("Device", row.get("device_id"), "id"), ("Stream", row.get("stream_id"), "id"),
                           ("Correlation", row.get("correlation_id"), "id")]
    if table == "kernel":
        fields += [("Grid", _dims(row, "grid"), "text"), ("Block", _dims(row, "block"), "text"),
                   ("Registers per thread", row.get("registers_per_thread"), "count"),
                   ("Shared memory (static + dynamic)",
                    _sum(row.get("static_shared_memory"), row.get("dynamic_shared_memory")), "bytes"),
                   ("Local memory per thread", row.get("local_memory_per_thread"), "bytes")]
        if row.get("graph_id"):
            fields.append(("CUDA graph", row["graph_id"], "id"))
    elif table in ("memcpy", "memset"):
        fields.append(("Bytes", row.get("bytes"), "bytes"))
    return fields


def details(report: Report, index: TimelineIndex, lane_id: int, i: int) -> dict[str, Any] | None:
    """Return what the report holds about slice ``i`` of lane ``lane_id``: ``{"name", "start", "end"
    (timeline times), "track", "source", "fields": [(label, value, unit)], "launch": {start_ns, end_ns, tid,
    name} or None}``; None when there is no such slice."""
    if not 0 <= lane_id < len(index.lanes) or not 0 <= i < len(index.lanes[lane_id]):
        return None
    lane = index.lanes[lane_id]
    track = index.tracks[lane.track]
    start, end, table = int(lane.start[i]), int(lane.end[i]), SOURCES[int(lane.src[i])]
    row = (_row(report, track, table, start, end) or {}) if table != "cpu_stack" else {}
    fields: list[Field] = [("Start", start - index.start_ns, "ns"), ("Duration", end - start, "ns")]
    launch = None
    if table in GPU_SOURCES:
        fields += op_fields(table, row)
        pid = int(row.get("pid", track.pid or 0))
        launch = _launch(report, pid, row.get("correlation_id"))
        tid = int(launch["tid"]) if launch and launch.get("tid") is not None else pid
        at = int(launch["start_ns"]) if launch else start
        fields += [("Range path", _range_path(report, pid, tid, at), "text"),
                   ("Python line", _python_line(report, pid, tid, at), "text")]
    elif table == "nvtx_range":
        domain = report.sql("SELECT value FROM string WHERE id = ?", [row.get("domain_id")]) if row else []
        fields += [("Domain", domain[0][0] if domain else None, "text"), ("Source", row.get("source"), "text"),
                   ("Category", row.get("category"), "text"),
                   ("Range path", _range_path(report, int(track.pid or 0), int(track.tid or 0), start), "text")]
    elif table == "api_call":
        fields.append(("Correlation", row.get("correlation_id"), "id"))
        op = _first(report, "SELECT n.value AS name, k.start_ns, k.stream_id FROM kernel k JOIN kernel_config c "
                            "ON c.id = k.config_id JOIN string n ON n.id = c.name_id WHERE k.pid = ? AND "
                            "k.correlation_id = ?", [track.pid, row.get("correlation_id")])
        if op:
            fields += [("Launched kernel", op["name"], "text"), ("On stream", op["stream_id"], "id")]
    elif table == "cpu_sample" and row.get("stack_id") is not None:
        fields.append(("Python line", _python_line(report, int(track.pid or 0), int(track.tid or 0), start), "text"))
    name = index.names[int(lane.name[i])]
    if table == "nvtx_range" and row.get("source") == "torch" and row.get("category") in ("forward", "backward"):
        from ..ranges.layers import module_labels  # a module's range: its class beside its name

        name = module_labels(report).get(name, name)
    return {"name": name, "start": start - index.start_ns, "end": end - index.start_ns,
            "source": table,
            "track": f"{track.group} / {track.label}",
            "fields": [f for f in fields if f[1] is not None], "launch": launch}


def _dims(row: dict[str, Any], prefix: str) -> str | None:
    vals = [row.get(f"{prefix}_{a}") for a in "xyz"]
    return None if any(v is None for v in vals) else " x ".join(str(int(v)) for v in vals)


def _sum(*values: Any) -> int | None:
    known = [int(v) for v in values if v is not None]
    return sum(known) if known else None


def search(index: TimelineIndex, text: str, limit: int = 200) -> dict[str, Any]:
    """Return the slices whose name contains ``text`` (case-blind): ``{"total", "matches": [(lane,
    index, start, end)...]}`` (timeline times), the first ``limit`` by start time."""
    needle = text.casefold()
    wanted = np.array([i for i, n in enumerate(index.names) if needle and needle in n.casefold()], dtype=np.int32)
    total, found = 0, []
    if len(wanted):
        for lane in index.lanes:
            hits = np.flatnonzero(np.isin(lane.name, wanted))
            total += len(hits)
            o = index.start_ns
            found += [(lane.id, int(h), int(lane.start[h]) - o, int(lane.end[h]) - o) for h in hits[:limit]]
    found.sort(key=lambda m: m[2])
    return {"total": total, "matches": found[:limit]}


def span_summary(index: TimelineIndex, t0: int, t1: int, top: int = 10) -> dict[str, Any]:
    """Return what ran in [t0, t1) (timeline times): ``{"t0", "t1", "kernels": [(name, ns in span, slices)], "busy":
    [(track label, busy fraction)], "ranges": [(name, ns in span, slices)]}``: the ``top`` kernels
    and ranges by their time inside the span, and each GPU stream's busy fraction."""
    rel0, rel1 = int(t0), max(int(t1), int(t0) + 1)
    t0, t1 = rel0 + index.start_ns, rel1 + index.start_ns
    kernels: dict[int, list[int]] = {}
    ranges: dict[int, list[int]] = {}
    busy = []
    for track in index.tracks:
        for lane_id in track.lanes:
            lane = index.lanes[lane_id]
            i0, i1 = int(np.searchsorted(lane.end, t0, "right")), int(np.searchsorted(lane.start, t1, "left"))
            if track.stream is not None and lane.depth == 0 and not track.label.endswith("graph launches"):
                b = busy_before(lane, np.array([t0, t1], dtype=np.int64))
                busy.append((f"{track.group} / {track.label}", float(b[1] - b[0]) / max(t1 - t0, 1)))
            if i1 <= i0:
                continue
            src = lane.src[i0:i1]
            if track.stream is not None:
                into, m = kernels, src == SRC["kernel"]
            elif "Ranges" in track.label:
                into, m = ranges, src == SRC["nvtx_range"]
            else:
                continue
            clip = np.minimum(lane.end[i0:i1], t1) - np.maximum(lane.start[i0:i1], t0)
            names = lane.name[i0:i1][m]
            for n, ns, c in zip(*_by_name(names, clip[m])):
                acc = into.setdefault(n, [0, 0])
                acc[0] += ns
                acc[1] += c
    return {"t0": rel0, "t1": rel1, "busy": busy, "kernels": _top(index, kernels, top), "ranges": _top(index, ranges, top)}


def _by_name(names: np.ndarray, ns: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    if not len(names):
        return [], [], []
    uniq, inv = np.unique(names, return_inverse=True)
    return uniq.tolist(), np.bincount(inv, weights=ns).astype(np.int64).tolist(), np.bincount(inv).tolist()


def _top(index: TimelineIndex, acc: dict[int, list[int]], top: int) -> list[tuple[str, int, int]]:
    best = sorted(acc.items(), key=lambda kv: -kv[1][0])[:top]
    return [(index.names[n], ns, count) for n, (ns, count) in best]

"""The rows of a report's timeline, indexed for window queries.

A *track* is one row of the timeline as a person reads it: a thread's ranges (nested by depth),
its CUDA API calls, its synchronization waits, its Python samples as a flame strip (one lane per
stack depth), a GPU stream (kernels, copies, sets, graph
launches), a counter. A track with slices has one or more *lanes*: slices of one lane never
overlap, so a nested range sits one lane below its parent. Each lane keeps its slices as sorted
numpy arrays (start, end, name, source table and row id), loaded once from the report, so that
a window query (:mod:`.window`) is a few binary searches however large the report.

Names are interned once per index (``names``); a slice refers to its name by position.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...trace.report import DAMAGED, Report

# Source tables of slices, by code (``Lane.src``); the details of a slice come from its row there.
SOURCES = ("kernel", "memcpy", "memset", "graph_launch", "nvtx_range", "torch_op", "api_call", "sync_site",
           "sync", "cpu_sample", "cpu_stack")  # cpu_stack: a frame of the flame strip (samples merged)
SRC = {name: i for i, name in enumerate(SOURCES)}
# Above this many GPU operations the steps are not marked: finding them (analysis.steps.source) takes
# tens of seconds and gigabytes on ten million kernels, more than a viewer may wait.
STEP_LIMIT = 2_000_000


@dataclass
class Lane:
    """Slices that never overlap, by start time: ``start``, ``end`` (ns), ``name`` (index into the
    index's names), ``src`` (SOURCES code); a slice is found again in its
    source table by its track's key and its start and end."""

    id: int
    track: int
    depth: int
    start: np.ndarray
    end: np.ndarray
    name: np.ndarray
    src: np.ndarray
    # busy time before each slice: cum[i] = sum(end - start)[:i] (computed unless given)
    cum: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        if len(self.cum) != len(self.start) + 1:
            self.cum = np.concatenate([[0], np.cumsum(self.end - self.start)]).astype(np.int64)

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class Track:
    """One row of the timeline: its group (a process or a GPU), its label, its kind, its lanes."""

    id: int
    group: str
    label: str
    kind: str  # "slices" or "counter"
    lanes: list[int] = field(default_factory=list)
    pid: int | None = None
    counter: str | None = None  # the host_counter name of a counter track
    tid: int | None = None  # a thread's track
    device: int | None = None  # a GPU stream's track
    stream: int | None = None
    t: np.ndarray | None = None  # a counter's sample times (ns) and values
    v: np.ndarray | None = None


@dataclass
class TimelineIndex:
    """Every track and lane of a report, with the names they use and the span they cover."""

    tracks: list[Track]
    lanes: list[Lane]
    names: list[str]
    start_ns: int
    end_ns: int
    steps: list[tuple[int, int, int, int]]  # pid, step number, start_ns, end_ns
    steps_found: bool = True  # False: too many GPU operations to look for steps (STEP_LIMIT)
    # the overhead probe's steps, not recorded: pid, step number, start_ns, end_ns (mark to mark), and
    # what happened in it (collection off, switching off, switching on: analysis/steps/counts.py)
    probe_steps: list[tuple[int, int, int, int, str]] = field(default_factory=list)

    def events(self) -> int:
        """Return the number of slices of every lane."""
        return sum(len(lane) for lane in self.lanes)

    def describe(self) -> dict[str, Any]:
        """Return the tracks and lanes as plain data (what a page needs to lay out its rows); step
        times are timeline times (ns from ``start_ns``); the overhead probe's steps apart, so that
        ``steps`` stays the recorded ones in order."""
        return {
            "start_ns": self.start_ns, "end_ns": self.end_ns,
            "tracks": [{"id": t.id, "group": t.group, "label": t.label, "kind": t.kind, "lanes": t.lanes,
                        "pid": t.pid} for t in self.tracks],
            "lanes": [{"id": ln.id, "track": ln.track, "depth": ln.depth, "events": len(ln)} for ln in self.lanes],
            "steps_found": self.steps_found,
            "steps": [{"pid": p, "step": s, "start": a - self.start_ns, "end": b - self.start_ns}
                      for p, s, a, b in self.steps],
            "probe_steps": [{"pid": p, "step": s, "start": a - self.start_ns, "end": b - self.start_ns, "what": what}
                            for p, s, a, b, what in self.probe_steps],
        }


# Slices of each kind of track: its key columns, then start_ns, end_ns, and the name as ``name_id``
# (a string id) or ``text`` (made here), and ``src``. A NULL end (a range never closed) ends at the
# end of the report. CPU samples end at the next sample of their thread, so that they never overlap.
_STREAM_KEY = ("pid", "device_id", "stream_id")
_THREAD_KEY = ("pid", "tid")
_KERNELS = f"""SELECT k.pid, k.device_id, k.stream_id, k.start_ns, k.end_ns, c.name_id, {SRC['kernel']} AS src
               FROM kernel k JOIN kernel_config c ON c.id = k.config_id"""
_STREAM_TEXT = f"""
    SELECT pid, device_id, stream_id, start_ns, end_ns,
           'Memcpy ' || coalesce(copy_kind, '?') || CASE WHEN src_kind IS NULL THEN '' ELSE
           ' (' || src_kind || ' -> ' || coalesce(dst_kind, '?') || ')' END AS text, {SRC['memcpy']} AS src FROM memcpy
    UNION ALL SELECT pid, device_id, stream_id, start_ns, end_ns,
           'Memset (' || coalesce(memory_kind, '?') || ')', {SRC['memset']} FROM memset"""
_GRAPHS = f"""SELECT pid, device_id, stream_id, start_ns, end_ns, 'CUDA graph ' || graph_id AS text,
                     {SRC['graph_launch']} AS src FROM graph_launch"""
_THREAD = {
    "Ranges": f"""SELECT pid, tid, start_ns, coalesce(end_ns, {{end}}) AS end_ns, name_id, {SRC['nvtx_range']} AS src
                  FROM nvtx_range WHERE kind <> 'mark'""",
    "Operators": f"SELECT pid, tid, start_ns, end_ns, name_id, {SRC['torch_op']} AS src FROM torch_op",
    "CUDA API": f"SELECT pid, tid, start_ns, end_ns, name_id, {SRC['api_call']} AS src FROM api_call",
    "Sync waits": f"SELECT pid, tid, start_ns, end_ns, api_name_id AS name_id, {SRC['sync_site']} AS src FROM sync_site",
}
# Python samples (for the flame strip, :mod:`.flame`): each lasts until the next sample of
# its thread, or its weight if shorter, so that they never overlap.
_SAMPLES = """
    SELECT pid, tid, ts_ns AS start_ns,
           least(ts_ns + weight_ns, coalesce(lead(ts_ns) OVER (PARTITION BY pid, tid ORDER BY ts_ns),
                                             ts_ns + weight_ns)) AS end_ns, stack_id
    FROM cpu_sample WHERE stack_id IS NOT NULL"""
_SYNC = f"""SELECT pid, start_ns, end_ns, 'Sync ' || coalesce(type, '?') AS text, {SRC['sync']} AS src FROM sync"""


class _Names:
    """Interns names: the report's string table by id, and texts made here."""

    def __init__(self, report: Report) -> None:
        rows = report.sql("SELECT id, value FROM string ORDER BY id")
        self.names: list[str] = [v for _, v in rows]
        ids = np.array([i for i, _ in rows], dtype=np.int64)
        self.by_id = np.full(int(ids.max()) + 1 if len(ids) else 1, -1, dtype=np.int32)
        self.by_id[ids] = np.arange(len(ids), dtype=np.int32)
        self.texts: dict[str, int] = {}

    def of(self, ids: np.ndarray | None, texts: np.ndarray | None) -> np.ndarray:
        """Return the name positions of rows that have a string id (>= 0) or else a text."""
        if ids is None:
            assert texts is not None
            ids = np.full(len(texts), -1, dtype=np.int64)
        raw = np.asarray(np.ma.filled(ids, -1) if np.ma.isMaskedArray(ids) else ids, dtype=np.int64)
        out = np.full(len(raw), -1, dtype=np.int32)
        ok = (raw >= 0) & (raw < len(self.by_id))
        out[ok] = self.by_id[raw[ok]]
        for i in np.flatnonzero(out < 0):
            text = str(texts[i]) if texts is not None and texts[i] is not None else "?"
            if text not in self.texts:
                self.texts[text] = len(self.names)
                self.names.append(text)
            out[i] = self.texts[text]
        return out


def _lanes_of(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Assign each slice (sorted by start, longer first) the first lane free at its start: nested
    ranges get their depth, slices that follow each other share lane 0."""
    if len(start) < 2 or bool(np.all(start[1:] >= np.maximum.accumulate(end)[:-1])):
        return np.zeros(len(start), dtype=np.int32)
    out = np.empty(len(start), dtype=np.int32)
    busy: list[tuple[int, int]] = []  # (end of its last slice, lane) of each lane in use: a heap
    free: list[int] = []  # lanes whose last slice has ended: a heap, the lowest first
    lanes = 0
    # a batch of the times as Python numbers at a time: all of them at once, two lists of millions of
    # numbers, cost 0.2 GB at three million operators
    for a in range(0, len(start), _LANE_BATCH):
        batch = out[a:a + _LANE_BATCH]
        for i, (s, e) in enumerate(zip(start[a:a + _LANE_BATCH].tolist(), end[a:a + _LANE_BATCH].tolist())):
            while busy and busy[0][0] <= s:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                lane = heapq.heappop(free)
            else:
                lane, lanes = lanes, lanes + 1
            heapq.heappush(busy, (e, lane))
            batch[i] = lane
    return out


_LANE_BATCH = 1 << 16


class _Builder:
    def __init__(self, report: Report) -> None:
        self.report = report
        self.names = _Names(report)
        self.tracks: list[Track] = []
        self.lanes: list[Lane] = []

    def track(self, group: str, label: str, kind: str = "slices", pid: int | None = None, **key: Any) -> Track:
        t = Track(len(self.tracks), group, label, kind, pid=pid, **key)
        self.tracks.append(t)
        return t

    def slices(self, track: Track, parts: list[dict[str, np.ndarray]]) -> None:
        """Add the slices of ``parts`` (start_ns, end_ns, src, and name_id or text) to ``track``."""
        parts = [p for p in parts if len(p["start_ns"])]
        if not parts:
            return
        start = np.concatenate([np.asarray(p["start_ns"], dtype=np.int64) for p in parts])
        end = np.concatenate([np.asarray(p["end_ns"], dtype=np.int64) for p in parts])
        np.maximum(end, start, out=end)
        name = np.concatenate([self.names.of(p.get("name_id"), p.get("text")) for p in parts])
        src = np.concatenate([np.asarray(p["src"], dtype=np.int8) for p in parts])
        if len(parts) > 1:  # each part comes sorted; several are merged here
            order = np.lexsort((-end, start))
            start, end, name, src = start[order], end[order], name[order], src[order]
        depth = _lanes_of(start, end)
        deepest = int(depth.max())
        for d in range(deepest + 1):
            m = depth == d if deepest else slice(None)  # one lane: no copies (ten million slices are 300 MB)
            lane = Lane(len(self.lanes), track.id, d, start[m], end[m], name[m], src[m])
            self.lanes.append(lane)
            track.lanes.append(lane.id)

    def depth_lanes(self, track: Track, parts: list[dict[str, np.ndarray]], src: int) -> None:
        """Add one lane per entry of ``parts`` (start_ns, end_ns, name_id; depth by position) to ``track``."""
        for d, p in enumerate(parts):
            start = np.asarray(p["start_ns"], dtype=np.int64)
            end = np.maximum(np.asarray(p["end_ns"], dtype=np.int64), start)
            lane = Lane(len(self.lanes), track.id, d, start, end, self.names.of(p["name_id"], None),
                        np.full(len(start), src, dtype=np.int8))
            self.lanes.append(lane)
            track.lanes.append(lane.id)

    def keys(self, query: str, key: tuple[str, ...]) -> list[tuple[int, ...]]:
        """Return the distinct keys (pid, tid or pid, device, stream) of ``query``'s rows."""
        cols = ", ".join(key)
        return [tuple(int(v) for v in r) for r in self.report.sql(f"SELECT DISTINCT {cols} FROM ({query}) ORDER BY {cols}")]

    def part(self, query: str, key: tuple[str, ...], values: tuple[int, ...]) -> dict[str, np.ndarray]:
        """Return the slices of ``query`` with these key values, by start (longer first)."""
        where = " AND ".join(f"{k} = ?" for k in key)
        name = "text" if "AS text" in query else "coalesce(name_id, -1) AS name_id"
        sql = (f"SELECT start_ns, coalesce(end_ns, start_ns) AS end_ns, {name}, src FROM ({query}) "
               f"WHERE {where} ORDER BY start_ns, end_ns DESC")
        try:
            return self.report.con.execute(sql, list(values)).fetchnumpy()
        except DAMAGED as exc:
            raise self.report.damaged(exc) from None


def thread_label(tid: int, name: str | None = None) -> str:
    """``Thread 4639 (MainThread)``, or ``Thread 4639`` without a name. A negative id is a thread id
    that a trace wrote as a signed 32-bit number (PyTorch's profiler does for some CUPTI threads): it
    is shown as the unsigned number it stands for."""
    shown = tid if tid >= 0 else tid & 0xFFFFFFFF
    return f"Thread {shown}" + (f" ({name})" if name else "")


def build_index(report: Report) -> TimelineIndex:
    """Return the timeline index of ``report``: its tracks (threads, GPU streams, counters) and lanes."""
    from ..steps.counts import probe_spans, step_counts
    from ..steps.source import step_windows
    from .flame import StackTree, flame_parts

    b = _Builder(report)
    lo, hi = report.sql(
        """SELECT min(t0), max(t1) FROM (
             SELECT min(start_ns) t0, max(end_ns) t1 FROM kernel UNION ALL SELECT min(start_ns), max(end_ns) FROM memcpy
             UNION ALL SELECT min(start_ns), max(end_ns) FROM memset UNION ALL SELECT min(start_ns), max(end_ns) FROM api_call
             UNION ALL SELECT min(start_ns), max(end_ns) FROM nvtx_range UNION ALL SELECT min(start_ns), max(end_ns) FROM torch_op
             UNION ALL SELECT min(ts_ns), max(ts_ns) FROM host_counter UNION ALL SELECT min(start_ns), max(end_ns) FROM process)"""
    )[0]
    lo, hi = int(lo or 0), int(hi or lo or 0)
    procs = {int(p): (exe or "") for p, exe in report.sql("SELECT pid, any_value(executable) FROM process GROUP BY pid")}

    def group(pid: int) -> str:
        exe = procs.get(pid, "")
        return f"Process {pid}" + (f" ({exe.rsplit('/', 1)[-1]})" if exe else "")

    names = {(int(p), int(t)): str(n) for p, t, n in report.sql(
        "SELECT pid, tid, any_value(name) FILTER (WHERE name <> '') AS n FROM thread_time GROUP BY pid, tid "
        "HAVING n IS NOT NULL")}

    def thread(pid: int, tid: int) -> str:
        return thread_label(tid, names.get((pid, tid)))

    for label, query in _THREAD.items():
        query = query.format(end=hi)
        for pid, tid in b.keys(query, _THREAD_KEY):
            track = b.track(group(pid), f"{thread(pid, tid)}: {label}", pid=pid, tid=tid)
            b.slices(track, [b.part(query, _THREAD_KEY, (pid, tid))])
    trees: dict[int, StackTree] = {}
    for pid, tid in b.keys(_SAMPLES, _THREAD_KEY):
        rows = report.con.execute(f"SELECT start_ns, end_ns, stack_id FROM ({_SAMPLES}) WHERE pid = ? AND tid = ? "
                                  "ORDER BY start_ns", [pid, tid]).fetchnumpy()
        tree = trees.setdefault(pid, StackTree(report, pid))
        parts = flame_parts(tree, np.asarray(rows["start_ns"], dtype=np.int64), np.asarray(rows["end_ns"], dtype=np.int64),
                            np.asarray(rows["stack_id"], dtype=np.int64))
        if parts:
            b.depth_lanes(b.track(group(pid), f"{thread(pid, tid)}: Python stacks", pid=pid, tid=tid), parts,
                          SRC["cpu_stack"])
    for (pid,) in b.keys(_SYNC, ("pid",)):
        b.slices(b.track(group(pid), "CUDA synchronization", pid=pid), [b.part(_SYNC, ("pid",), (pid,))])
    devices = dict(report.sql("SELECT id, any_value(name) FROM device GROUP BY id"))
    streams = sorted(set(b.keys(_KERNELS, _STREAM_KEY)) | set(b.keys(_STREAM_TEXT, _STREAM_KEY)), key=lambda k: (k[1], k[2], k[0]))
    graphs = b.keys(_GRAPHS, _STREAM_KEY)
    many = len({k[0] for k in streams + graphs}) > 1
    for key in sorted(streams + [(*k, -1) for k in graphs], key=lambda k: (k[1], k[2], k[0], len(k))):
        pid, dev, stream = key[:3]
        label = f"Stream {stream}" + (f" (pid {pid})" if many else "") + (": graph launches" if len(key) > 3 else "")
        track = b.track(f"GPU {dev} {devices.get(dev) or ''}".strip(), label, pid=pid, device=dev, stream=stream)
        queries = [_GRAPHS] if len(key) > 3 else [_KERNELS, _STREAM_TEXT]
        b.slices(track, [b.part(q, _STREAM_KEY, (pid, dev, stream)) for q in queries])
    samples = report.df("SELECT coalesce(pid, 0) AS pid, name, ts_ns, value FROM host_counter ORDER BY name, pid, ts_ns")
    for (pid, name), rows in samples.groupby(["pid", "name"], sort=False):
        system = int(pid) == 0 or int(pid) not in procs
        track = b.track("Counters" if system else group(int(pid)), str(name), kind="counter",
                        pid=None if system else int(pid), counter=str(name))
        track.t, track.v = rows["ts_ns"].to_numpy(np.int64), rows["value"].to_numpy(np.float64)
    ops = sum(len(b.lanes[i]) for t in b.tracks if t.device is not None for i in t.lanes)
    steps: list[tuple[int, int, int, int]] = []
    probe: list[tuple[int, int, int, int, str]] = []
    if ops <= STEP_LIMIT:
        windows = step_windows(report)
        steps = [(int(r.pid), int(r.step), int(r.start_ns), int(r.end_ns)) for r in windows.itertuples(index=False)]
        probe = [(c.pid, *span) for c in step_counts(report, windows=windows) for span in probe_spans(c)]
    return TimelineIndex(b.tracks, b.lanes, b.names.names, lo, hi, steps, steps_found=ops <= STEP_LIMIT,
                         probe_steps=probe)

"""Export to the Chrome trace event format (JSON), which Perfetto UI and chrome://tracing open.

Layout: one process per profiled process with a row per CPU thread (CUDA API calls, NVTX ranges
(category ``nvtx``), PyTorch's module and step ranges (``torch_range``), PyTorch operators, host
waits), a row per thread of its Python stack samples (``python``: each a slice of the wall time
since the thread's previous sample, named by the program's line) and a row for synchronizations; one process per GPU with a row per
stream (kernels, copies, sets); a flow arrow from each launching API call to its kernel or memory
operation (when API calls were recorded). Host, process and GPU (NVML) counters become counter
tracks. Times are microseconds from the start of the first profiled process (or the first event).

Trace viewers draw the slices of one row as a stack, each inside the one before: a slice that
starts inside another and ends after it (a range ended on another thread, a module's forward
that outlives its caller) would be drawn wrongly. Such a slice goes to an extra row of its thread
(``THREAD (overlapping 1)``), so that on every row slices nest or follow each other. The slices are
read sorted by thread and time, so laying them out holds only the open ones: memory does not grow
with the report.
"""

from __future__ import annotations

import itertools
import json
from typing import IO, Any, Callable, Iterator


from .report import DAMAGED, Report
from .stacks import stack_sites

GPU_PID_BASE = 1 << 30  # pseudo process ids for GPUs, far above real pids
SYNC_TID = (1 << 31) - 1  # pseudo thread of each process that holds its synchronization records
LANE_BASE = 1 << 32  # extra rows of a thread: tid + k * LANE_BASE for its k-th row of overlapping slices
SAMPLES_LANE = 1 << 48  # the row of a thread's Python samples: tid + SAMPLES_LANE


_GPU_OPS = """
    SELECT k.pid, k.device_id, k.stream_id, k.start_ns, k.end_ns, n.value AS name, k.correlation_id,
           'kernel' AS cat, c.grid_x, c.grid_y, c.grid_z, c.block_x, c.block_y, c.block_z,
           c.registers_per_thread, c.static_shared_memory + c.dynamic_shared_memory AS smem,
           NULL AS bytes
    FROM kernel k JOIN kernel_config c ON c.id = k.config_id JOIN string n ON n.id = c.name_id
    UNION ALL
    SELECT pid, device_id, stream_id, start_ns, end_ns,
           'Memcpy ' || copy_kind || ' (' || src_kind || ' -> ' || dst_kind || ')',
           correlation_id, 'memcpy', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, bytes
    FROM memcpy
    UNION ALL
    SELECT pid, device_id, stream_id, start_ns, end_ns, 'Memset (' || memory_kind || ')',
           correlation_id, 'memset', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, bytes
    FROM memset"""


def _gpu_pid(device_id: int) -> int:
    return GPU_PID_BASE + int(device_id)


BATCH = 100_000  # rows fetched at a time
WRITE_BATCH = 5_000  # events encoded before a write


def _batches(report: Report, query: str) -> Iterator[tuple[Any, ...]]:
    try:
        cur = report.con.execute(query)
        while True:
            rows = cur.fetchmany(BATCH)
            if not rows:
                return
            yield from rows
    except DAMAGED as exc:
        raise report.damaged(exc) from None


def origin_ns(report: Report) -> int:
    """Return the export's time zero: the earliest process start or event in the report."""
    row = report.sql(
        """SELECT min(t) FROM (
            SELECT min(start_ns) AS t FROM kernel UNION ALL SELECT min(start_ns) FROM memcpy
            UNION ALL SELECT min(start_ns) FROM memset UNION ALL SELECT min(start_ns) FROM api_call
            UNION ALL SELECT min(start_ns) FROM sync UNION ALL SELECT min(start_ns) FROM process)"""
    )
    return int(row[0][0] or 0)


def _lanes(slices: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Yield ``slices`` (``X`` events with their ``_s`` and ``_e`` in ns, sorted by process, thread,
    start and longest first) with each one moved to the first row of its thread where it nests in or
    follows the slices before it, then a name for each extra row. Only the open slices' ends are held."""
    rows: dict[tuple[int, int], list[list[int]]] = {}
    extra: set[tuple[int, int, int]] = set()
    for ev in slices:
        s, e = ev.pop("_s"), ev.pop("_e")
        stacks = rows.setdefault((ev["pid"], ev["tid"]), [])
        for k, stack in enumerate([*stacks, []]):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                if k == len(stacks):
                    stacks.append(stack)
                stack.append(e)
                break
        if k:
            extra.add((ev["pid"], ev["tid"], k))
            ev["tid"] = ev["tid"] + k * LANE_BASE
        yield ev
    for pid, tid, k in sorted(extra):
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid + k * LANE_BASE,
               "args": {"name": f"thread {tid} (overlapping {k})"}}


def events(report: Report) -> Iterator[dict[str, Any]]:
    """Yield the trace events of ``report``: metadata, counters and instants as they come, then the
    slices laid out in rows (:func:`_lanes`), then the launch arrows.

    The slices are read from DuckDB sorted by thread and time, so memory stays bounded whatever the
    report's size (a fetch batch, the open slices of each row, the API calls that moved to an extra
    row).
    """
    t0 = origin_ns(report)
    yield from _others(report, t0)
    moved: dict[tuple[int, int, float], int] = {}
    for ev in _lanes(_slices(report, t0)):
        if ev.get("cat") == "cuda_api" and ev["tid"] >= LANE_BASE:
            moved[(ev["pid"], ev["tid"] % LANE_BASE, ev["ts"])] = ev["tid"]
        yield ev
    for ev in _flows(report, t0):  # an arrow starts on the row its API call went to
        if ev["ph"] == "s":
            ev["tid"] = moved.get((ev["pid"], ev["tid"], ev["ts"]), ev["tid"])
        yield ev


def _us(t0: int) -> Callable[[int], float]:
    return lambda ns: round((ns - t0) / 1000.0, 3)


def _span(us: Callable[[int], float], s: int, e: int) -> dict[str, Any]:
    return {"ts": us(s), "dur": round(us(e) - us(s), 3), "_s": int(s), "_e": int(e)}


def _others(report: Report, t0: int) -> Iterator[dict[str, Any]]:
    """Yield the events of ``report`` that are not slices nor arrows: names, marks, counters, samples."""
    us = _us(t0)
    procs = report.sql("SELECT pid, executable, argv FROM process ORDER BY start_ns")
    first_pid = procs[0][0] if procs else None
    for pid, exe, argv in procs:
        label = " ".join(json.loads(argv)[:3]) if argv else exe
        yield {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{label} (pid {pid})"}}
    devices = dict(report.sql("SELECT id, any_value(name) FROM device GROUP BY id"))
    streams = report.sql(
        """SELECT DISTINCT device_id, stream_id FROM (
            SELECT device_id, stream_id FROM kernel UNION ALL SELECT device_id, stream_id FROM memcpy
            UNION ALL SELECT device_id, stream_id FROM memset) ORDER BY 1, 2"""
    )
    for dev in sorted({d for d, _ in streams}):
        name = devices.get(dev, "GPU")
        yield {"ph": "M", "name": "process_name", "pid": _gpu_pid(dev), "args": {"name": f"GPU {dev} {name}"}}
        yield {"ph": "M", "name": "process_sort_index", "pid": _gpu_pid(dev), "args": {"sort_index": 1000 + dev}}
    for dev, stream in streams:
        yield {"ph": "M", "name": "thread_name", "pid": _gpu_pid(dev), "tid": stream,
               "args": {"name": f"Stream {stream}"}}

    for s, pid, tid, name, cat in _batches(
        report,
        f"""SELECT r.start_ns, r.pid, r.tid, n.value, {_RANGE_CAT} FROM nvtx_range r JOIN string n ON n.id = r.name_id
           WHERE r.kind = 'mark' ORDER BY r.start_ns""",
    ):
        yield {"ph": "i", "s": "t", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": us(s)}

    for ts, pid, name, value in _batches(
        report, "SELECT ts_ns, pid, name, value FROM host_counter ORDER BY ts_ns"
    ):  # counter tracks: GPUs and the host's cores under the first process, each process under itself
        owner = pid or first_pid
        if owner is not None:
            yield {"ph": "C", "name": name, "pid": owner, "ts": us(ts), "args": {"value": value}}

    for pid, device, cuda, ts, value in report.sql(  # each process's memory peak, marked on its counter
            """SELECT pid, device_id, coalesce(source, '') = 'cuda', arg_max(ts_ns, allocated_bytes),
                      max(allocated_bytes) FROM memory_event WHERE allocated_bytes IS NOT NULL
               GROUP BY ALL ORDER BY 1, 2, 3"""):
        where = ("cpu" if device < 0 else f"gpu{device}") + (" CUDA" if cuda else "")
        yield {"ph": "i", "s": "p", "cat": "memory", "name": f"{where} peak allocated", "pid": pid, "ts": us(ts),
               "args": {"bytes": int(value)}}

    for (pid,) in report.sql("SELECT DISTINCT pid FROM sync ORDER BY pid"):
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": SYNC_TID,
               "args": {"name": "CUDA synchronization"}}

    if report.count("cpu_sample"):  # one slice per sample, named by the program's line it was in
        places = stack_sites(report, {(p, st) for p, st in report.sql("SELECT DISTINCT pid, stack_id FROM cpu_sample")})
        for pid, tid in report.sql("SELECT DISTINCT pid, tid FROM cpu_sample ORDER BY ALL"):
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid + SAMPLES_LANE,
                   "args": {"name": f"thread {tid}: Python samples"}}
        for pid, tid, ts, stack, weight in _batches(
                report, "SELECT pid, tid, ts_ns, stack_id, weight_ns FROM cpu_sample ORDER BY ts_ns"):
            site = places[(pid, stack)]
            # a sample stands for the wall time since its thread's previous one: a slice ending at it
            start = us(ts - max(int(weight or 0), 0))
            yield {"ph": "X", "cat": "python", "name": site.function or site.location, "pid": pid,
                   "tid": tid + SAMPLES_LANE, "ts": start, "dur": round(us(ts) - start, 3),
                   "args": {"line": site.location, "innermost": site.innermost}}


# Every kind of slice in one layout (kind, pid, tid, start, end, name, then each kind's own
# arguments), so that one query returns them all sorted by row and time; at equal times the longer
# first, then in this order of kinds.
_SLICE_COLUMNS = ("k, pid, tid, s, e, name, corr, op_pid, cat, g_x, g_y, g_z, b_x, b_y, b_z, regs, smem, nbytes, "
                  "stream, stack, shapes, dtypes")
_NONE = ", ".join(["NULL"] * 15)  # the 15 columns after corr
_NONE13 = ", ".join(["NULL"] * 13)  # the 13 after cat
# A range's category says who made it: NVTX ranges of the program are 'nvtx'; those gpuscope made of
# PyTorch's modules, optimizer steps and record_function are 'torch_range' (not 'torch_op', the operators)
_RANGE_CAT = "CASE WHEN coalesce(r.source, 'nvtx') = 'nvtx' THEN 'nvtx' ELSE r.source || '_range' END"
_SLICES = f"""
    SELECT 0, a.pid, a.tid, a.start_ns, a.end_ns, s.value, a.correlation_id, {_NONE}
    FROM api_call a JOIN string s ON s.id = a.name_id
    UNION ALL
    SELECT 1, {GPU_PID_BASE} + device_id, stream_id, start_ns, end_ns, name, correlation_id, pid, cat,
           grid_x, grid_y, grid_z, block_x, block_y, block_z, registers_per_thread, smem, bytes,
           NULL, NULL, NULL, NULL
    FROM ({_GPU_OPS})
    UNION ALL
    SELECT 2, r.pid, r.tid, r.start_ns, r.end_ns, n.value, NULL, NULL, {_RANGE_CAT}, {_NONE13}
    FROM nvtx_range r JOIN string n ON n.id = r.name_id
    WHERE r.kind IS DISTINCT FROM 'mark' AND r.end_ns IS NOT NULL
    UNION ALL
    SELECT 3, pid, {SYNC_TID}, start_ns, end_ns, type, NULL, NULL, 'sync', NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, stream_id, NULL, NULL, NULL
    FROM sync
    UNION ALL
    SELECT 4, s.pid, s.tid, s.start_ns, s.end_ns, n.value, NULL, NULL, 'sync', NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, s.stack_id, NULL, NULL
    FROM sync_site s JOIN string n ON n.id = s.api_name_id
    UNION ALL
    SELECT 5, o.pid, o.tid, o.start_ns, o.end_ns, n.value, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL, o.shapes, o.dtypes
    FROM torch_op o JOIN string n ON n.id = o.name_id WHERE o.end_ns IS NOT NULL"""


def _slices(report: Report, t0: int) -> Iterator[dict[str, Any]]:
    """Yield every slice of ``report`` (times in ns as ``_s`` and ``_e``), sorted by process, thread,
    start and the longer first: read from one sorted query in batches, never all held at once."""
    us = _us(t0)
    sites = {}
    if report.count("sync_site"):  # host waits carry the line that made them
        sites = stack_sites(report, {(p, st) for p, st in report.sql("SELECT DISTINCT pid, stack_id FROM sync_site")})
    query = f"SELECT * FROM ({_SLICES}) t({_SLICE_COLUMNS}) ORDER BY pid, tid, s, e DESC, k"
    for (k, pid, tid, s, e, name, corr, op_pid, cat, gx, gy, gz, bx, by, bz, regs, smem, nbytes, stream, stack,
         shapes, dtypes) in _batches(report, query):
        ev: dict[str, Any] = {"ph": "X", "cat": _CATS[k] or cat, "name": name, "pid": pid, "tid": tid,
                              **_span(us, s, e)}
        if k == 0:
            ev["args"] = {"correlation": corr}
        elif k == 1:
            args: dict[str, Any] = {"correlation": corr, "pid": op_pid}
            if cat == "kernel":
                args.update(grid=[gx, gy, gz], block=[bx, by, bz], registers=regs, shared_memory=smem)
            else:
                args["bytes"] = nbytes
            ev["args"] = args
        elif k == 3:
            ev["args"] = {"stream": stream}
        elif k == 4:
            ev["args"] = {"source": sites[(pid, stack)].location}
        elif k == 5:
            ev["args"] = {"shapes": shapes, "dtypes": dtypes}
        yield ev


_CATS = ["cuda_api", None, None, "sync", "sync", "torch_op"]


def _flows(report: Report, t0: int) -> Iterator[dict[str, Any]]:
    """Yield the arrows from each launching API call to its GPU operation."""
    us = _us(t0)
    flows = f"""
        SELECT a.pid, a.tid, a.start_ns, g.device_id, g.stream_id, g.start_ns
        FROM api_call a JOIN ({_GPU_OPS}) g
          ON g.pid = a.pid AND g.correlation_id = a.correlation_id
        ORDER BY a.start_ns"""
    for n, (pid, tid, api_s, dev, stream, op_s) in enumerate(_batches(report, flows)):
        yield {"ph": "s", "cat": "launch", "name": "launch", "id": n, "pid": pid, "tid": tid,
               "ts": us(api_s)}
        yield {"ph": "f", "bp": "e", "cat": "launch", "name": "launch", "id": n,
               "pid": _gpu_pid(dev), "tid": stream, "ts": us(op_s)}


def write(report: Report, out: IO[str]) -> int:
    """Write ``report`` as a Chrome trace JSON document to ``out``; return the number of events.

    Events are encoded by msgspec (about a tenth of ``json.dumps``' time, which was most of an
    export's) and written a few thousand at a time, one per line."""
    import msgspec  # noqa: PLC0415

    encode = msgspec.json.Encoder().encode
    lines = (encode(ev).decode() for ev in events(report))
    out.write('{"displayTimeUnit": "ns", "traceEvents": [\n')
    n = 0
    while batch := list(itertools.islice(lines, WRITE_BATCH)):
        out.write((",\n" if n else "") + ",\n".join(batch))
        n += len(batch)
    out.write("\n]}\n")
    return n

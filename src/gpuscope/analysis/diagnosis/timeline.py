"""One process's timeline as arrays: its GPU operations, what blocked its host, its DataLoader waits
and its steps, ready for interval arithmetic in numpy.

GPU operations are those of :func:`..ops.attribution.ops_table` (same ``op_id``), with the attributes
the diagnosis needs: stream, bytes, pageable or pinned memory, whether the call was asynchronous.
An operation is *busy* work (kernels, CUDA graph launches, device-to-device copies, memsets) or a
*transfer* (a copy that involves host memory or another device: HtoD, DtoH, HtoH, PtoP, ...).

A *blocking call* is a stretch of host time in which the program waited for the GPU: a
``sync_site`` row (a synchronizing CUDA call with its Python stack), a ``sync`` row CUPTI recorded
that no ``sync_site`` row stands for (``StreamWaitEvent`` left out: the GPU waits there, not the
host), or a copy or memset made with a synchronous call (``is_async`` false), from its launch to its
end (without API records, from the process's previous launch).

Step windows: a step ends when the host has reached its end (the step mark, or the end of a
``step`` range) *and* the GPU has finished every operation launched before that, so that a GPU
running behind the host still gets its own time per step. Without steps, one window runs from the
process's first launch to the end of its last GPU operation (one per capture window, when a capture
range limited the recording).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...trace.report import Report
from ..ops.attribution import ops_table
from ..ops.own_connection import own_connection
from ..ops.rows import op_frame
from ..steps.from_pattern import given_operations
from ..steps.source import StepSource, step_source, step_windows
from ..ops.sync import sync_site_frame

HOST_MEMORY_COPIES = ("HtoD", "DtoH", "HtoH", "HtoA", "AtoH", "PtoP")
COPY_APIS = ("cudaMemcpy", "cuMemcpy")


_START_ORDER = ("pid", "start_ns", "end_ns", "op_id")
KINDS = ("kernel", "memcpy", "memset", "graph")
_KINDS = "ENUM(" + ", ".join(f"'{k}'" for k in KINDS) + ")"
_COPY_ATTRS = ("copy_kind", "src_kind", "dst_kind", "bytes", "is_async")  # of copies and memsets only


_OP_COLUMNS = ("op_id", "kind", "pid", "tid", "launch_ns", "start_ns", "end_ns", "device_id", "name_id", "stream_id",
               "correlation_id", "config_id")


def _op_columns() -> dict[str, str]:
    """Every GPU operation's attributes all kinds have (:func:`..ops.attribution.ops_table`'s own
    columns). The kind comes as its position in :data:`KINDS`: ten million strings, one object
    each, cost gigabytes on their way into pandas."""
    return {c: f"enum_code(kind::{_KINDS})" if c == "kind" else c for c in _OP_COLUMNS}


def _ops_query(report: Report) -> str:
    """The SQL of :func:`_op_columns`."""
    return f"SELECT {', '.join(f'{sql} AS {name}' for name, sql in _op_columns().items())} FROM {ops_table(report)}"


def _copy_attrs(report: Report) -> pd.DataFrame:
    """The copies and memsets with :data:`_COPY_ATTRS` (:func:`_copy_attrs_query`); without any,
    that query's empty frame, made without the operations' table."""
    if report.count("memcpy") or report.count("memset"):
        return report.df(_copy_attrs_query(report))
    nothing = ("(SELECT CAST(NULL AS BIGINT) AS op_id, CAST(NULL AS VARCHAR) AS kind, pid, start_ns, end_ns, device_id, "
               "CAST(NULL AS VARCHAR) AS copy_kind FROM kernel WHERE FALSE)")
    return report.df(_copy_attrs_query(report, nothing))


def _copy_attrs_query(report: Report, ops: str | None = None) -> str:
    """The copies and memsets with :data:`_COPY_ATTRS`, from their records: a few rows, where a join
    of every operation with its record cost more than the rest of the loading."""
    ops = ops or ops_table(report)
    same = "x.pid = o.pid AND x.start_ns = o.start_ns AND x.end_ns = o.end_ns AND x.device_id IS NOT DISTINCT FROM o.device_id"
    return f"""
        WITH attrs AS (
            SELECT o.op_id, x.src_kind, x.dst_kind, x.bytes, x.is_async
            FROM {ops} o JOIN memcpy x ON o.kind = 'memcpy' AND {same} AND x.copy_kind IS NOT DISTINCT FROM o.copy_kind
            UNION ALL
            SELECT o.op_id, NULL, NULL, x.bytes, x.is_async
            FROM {ops} o JOIN memset x ON o.kind = 'memset' AND {same})
        SELECT o.op_id, o.copy_kind, a.src_kind, a.dst_kind, a.bytes, a.is_async
        FROM {ops} o LEFT JOIN attrs a USING (op_id) WHERE o.kind IN ('memcpy', 'memset')"""


@dataclass
class ProcessTimeline:
    """Everything of one process the breakdown needs, sorted by start time."""

    pid: int
    ops: pd.DataFrame  # op_id, kind, tid, launch_ns, start_ns, end_ns, ..., transfer (bool), pageable (bool)
    calls: pd.DataFrame  # start_ns, end_ns, source ('site', 'sync', 'op'), ref, api
    loaders: pd.DataFrame  # start_ns, end_ns of DataLoader waits
    windows: pd.DataFrame  # step (label), start_ns, end_ns, warmup (bool)
    has_steps: bool


@dataclass
class Timelines:
    """The timelines of every process that ran GPU operations, and the report's sync sites."""

    processes: list[ProcessTimeline]
    step_source: StepSource
    sites: pd.DataFrame  # sync_site_frame(report); empty without sync sites


def load_ops(report: Report) -> pd.DataFrame:
    """Return every GPU operation with its launch point and attributes (see the module docstring)."""
    # ids read as 32-bit integers where they fit, columns of one value held as that value (the
    # frame is read, never written): ten million operations read 0.3 GB less
    with _reader(report) as own:
        ops = op_frame(own, _op_columns(), _START_ORDER, {"kind": KINDS}, compact=_NARROW)
    _add_copy_attrs(ops, _copy_attrs(report))
    # the copy kind among the ids, moved rather than selected (a selection copies the columns)
    ops.insert(list(ops.columns).index("name_id") + 1, "copy_kind", ops.pop("copy_kind"))
    # few values, compared and grouped often
    ops["kind"] = _used_kinds(ops["kind"].array)
    ops["transfer"] = (ops["kind"] == "memcpy") & ops["copy_kind"].isin(HOST_MEMORY_COPIES)
    ops["pageable"] = ((ops["src_kind"] == "Pageable") | (ops["dst_kind"] == "Pageable")).fillna(False).astype(bool)
    if ops["is_async"].dtype != "boolean":
        ops["is_async"] = ops["is_async"].astype("boolean")
    for col in _NARROW:
        ops[col] = _narrowed(ops[col])
    for col in _SMALL:
        ops[col] = _narrowed(ops[col], smallest=True)
    for col in ops.columns:
        ops[col] = _shared_if_constant(ops[col])
    return ops


@contextlib.contextmanager
def _reader(report: Report) -> Iterator[Report]:
    """``report`` opened again on a connection of its own, closed once the operations are read: the
    blocks of the report that reading them brought into DuckDB's cache (ten million operations: 0.13
    GB) go with it instead of staying for the rest of the analysis (:mod:`..ops.own_connection`).
    ``report`` itself where its connection has the operations' table already (read from there)."""
    from ..ops.attribution import OPS, _exists

    if _exists(report, f"{OPS}_sorted"):
        yield report
        return
    with own_connection(report) as own:
        yield own


def _shared_if_constant(column: pd.Series) -> pd.Series:
    """A column of one value everywhere (the process id of a one-process run, its device, the kind
    of a run of kernels alone) as that value viewed read-only for every row, without memory of its
    own; other columns as they are. The frame is read, never written."""
    values = column.array
    if isinstance(values, pd.Categorical):
        codes = shared_if_constant(values.codes)
        if codes is values.codes:
            return column
        return pd.Series(pd.Categorical.from_codes(codes, dtype=values.dtype), index=column.index, copy=False)
    if not isinstance(values, pd.arrays.NumpyExtensionArray):
        return column
    data = values.to_numpy()
    shared = shared_if_constant(data)
    return column if shared is data else pd.Series(shared, index=column.index, copy=False)


def shared_if_constant(values: np.ndarray) -> np.ndarray:
    """An array of integers or booleans of one value everywhere as that value viewed read-only for
    every element (no memory of its own); else ``values`` itself."""
    if (len(values) < 2 or values.ndim != 1 or values.dtype.kind not in "iub" or values.strides == (0,)
            or values.min() != values.max()):
        return values
    return np.broadcast_to(values[:1].copy(), values.shape)  # a copy: a view would keep all of them


# 64-bit ids whose values fit 32 bits in every report seen: read as such where they do (ten
# million operations: 40 MB a column less); the values are the same
_NARROW = ("op_id", "pid", "tid", "correlation_id")
# ids of few values (kernel names, launch configurations, streams): as the smallest integers their
# values fit (8 or 16 bits in every report seen: ten million operations 60-90 MB less)
_SMALL = ("name_id", "config_id", "stream_id")
_INT32 = np.iinfo(np.int32)


def _narrowed(column: pd.Series, smallest: bool = False) -> pd.Series | np.ndarray:
    """An integer column (plain or nullable) as 32-bit integers where every value fits (``smallest``:
    as 8-, 16- or 32-bit integers, the smallest every value fits), else as it is."""
    values = column.array
    nullable = isinstance(values, pd.arrays.IntegerArray)
    data = values._data[~values._mask] if nullable and values._mask.any() else (
        values._data if nullable else column.to_numpy())
    if data.dtype.kind not in "iu" or (not smallest and data.dtype.itemsize <= 4):
        return column
    kind: type = np.int32
    if len(data):
        lo, hi = int(data.min()), int(data.max())
        fits = [t for t in ((np.int8, np.int16, np.int32) if smallest else (np.int32,))
                if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max]
        if not fits:
            return column
        kind = fits[0]
    if np.dtype(kind).itemsize >= data.dtype.itemsize:
        return column
    if nullable:
        if not len(data):  # NULL everywhere (a thread not recorded): no memory for it
            return pd.Series(_nothing(len(column), kind), index=column.index, copy=False)
        return pd.Series(pd.arrays.IntegerArray(values._data.astype(kind), values._mask), index=column.index,
                         copy=False)
    return pd.Series(data.astype(kind), index=column.index, copy=False)


def _used_kinds(kind: pd.Categorical) -> pd.Categorical:
    """``kind`` without the kinds no operation has (``remove_unused_categories``, whose unique of
    ten million codes took 0.7 s), from a count of each code."""
    codes = np.asarray(kind.codes)
    used = np.bincount(codes[codes >= 0] if (codes < 0).any() else codes, minlength=len(kind.categories)) > 0
    if used.all():
        return kind
    new = np.cumsum(used).astype(codes.dtype) - 1
    return pd.Categorical.from_codes(np.where(codes >= 0, new[np.maximum(codes, 0)], -1).astype(codes.dtype),
                                     dtype=pd.CategoricalDtype(kind.categories[used], ordered=kind.ordered))


def _nothing(n: int, dtype: type) -> pd.arrays.IntegerArray | pd.arrays.BooleanArray:
    """``n`` NULLs of a nullable integer ``dtype`` (or booleans, ``bool``) without memory of their
    own: read-only views of one value and one mask bit. The frame is read, never written."""
    data, mask = np.broadcast_to(np.zeros((), dtype), (n,)), np.broadcast_to(np.True_, (n,))
    return pd.arrays.BooleanArray(data, mask) if dtype is bool else pd.arrays.IntegerArray(data, mask)


def _add_copy_attrs(ops: pd.DataFrame, attrs: pd.DataFrame) -> None:
    """Give ``ops`` the columns of :data:`_COPY_ATTRS`, from ``attrs`` (one row per copy or memset;
    two records with the same times on one device are one operation's: never seen, kept safe), NULL
    for the other operations: texts as categories, the rest as nullable columns."""
    attrs = attrs.drop_duplicates("op_id")
    at = np.zeros(0, dtype=np.int64)
    if len(attrs):  # where each is among the operations (without any, no sort of every id)
        ids = ops["op_id"].to_numpy(np.int64)
        sorter = np.argsort(ids, kind="stable")
        at = sorter[np.searchsorted(ids, attrs["op_id"].to_numpy(np.int64), sorter=sorter)]
        del ids, sorter
    for col in _COPY_ATTRS:
        values = attrs[col]
        if len(attrs) == len(ops):  # every operation is a copy or memset: the column as it came
            back = np.empty(len(at), dtype=np.int64)
            back[at] = np.arange(len(at))
            full = values.iloc[back].reset_index(drop=True)
            ops[col] = full.astype("category") if col.endswith("kind") else full
        elif not len(attrs):  # no copies nor memsets: NULL everywhere, held as one value
            if col.endswith("kind"):
                ops[col] = pd.Categorical.from_codes(np.broadcast_to(np.int8(-1), (len(ops),)),
                                                     dtype=values.astype("category").dtype)
            else:
                ops[col] = pd.Series(_nothing(len(ops), np.int32 if col == "bytes" else bool), copy=False)
        elif col.endswith("kind"):
            known = values.astype("category")
            codes = np.full(len(ops), -1, dtype=known.cat.codes.dtype if len(known) else np.int8)
            codes[at] = known.cat.codes.to_numpy()
            ops[col] = pd.Categorical.from_codes(codes, dtype=known.dtype)
        else:
            present = values.notna().to_numpy()
            known = values[present].to_numpy(np.int64 if col == "bytes" else bool)
            # the sizes as 32-bit integers where they fit (a NULL for most operations)
            fits = col == "bytes" and (not len(known) or (known.min() >= _INT32.min and known.max() <= _INT32.max))
            data = np.zeros(len(ops), dtype=(np.int32 if fits else np.int64) if col == "bytes" else bool)
            mask = np.ones(len(ops), dtype=bool)
            data[at[present]] = known
            mask[at[present]] = False
            ops[col] = pd.arrays.IntegerArray(data, mask) if col == "bytes" else pd.arrays.BooleanArray(data, mask)


def _call_starts(ops: pd.DataFrame, blocking: pd.DataFrame) -> np.ndarray:
    """When the host called each synchronous copy or memset: its launch when API calls were recorded;
    without them (its launch time is then its GPU start) the latest launch of the process before
    it, the earliest the call can have been made."""
    out = blocking["launch_ns"].to_numpy(np.int64).copy()
    for pid in blocking["pid"].unique():
        mine = (blocking["pid"] == pid).to_numpy()
        others = ops[(ops["pid"] == pid) & ~ops["op_id"].isin(blocking["op_id"])]
        launches = np.sort(others["launch_ns"].to_numpy(np.int64))
        start = blocking["start_ns"].to_numpy(np.int64)[mine]
        i = np.searchsorted(launches, start, "left") - 1
        unknown = out[mine] >= start
        earlier = np.where(i >= 0, launches[np.maximum(i, 0)], start)
        out[mine] = np.where(unknown, np.minimum(earlier, start), out[mine])
    return out


def _calls(report: Report, sites: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """Every blocking call of every process (see the module docstring)."""
    parts = []
    if len(sites):
        parts.append(pd.DataFrame({
            "pid": sites["pid"], "start_ns": sites["start_ns"], "end_ns": sites["end_ns"],
            "source": "site", "ref": np.arange(len(sites)), "api": sites["api"],
            "correlation_id": sites["correlation_id"]}))
    syncs = report.df(
        """SELECT s.pid, s.start_ns, s.end_ns, s.type AS api, s.correlation_id,
                  row_number() OVER (ORDER BY s.start_ns) - 1 AS ref
           FROM sync s ANTI JOIN sync_site x ON x.pid = s.pid AND x.correlation_id = s.correlation_id
           WHERE s.type IS DISTINCT FROM 'StreamWaitEvent' AND s.end_ns > s.start_ns""")
    if len(syncs):
        syncs["source"] = "sync"
        parts.append(syncs)
    blocking = ops[ops["kind"].isin(["memcpy", "memset"]) & (ops["is_async"] == False)]  # noqa: E712
    if len(blocking):
        parts.append(pd.DataFrame({
            "pid": blocking["pid"], "start_ns": _call_starts(ops, blocking), "end_ns": blocking["end_ns"],
            "source": "op", "ref": blocking["op_id"], "api": "synchronous " + blocking["kind"].astype(str),
            "correlation_id": blocking["correlation_id"]}))
    cols = ["pid", "start_ns", "end_ns", "source", "ref", "api", "correlation_id"]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c not in ("source", "api") else object) for c in cols})
    calls = pd.concat([p[cols] for p in parts], ignore_index=True)
    return calls.sort_values(["pid", "start_ns", "end_ns"], kind="stable").reset_index(drop=True)


def _windows(report: Report, source: StepSource) -> dict[int, pd.DataFrame]:
    """Step windows per process (:func:`..steps.source.step_windows`); processes without steps are absent."""
    windows = step_windows(report, source)
    out = {}
    for pid, mine in windows.groupby("pid", sort=True):
        frame = mine[["step", "start_ns", "end_ns", "warmup"]].reset_index(drop=True)
        frame["step"] = frame["step"].astype(str)
        out[int(pid)] = frame
    return out


def _whole(report: Report, pid: int, first: int, last: int) -> pd.DataFrame:
    """The windows of a process without steps: its GPU work, within its capture windows if any."""
    spans = [(first, last)]
    if report.count("capture_window"):
        from ..steps.windows import windows_table

        rows = report.sql(f"SELECT start_ns, end_ns FROM {windows_table(report)} WHERE pid = ? ORDER BY start_ns", [pid])
        spans = [(max(first, int(a)), min(last, int(b))) for a, b in rows] or spans
        spans = [(a, b) for a, b in spans if b > a] or [(first, last)]
    labels = ["all"] if len(spans) == 1 else [f"window {i + 1}" for i in range(len(spans))]
    return pd.DataFrame({"step": labels, "start_ns": [a for a, _ in spans], "end_ns": [b for _, b in spans],
                         "warmup": [False] * len(spans)})


def load_timelines(report: Report) -> Timelines:
    """Return the timeline of every process that ran GPU operations."""
    ops = load_ops(report)
    sites = sync_site_frame(report) if report.count("sync_site") else pd.DataFrame()
    calls = _calls(report, sites, ops)
    loaders = report.df(
        """SELECT pid, start_ns, end_ns FROM nvtx_range
           WHERE source = 'torch' AND category = 'dataloader' AND kind = 'range' AND end_ns IS NOT NULL
           ORDER BY pid, start_ns""")
    with given_operations(report, ops):  # steps found from the operations' pattern take them from here
        source = step_source(report)
    windows = _windows(report, source)
    processes = []
    pids = ops["pid"].to_numpy()
    # one process (most reports): its operations are the frame itself, not a copy of ten million rows
    groups = [(pids[0], ops)] if len(pids) and (pids == pids[0]).all() else ops.groupby("pid", sort=True)
    del pids
    for pid, own in groups:
        pid = int(pid)
        own = own.reset_index(drop=True)
        window = windows.get(pid)
        has_steps = window is not None
        if window is None:
            window = _whole(report, pid, int(own["launch_ns"].min()), int(own["end_ns"].max()))
        processes.append(ProcessTimeline(
            pid=pid, ops=own,
            calls=calls[calls["pid"] == pid].reset_index(drop=True),
            loaders=loaders[loaders["pid"] == pid].reset_index(drop=True),
            windows=window, has_steps=has_steps))
    return Timelines(processes, source, sites)

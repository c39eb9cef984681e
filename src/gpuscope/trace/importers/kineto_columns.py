"""One chunk of a Kineto trace's ``traceEvents`` as table columns, built in bulk.

:func:`map_chunk` decodes a run of whole events (the text between two event boundaries) with msgspec
into typed structs (:mod:`.kineto_events`), groups them by category and builds each table's columns with list comprehensions
and numpy, instead of one Python call per event. It maps events exactly as
:class:`~.kineto.KinetoImporter` does, for the events whose fields have the types that mapping
expects; a chunk with anything else (a string where a number belongs, a grid of two numbers) raises
:class:`Unusual` and is mapped by the importer's per-event code instead, so the report is the same
either way. Events of rare kinds (annotations, synchronization, memory instants, process names) are
handed back as dicts for that per-event code too.

This module imports neither DuckDB nor pandas: it runs in the worker processes of a parallel import.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from .kineto_args import SYNC_APIS, copy_kind, op_columns, set_kind
from .kineto_events import TAIL_PREFIX, Args, Event, as_dict, decode

__all__ = ["TAIL_PREFIX", "ChunkColumns", "Unusual", "decode", "map_chunk"]

MODULE_PREFIX = "nn.Module: "
_INT64_SAFE = 2**62
_EXACT_FLOAT_US = 2**53 / 1000  # below this, v * 1000 in float64 is exact for an integer v
_OP_KEYS = [("input_dims", "Input Dims"), ("input_dims_old", "Input dims"), ("input_type", "Input type"),
            ("input_types_old", "Input types"), ("concrete", "Concrete Inputs")]
BULK = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cpu_op", "python_function")
RARE = ("user_annotation", "cuda_sync", "cpu_instant_event", "overhead",
        # older spellings: rare in practice, mapped per event
        "Kernel", "Memcpy", "Memset", "Runtime", "Operator")  # fmt: skip


class Unusual(Exception):
    """The chunk holds values the bulk mapping does not take; map it event by event instead."""


@dataclass
class Block:
    """Columns of one table for the rows of one chunk; nullable integer columns as (values, mask)."""

    columns: dict[str, Any]
    rows: int


@dataclass
class ChunkColumns:
    """What one chunk adds to the report, in the order the per-event mapping would add it."""

    events: int
    cats: Counter[str] = field(default_factory=Counter)
    blocks: dict[str, Block] = field(default_factory=dict)
    names: dict[str, list[str]] = field(default_factory=dict)  # table -> strings the name codes index
    config_keys: list[tuple[Any, ...]] = field(default_factory=list)  # kernel configurations, first seen first
    config_codes: Any = None  # per kernel row: index into config_keys
    modules: list[tuple[Any, ...]] = field(default_factory=list)
    pid_counts: list[tuple[Any, int]] = field(default_factory=list)  # CPU pids, first seen first
    rare: list[dict[str, Any]] = field(default_factory=list)
    with_shapes: bool = False
    first_ns: int | None = None
    last_ns: int = 0


MAPPED = frozenset((None, *BULK, *RARE))  # the categories mapped in bulk or one by one
_CAT, _NAME = attrgetter("cat"), attrgetter("name")
API = ("cuda_runtime", "cuda_driver")


def map_chunk(text: bytes | bytearray, base: int, tail: bool = False, array: bool = False) -> ChunkColumns:
    """Decode ``text`` (as :func:`decode` takes it) and return its rows as columns.

    Raises msgspec.DecodeError for text that is not such events and :class:`Unusual` for events
    whose values the bulk mapping does not take."""
    events = decode(text, tail, array)
    out = ChunkColumns(len(events))
    buckets = _buckets(events, out)
    try:
        rare = _map(buckets, base, out)
    except (TypeError, AttributeError, ValueError, OverflowError) as exc:
        raise Unusual(str(exc)) from None
    if rare:
        out.rare = [as_dict(e) for e in _rare_events(events, buckets, rare)]
    if len(out.pid_counts) > 1:  # several processes: count them in the order they first appear
        first: dict[Any, int] = {}
        for i, e in enumerate(events):
            if (e.cat in API or e.cat == "cpu_op" and not e.name.startswith("ProfilerStep#")) and e.ts is not None \
                    and e.pid not in first:
                first[e.pid] = i
        out.pid_counts.sort(key=lambda item: first[item[0]])
    return out


def _buckets(events: list[Event], out: ChunkColumns) -> dict[Any, list[Event]]:
    """The events of each category that is mapped (in bulk or one by one), in event order, with the
    runtime and driver calls together under ``cuda_runtime`` (one api_call table); count every
    category in ``out.cats`` in the order they first appear, as counted event by event."""
    codes, distinct = _codes(list(map(_CAT, events)))
    counts = np.bincount(codes, minlength=len(distinct)).tolist()
    for cat, n in zip(distinct, counts):
        if cat is not None:
            out.cats[cat] = n
    group = codes
    api = [i for i, c in enumerate(distinct) if c in API]
    if len(api) > 1:  # driver calls join the runtime's group
        remap = np.arange(len(distinct))
        remap[api[1:]] = api[0]
        group = remap[codes]
    order = np.argsort(group, kind="stable")
    sizes = np.bincount(group, minlength=len(distinct)).tolist()
    ends = np.cumsum(sizes).tolist()
    buckets: dict[Any, list[Event]] = {"cuda_runtime": []}
    for i, cat in enumerate(distinct):
        if cat in MAPPED and sizes[i]:
            buckets["cuda_runtime" if cat in API else cat] = _pick(events, order[ends[i] - sizes[i]:ends[i]])
    return buckets


def _get(items: list[Any], attr: str) -> list[Any]:
    """The attribute ``attr`` of each item (AttributeError where an item has none)."""
    getter = _GETTERS.get(attr)
    if getter is None:
        getter = _GETTERS[attr] = attrgetter(attr)
    return list(map(getter, items))


_GETTERS: dict[str, Any] = {}


def _pick(items: list[Any], index: np.ndarray) -> list[Any]:
    """The items at ``index``, in its order."""
    return [items[i] for i in index.tolist()]


def _rare_events(events: list[Event], buckets: dict[Any, list[Event]], steps: list[Event]) -> list[Event]:
    """The events mapped one by one (rare kinds, ProfilerStep operators), in event order where it
    matters: ranges are numbered in the order their events come."""
    parts = [buckets[c] for c in (None, *RARE) if c in buckets]
    steps = [e for e in steps if e.cat == "cpu_op"]
    if steps and "user_annotation" in buckets:  # both make ranges: merge them in event order
        wanted = {id(e) for e in steps} | {id(e) for e in buckets["user_annotation"]}
        merged = [e for e in events if id(e) in wanted]
        return [e for p in parts if p is not buckets["user_annotation"] for e in p] + merged
    return [e for p in parts for e in p] + steps


def _timed(evs: list[Event], base: int) -> tuple[list[Event], np.ndarray, np.ndarray]:
    """The events that have a time (the per-event mapping skips the others), with their start and
    end in ns."""
    start = _scaled(_get(evs, "ts"), base)
    if start is None:
        evs = [e for e in evs if e.ts is not None]
        start = _scaled(_get(evs, "ts"), base)
        if start is None:
            raise Unusual("times that are not numbers")
    durs = _get(evs, "dur")
    end = _scaled(durs, 0)
    if end is None:  # events without a duration: 0, as the per-event mapping reads them
        end = _scaled([d or 0 for d in durs], 0)
    if end is None:
        raise Unusual("durations that are not numbers")
    return evs, start, start + end


def _map(buckets: dict[Any, list[Event]], base: int, out: ChunkColumns) -> list[Event]:
    """Fill ``out`` from the events of the bulk categories; return the ProfilerStep operators, plus
    an event of each rare category present (empty: nothing left to map one by one)."""
    starts: list[int] = []
    ends: list[int] = []
    coded: tuple[int, np.ndarray, list[str]] | None = None
    left: list[Event] = [buckets[c][0] for c in (None, *RARE) if c in buckets]
    pids: Counter[Any] = Counter()
    for cat in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cpu_op", "python_function"):
        evs = buckets.get(cat)
        if not evs:
            continue
        if cat == "python_function":
            evs = list(compress(evs, map(str.startswith, _get(evs, "name"), repeat(MODULE_PREFIX))))
            if not evs:
                continue
        elif cat == "cpu_op":
            names = _get(evs, "name")
            codes, distinct = _codes(names)
            step = [n.startswith("ProfilerStep#") for n in distinct]
            coded = (len(evs), codes, distinct) if not any(step) else None  # the names' codes, reused
            if any(step):
                is_step = np.array(step)[codes]
                left += [e for e, s in zip(evs, is_step.tolist()) if s]
                evs = [e for e, s in zip(evs, is_step.tolist()) if not s]
                if not evs:
                    continue
        evs, start, end = _timed(evs, base)
        if not evs:
            continue
        starts.append(int(start.min()))
        ends.append(int(end.max()))
        if cat == "python_function":
            n = len(MODULE_PREFIX)
            out.modules = [(e.pid, e.tid, s, t, e.name[n:]) for e, s, t in zip(evs, start.tolist(), end.tolist())]
            continue
        args = _get(evs, "args")
        if cat == "kernel":
            _kernels(evs, args, start, end, out)
        elif cat in ("gpu_memcpy", "gpu_memset"):
            _copies(cat, evs, args, start, end, out)
        else:
            if cat == "cpu_op":
                _ops(evs, args, start, end, out, coded[1:] if coded and coded[0] == len(evs) else None)
            else:
                _api(evs, args, start, end, out)
            pids.update(_get(evs, "pid"))
    if starts:
        out.first_ns, out.last_ns = min(starts), max(0, max(ends))
    out.pid_counts = list(pids.items())
    return left


def _scaled(values: list[Any], base: int) -> np.ndarray | None:
    """``base + round(v * 1000)`` for each value, exactly as Python computes it (int64); None where
    a value is None."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    arr = np.array(values)
    if arr.dtype == np.int64:
        top = int(np.abs(arr).max())
        if top * 1000 + abs(base) >= _INT64_SAFE:
            raise Unusual("times out of range")
        return arr * 1000 + base
    if arr.dtype != np.float64:
        if any(v is None for v in values):
            return None
        raise Unusual("times that are not numbers")
    top = float(np.abs(arr).max())
    if not top * 1000 + abs(base) < _INT64_SAFE:
        raise Unusual("times out of range")
    out = np.rint(arr * 1000).astype(np.int64)
    if top >= _EXACT_FLOAT_US:  # integers among the floats: exactly, as Python does
        ints = [i for i, v in enumerate(values) if type(v) is int]
        if ints:
            out[ints] = np.array([values[i] for i in ints], dtype=np.int64) * 1000
    return out + base


def _ints(values: list[Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """A nullable integer column: (int64 values, mask of the None ones, or None without any)."""
    try:
        return np.array(values, dtype=np.int64), None
    except TypeError:
        column = np.array(values, dtype=object)
        mask = np.equal(column, None)
        column[mask] = 0
        return column.astype(np.int64), mask


def _codes(values: list[str]) -> tuple[np.ndarray, list[str]]:
    """Each value's index into the list of distinct values (first seen first), and that list."""
    index: dict[str, Any] = dict.fromkeys(values)
    for i, key in enumerate(index):
        index[key] = i
    return np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values)), list(index)


def _objects(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _add(out: ChunkColumns, table: str, columns: dict[str, Any]) -> None:
    rows = len(next(iter(columns.values())))
    out.blocks[table] = Block(columns, rows)


def _or(first: list[Any], second: list[Any]) -> list[Any]:
    return [a if a is not None else b for a, b in zip(first, second)]


def _kernels(evs: list[Event], args: list[Args], start: np.ndarray, end: np.ndarray, out: ChunkColumns) -> None:
    none3 = (None, None, None)
    keys = [(e.name, *(a.grid or none3), *(a.block or none3), a.registers, a.shared_memory)
            for e, a in zip(evs, args)]
    if any(k[0] is None for k in keys):
        raise Unusual("a kernel without a name")
    out.config_codes, out.config_keys = _codes(keys)  # type: ignore[arg-type]
    pids = _get(evs, "pid")
    _add(out, "kernel", {
        "start_ns": start, "end_ns": end,
        "device_id": _ints(_or(_get(args, "device"), pids)),
        "context_id": _ints(_get(args, "context")),
        "stream_id": _ints(_or(_get(args, "stream"), _get(evs, "tid"))),
        "correlation_id": _ints(_get(args, "correlation")),
    })  # fmt: skip


def _copies(cat: str, evs: list[Event], args: list[Args], start: np.ndarray, end: np.ndarray,
            out: ChunkColumns) -> None:
    names = [e.name if e.name is not None else "" for e in evs]
    codes, distinct = _codes(names)
    common = {
        "start_ns": start, "end_ns": end,
        "device_id": _ints(_or(_get(args, "device"), _get(evs, "pid"))),
        "context_id": _ints(_get(args, "context")),
        "stream_id": _ints(_or(_get(args, "stream"), _get(evs, "tid"))),
        "correlation_id": _ints(_get(args, "correlation")),
    }  # fmt: skip
    if cat == "gpu_memcpy":
        kinds = [copy_kind(n) for n in distinct]
        for i, col in enumerate(("copy_kind", "src_kind", "dst_kind")):
            common[col] = _objects([k[i] for k in kinds])[codes]
        common["bytes"] = _ints(_get(args, "bytes"))
        _add(out, "memcpy", common)
    else:
        common["memory_kind"] = _objects([set_kind(n) for n in distinct])[codes]
        common["bytes"] = _ints(_get(args, "bytes"))
        _add(out, "memset", common)


def _api(evs: list[Event], args: list[Args], start: np.ndarray, end: np.ndarray, out: ChunkColumns) -> None:
    names = [e.name if e.name is not None else "" for e in evs]
    codes, distinct = _codes(names)
    driver = [n.startswith("cu") and not n.startswith("cuda") for n in distinct]
    domain = _objects(["driver" if d else "runtime" for d in driver])[codes]
    if any(e.cat == "cuda_driver" for e in evs):
        domain[[i for i, e in enumerate(evs) if e.cat == "cuda_driver"]] = "driver"
    pid, tid, corr = _ints(_get(evs, "pid")), _ints(_get(evs, "tid")), _ints(_get(args, "correlation"))
    _add(out, "api_call", {"start_ns": start, "end_ns": end, "pid": pid, "tid": tid, "domain": domain,
                           "cbid": _ints(_get(args, "cbid")), "name_id": codes, "correlation_id": corr})
    out.names["api_call"] = distinct
    sync = np.array([n in SYNC_APIS for n in distinct], dtype=bool)[codes]
    if sync.any():
        sel = np.flatnonzero(sync)
        out.names["sync_site"] = distinct
        _add(out, "sync_site", {"start_ns": start[sel], "end_ns": end[sel], "pid": _take(pid, sel),
                                    "tid": _take(tid, sel), "api_name_id": codes[sel],
                                    "correlation_id": _take(corr, sel)})


def _take(col: tuple[np.ndarray, np.ndarray | None], sel: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    values, mask = col
    return values[sel], None if mask is None else mask[sel]


def _ops(evs: list[Event], args: list[Args], start: np.ndarray, end: np.ndarray, out: ChunkColumns,
         coded: tuple[np.ndarray, list[str]] | None = None) -> None:
    names = _get(evs, "name")
    codes, distinct = _codes(names) if coded is None else coded
    shapes: list[Any] = [None] * len(evs)
    dtypes: list[Any] = [None] * len(evs)
    outs: list[Any] = [None] * len(evs)
    scalars: list[Any] = [None] * len(evs)
    cache: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    dims, dims_old = _get(args, "input_dims"), _get(args, "input_dims_old")
    with_dims = [] if dims.count(None) == len(dims) and dims_old.count(None) == len(dims_old) else \
        [i for i, (d, o) in enumerate(zip(dims, dims_old)) if d is not None or o is not None]
    for i in with_dims:
        a = args[i]
        raws = tuple(None if (r := getattr(a, attr)) is None else bytes(r) for attr, _ in _OP_KEYS)
        key = (names[i], *raws)
        cols = cache.get(key)
        if cols is None:
            given = {k: msgspec.json.decode(r) for (_, k), r in zip(_OP_KEYS, raws) if r is not None}
            cols = cache[key] = op_columns(names[i], given)
        shapes[i], dtypes[i], outs[i], scalars[i] = cols
        out.with_shapes = out.with_shapes or cols[0] is not None
    columns = {
        "start_ns": start, "end_ns": end, "pid": _ints(_get(evs, "pid")), "tid": _ints(_get(evs, "tid")),
        "name_id": codes, "seq": _ints(_get(args, "sequence")),
    }  # fmt: skip
    if with_dims:  # otherwise NULL, as the columns not named
        columns.update(shapes=_objects(shapes), dtypes=_objects(dtypes), out_shapes=_objects(outs),
                       scalars=_objects(scalars))
    _add(out, "torch_op", columns)
    out.names["torch_op"] = distinct

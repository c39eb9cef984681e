"""Decoding of packed CUPTI activity structs into report columns.

The profiled process ships CUPTI's records as they are, with the numpy layout of each struct
version; here they become columns. CUPTI's enum values (memcpy kinds, memory kinds, ...) are
stable across CUPTI versions and are spelled out as in Nsight Systems.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

COPY_KIND = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA",
    6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP",
}  # fmt: skip
MEMORY_KIND = {
    0: "Unknown", 1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array",
    5: "Managed", 6: "DeviceStatic", 7: "ManagedStatic",
}  # fmt: skip
SYNC_TYPE = {
    0: "Unknown", 1: "EventSynchronize", 2: "StreamWaitEvent",
    3: "StreamSynchronize", 4: "ContextSynchronize",
}  # fmt: skip
OVERHEAD_KIND = {
    0: "Unknown", 1: "DriverCompiler", 1 << 16: "CuptiBufferFlush", 2 << 16: "CuptiInstrumentation",
    3 << 16: "CuptiResource", 4 << 16: "RuntimeTriggeredModuleLoading", 5 << 16: "LazyFunctionLoading",
    6 << 16: "CommandBufferFull", 7 << 16: "ActivityBufferRequest", 8 << 16: "UvmActivityInit",
}  # fmt: skip
ACTIVITY_KIND_DRIVER = 4
ACTIVITY_KIND_RUNTIME = 5
FLAG_ASYNC = 1  # CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC == CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC
OBJECT_KIND_THREAD = 2
INVALID_U32 = 0xFFFFFFFF

# (resolve space, values) -> global string ids
Resolve = Callable[[str, np.ndarray], np.ndarray]
Columns = dict[str, Any]

KERNEL_CONFIG_FIELDS = (
    "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    "cluster_x", "cluster_y", "cluster_z", "registers_per_thread", "static_shared_memory",
    "dynamic_shared_memory", "local_memory_per_thread", "local_memory_total",
    "shared_memory_executed", "launch_type",
)  # fmt: skip

_TABLE_BY_PREFIX = (
    ("ActivityKernel", "kernel"),
    ("ActivityMemcpyPtoP", "memcpy"),
    ("ActivityMemcpy", "memcpy"),
    ("ActivityMemset", "memset"),
    ("ActivityAPI", "api_call"),
    ("ActivitySynchronization", "sync"),
    ("ActivityOverhead", "overhead"),
    ("ActivityDevice", "device"),
    ("ActivityContext", "context"),
    ("ActivityMarker", "nvtx_event"),
    ("ActivityGraphTrace", "graph_launch"),
    ("ActivityMemoryPool", "memory_event"),
    ("ActivityMemory", "memory_event"),
)


def table_for(struct_name: str) -> str | None:
    """Return the report table that records of ``struct_name`` go to, or None if not stored."""
    for prefix, table in _TABLE_BY_PREFIX:
        rest = struct_name[len(prefix):] if struct_name.startswith(prefix) else None
        if rest is not None and (rest == "" or rest.isdigit()):
            return table
    return None


def _i64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int64, copy=False)


def _time_or_null(a: np.ndarray) -> Any:
    """CUPTI writes 0 for a timestamp it did not take; store those as NULL."""
    return _nullable_int(a, a == 0)


def _nullable_int(values: np.ndarray, null: np.ndarray) -> Any:
    import pandas as pd

    arr = pd.array(values.astype(np.int64), dtype="Int64")
    arr[null] = pd.NA
    return arr


def _enum(mapping: dict[int, str], values: np.ndarray) -> np.ndarray:
    lookup = np.vectorize(lambda v: mapping.get(int(v), f"Unknown({int(v)})"), otypes=[object])
    return lookup(values) if len(values) else np.array([], dtype=object)


def _has(recs: np.ndarray, name: str) -> bool:
    return name in (recs.dtype.names or ())


def _field(recs: np.ndarray, name: str, default: int = 0) -> np.ndarray:
    if _has(recs, name):
        return recs[name]
    return np.full(len(recs), default, dtype=np.int64)


def decode(table: str, recs: np.ndarray, resolve: Resolve) -> Columns:
    """Return the report columns (without ``pid``) of CUPTI records bound for ``table``."""
    return _DECODERS[table](recs, resolve)


def _gpu_op(r: np.ndarray) -> Columns:
    """The columns every GPU operation has: times, where it ran, and its launch's correlation id."""
    return {
        "start_ns": _i64(r["start"]),
        "end_ns": _i64(r["end"]),
        "device_id": r["device_id"],
        "context_id": r["context_id"],
        "stream_id": r["stream_id"],
        "correlation_id": _i64(r["correlation_id"]),
    }


def _kernel(r: np.ndarray, resolve: Resolve) -> Columns:
    cols: Columns = {
        **_gpu_op(r),
        "queued_ns": _time_or_null(_field(r, "queued")),
        "submitted_ns": _time_or_null(_field(r, "submitted")),
        "graph_id": _i64(_field(r, "graph_id")),
        "graph_node_id": _i64(_field(r, "graph_node_id")),
        "mangled_id": resolve("ptr", r["name"]),
    }
    for f in KERNEL_CONFIG_FIELDS:
        src = "local_memory_total_v2" if f == "local_memory_total" and _has(r, f + "_v2") else f
        cols[f] = _i64(_field(r, src))
    return cols


def _memcpy(r: np.ndarray, resolve: Resolve) -> Columns:
    return {
        **_gpu_op(r),
        "copy_kind": _enum(COPY_KIND, _field(r, "copy_kind", 10)),
        "src_kind": _enum(MEMORY_KIND, r["src_kind"]),
        "dst_kind": _enum(MEMORY_KIND, r["dst_kind"]),
        "bytes": _i64(r["bytes"]),
        "is_async": (r["flags_"] & FLAG_ASYNC) != 0,
        "graph_id": _i64(_field(r, "graph_id")),
        "graph_node_id": _i64(_field(r, "graph_node_id")),
    }


def _memset(r: np.ndarray, resolve: Resolve) -> Columns:
    return {
        **_gpu_op(r),
        "memory_kind": _enum(MEMORY_KIND, r["memory_kind"]),
        "bytes": _i64(r["bytes"]),
        "value": _i64(r["value"]),
        "is_async": (r["flags_"] & FLAG_ASYNC) != 0,
        "graph_id": _i64(_field(r, "graph_id")),
        "graph_node_id": _i64(_field(r, "graph_node_id")),
    }


def _api_call(r: np.ndarray, resolve: Resolve) -> Columns:
    runtime = r["kind"] == ACTIVITY_KIND_RUNTIME
    names = np.where(runtime, resolve("runtime", r["cbid"]), resolve("driver", r["cbid"]))
    return {
        "start_ns": _i64(r["start"]),
        "end_ns": _i64(r["end"]),
        "tid": _i64(r["thread_id"]),
        "domain": np.where(runtime, "runtime", "driver").astype(object),
        "cbid": r["cbid"],
        "name_id": names,
        "correlation_id": _i64(r["correlation_id"]),
        "return_value": r["return_value"],
    }


def _sync(r: np.ndarray, resolve: Resolve) -> Columns:
    stream = r["stream_id"]
    return {
        "start_ns": _i64(r["start"]),
        "end_ns": _i64(r["end"]),
        "context_id": r["context_id"],
        # A context or event synchronization names no stream: CUPTI writes CUPTI_SYNCHRONIZATION_INVALID_VALUE
        "stream_id": _nullable_int(stream, stream == INVALID_U32),
        "event_id": _nullable_int(r["cuda_event_id"], r["cuda_event_id"] == INVALID_U32),
        "type": _enum(SYNC_TYPE, r["type"]),
        "correlation_id": _i64(r["correlation_id"]),
        "return_value": _i64(_field(r, "return_value")),
    }


def _overhead(r: np.ndarray, resolve: Resolve) -> Columns:
    obj = r["object_id"]
    thread = r["object_kind"] == OBJECT_KIND_THREAD
    tid = np.where(thread, obj["pt"]["thread_id"].astype(np.int64), 0)
    return {
        "start_ns": _i64(r["start"]),
        "end_ns": _i64(r["end"]),
        "tid": tid,
        "kind": _enum(OVERHEAD_KIND, r["overhead_kind"]),
    }


def _device(r: np.ndarray, resolve: Resolve) -> Columns:
    return {
        "id": r["id"],
        "name_id": resolve("ptr", r["name"]),
        "compute_capability": np.array(
            [f"{a}.{b}" for a, b in zip(r["compute_capability_major"], r["compute_capability_minor"])],
            dtype=object,
        ),
        "sm_count": r["num_multiprocessors"],
        "global_memory_bytes": _i64(r["global_memory_size"]),
        "memory_bandwidth_kbps": _i64(r["global_memory_bandwidth"]),
        "core_clock_khz": _i64(r["core_clock_rate"]),
        "l2_cache_bytes": _i64(r["l2cache_size"]),
        "max_threads_per_block": r["max_threads_per_block"],
        "max_shared_memory_per_block": _i64(r["max_shared_memory_per_block"]),
        "max_shared_memory_per_sm": _i64(r["max_shared_memory_per_multiprocessor"]),
        "max_registers_per_sm": r["max_registers_per_multiprocessor"],
        "max_warps_per_sm": r["max_warps_per_multiprocessor"],
        "max_blocks_per_sm": r["max_blocks_per_multiprocessor"],
        "threads_per_warp": r["num_threads_per_warp"],
        "memcpy_engines": r["num_memcpy_engines"],
    }


def _context(r: np.ndarray, resolve: Resolve) -> Columns:
    return {
        "id": r["context_id"],
        "device_id": r["device_id"],
        "null_stream_id": r["null_stream_id"],
    }


MARKER_INSTANTANEOUS = 1
MARKER_START = 2
MARKER_END = 4


def _nvtx_event(r: np.ndarray, resolve: Resolve) -> Columns:
    """NVTX events as CUPTI gives them: a start or end of a range (paired by id), or a mark."""
    flags = r["flags_"]
    thread = r["object_kind"] == OBJECT_KIND_THREAD
    tid = np.where(thread, r["object_id"]["pt"]["thread_id"].astype(np.int64), 0)
    kind = np.where(flags & MARKER_START, "start", np.where(flags & MARKER_END, "end", "mark"))
    return {
        "ts_ns": _i64(r["timestamp"]),
        "tid": tid,
        "id": _i64(r["id"]),
        "event": kind.astype(object),
        "name_id": resolve("ptr", r["name"]),
        "domain_id": resolve("ptr", r["domain"]),
    }


def _graph_launch(r: np.ndarray, resolve: Resolve) -> Columns:
    return {
        **_gpu_op(r),
        "graph_id": _i64(r["graph_id"]),
    }


MEMORY_OPERATION = {1: "alloc", 2: "free"}
MEMORY_POOL_OPERATION = {1: "pool_create", 2: "pool_destroy", 3: "pool_trim"}
HOST_MEMORY_KINDS = (1, 2)  # pageable, pinned: host memory, device_id -1 as for PyTorch's CPU memory
MEMORY_SOURCE = "cuda"  # memory_event.source of CUPTI's records


def _memory_event(r: np.ndarray, resolve: Resolve) -> Columns:
    """CUPTI's memory records (``ActivityMemory3/4``: allocations and frees; ``ActivityMemoryPool*``: async memory
    pools created, trimmed, destroyed) as ``memory_event`` rows; the running totals are counted when the report is
    closed (memory_totals.py)."""
    n = len(r)
    if _has(r, "memory_pool_operation_type"):
        kind = _enum(MEMORY_POOL_OPERATION, r["memory_pool_operation_type"])
        device = r["device_id"].astype(np.int64)
        stream = _nullable_int(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
        nbytes = _i64(r["size_"])
    else:
        kind = _enum(MEMORY_OPERATION, r["memory_operation_type"])
        device = np.where(np.isin(r["memory_kind"], HOST_MEMORY_KINDS), -1, r["device_id"].astype(np.int64))
        stream = _nullable_int(r["stream_id"], r["stream_id"] == INVALID_U32)
        nbytes = _i64(r["bytes"])
    return {
        "ts_ns": _i64(r["timestamp"]),
        "tid": _nullable_int(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)),
        "device_id": device,
        "kind": kind,
        "address": r["address"].astype(np.int64),  # a CUDA address fits in 63 bits
        "bytes": nbytes,
        "stream_id": stream,
        "source": np.full(n, MEMORY_SOURCE, dtype=object),
    }


_DECODERS: dict[str, Callable[[np.ndarray, Resolve], Columns]] = {
    "memory_event": _memory_event,
    "graph_launch": _graph_launch,
    "kernel": _kernel,
    "memcpy": _memcpy,
    "memset": _memset,
    "api_call": _api_call,
    "sync": _sync,
    "overhead": _overhead,
    "device": _device,
    "context": _context,
    "nvtx_event": _nvtx_event,
}

"""A PyTorch profiler (Kineto) trace as a gpuscope report.

What maps where (docs/import.md has the table): kernels, copies and sets to ``kernel``, ``memcpy``,
``memset``; CUDA runtime and driver calls to ``api_call`` (with their correlation ids, which join
them to the GPU work they launched), host waits among them to ``sync_site`` and Kineto's CUDA
synchronization events to ``sync``; CPU operators with their input shapes and dtypes to
``torch_op``; ``ProfilerStep#N`` to ranges named ``step`` (the report's steps); the optimizer's
``Optimizer.step#AdamW.step`` and ``zero_grad`` annotations to PyTorch ranges, with a step mark at the
end of each optimizer step when there are no ProfilerStep ranges; other ``record_function``
annotations to ranges of source ``kineto``; ``nn.Module`` Python events (``with_modules``) to forward
ranges named by their nesting; ``[memory]`` instant events to memory counters; device properties,
rank and world size to ``device`` and ``meta``. Older spellings (``Kernel``, ``Runtime``,
``Operator``, ``Input dims``, ``external id``) are read as well.

GPU events carry the device as their pid; every row gets the pid of the profiled process instead.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import GpuscopeError
from . import kineto_stream
from .kineto_args import SYNC_APIS, copy_kind, op_columns, set_kind

try:  # the bulk decoding; without msgspec the trace is parsed event by event
    from . import kineto_read
    from .kineto_columns import ChunkColumns
except ImportError:  # pragma: no cover
    kineto_read = None  # type: ignore[assignment]
from .sink import ReportSink  # noqa: E402

PENDING_PID = -1  # pid of GPU rows until the profiled process is known (set when the import ends)
GPU_TABLES = ("kernel", "memcpy", "memset", "sync", "overhead")

_SYNC_KIND = {"Stream Sync": "StreamSynchronize", "Event Sync": "EventSynchronize",
              "Context Sync": "ContextSynchronize", "Stream Wait Event": "StreamWaitEvent",
              "Device Sync": "ContextSynchronize"}
MODULE_PREFIX = "nn.Module: "


class KinetoImporter:
    """Maps the events of one Kineto trace into a :class:`ReportSink`."""

    def __init__(self, sink: ReportSink, header: dict[str, Any]) -> None:
        self.sink = sink
        self.header = header
        self.base = int(header.get("baseTimeNanoseconds") or 0)
        self.configs: dict[tuple[Any, ...], int] = {}
        self.cats: Counter[str] = Counter()
        self.cpu_pids: Counter[int] = Counter()
        self.process_names: dict[int, str] = {}
        self.modules: list[tuple[int, int, int, int, str]] = []  # pid, tid, start, end, label
        self.optimizer_ends: list[tuple[int, int, int]] = []  # pid, tid, end
        self.profiler_steps = 0
        self.range_id = 0
        self.first_ns: int | None = None
        self.last_ns = 0
        self.with_shapes = False
        self.names: dict[str, int] = {}
        self.handlers = {
            "kernel": self.kernel, "Kernel": self.kernel,
            "gpu_memcpy": self.memcpy, "Memcpy": self.memcpy,
            "gpu_memset": self.memset, "Memset": self.memset,
            "cuda_runtime": self.api, "Runtime": self.api, "cuda_driver": self.api,
            "cuda_sync": self.cuda_sync,
            "cpu_op": self.cpu_op, "Operator": self.cpu_op,
            "user_annotation": self.annotation,
            "python_function": self.python_function,
            "cpu_instant_event": self.instant,
            "overhead": self.overhead,
        }  # fmt: skip

    # -- helpers ------------------------------------------------------------------------------
    def _name(self, text: str) -> int:
        sid = self.names.get(text)
        if sid is None:
            sid = self.names[text] = self.sink.intern(text)
        return sid

    def _times(self, ev: dict[str, Any]) -> tuple[int, int]:
        start = self.base + round(ev["ts"] * 1000)
        end = start + round((ev.get("dur") or 0) * 1000)
        if self.first_ns is None or start < self.first_ns:
            self.first_ns = start
        if end > self.last_ns:
            self.last_ns = end
        return start, end

    # -- events -------------------------------------------------------------------------------
    def event(self, ev: dict[str, Any]) -> None:
        """Map one trace event (ignoring kinds gpuscope has no table for: flows, GPU-side copies of
        CPU annotations)."""
        cat = ev.get("cat")
        if cat is not None:
            self.cats[cat] += 1
        self.dispatch(ev)

    def dispatch(self, ev: dict[str, Any]) -> None:
        """Map one event whose category is already counted."""
        cat = ev.get("cat")
        if cat is None:
            if ev.get("ph") == "M" and ev.get("name") == "process_name":
                pid = ev.get("pid")
                if isinstance(pid, int):
                    self.process_names[pid] = str((ev.get("args") or {}).get("name", ""))
            return
        handler = self.handlers.get(cat)
        if handler is not None and "ts" in ev:
            handler(ev)

    def apply(self, chunk: ChunkColumns) -> None:
        """Add the rows of a chunk mapped in bulk (kineto_columns), as :meth:`event` would have
        added them event by event."""
        self.cats.update(chunk.cats)
        for pid, n in chunk.pid_counts:
            self.cpu_pids[pid] += n
        if chunk.first_ns is not None:
            self.first_ns = chunk.first_ns if self.first_ns is None else min(self.first_ns, chunk.first_ns)
            self.last_ns = max(self.last_ns, chunk.last_ns)
        for table, block in chunk.blocks.items():
            cols = dict(block.columns)
            if table == "kernel":
                cols["config_id"] = self._config_ids(chunk.config_keys)[chunk.config_codes]
            name_col = {"api_call": "name_id", "torch_op": "name_id", "sync_site": "api_name_id"}.get(table)
            if name_col is not None:
                ids = np.array([self._name(n) for n in chunk.names[table]], dtype=np.int64)
                cols[name_col] = ids[cols[name_col]]
            if table in GPU_TABLES:
                cols["pid"] = PENDING_PID
            if table == "sync_site":
                cols["stack_id"] = 0
            self.sink.add_block(table, cols, block.rows)
        self.modules += chunk.modules
        self.with_shapes = self.with_shapes or chunk.with_shapes
        for ev in chunk.rare:
            self.dispatch(ev)

    def _config_ids(self, keys: list[tuple[Any, ...]]) -> np.ndarray:
        """The kernel_config id of each launch configuration, adding the new ones."""
        ids = []
        for key in keys:
            cid = self.configs.get(key)
            if cid is None:
                cid = self.configs[key] = len(self.configs)
                name = self._name(key[0])
                self.sink.add("kernel_config", (cid, name, name, *key[1:7], None, None, None, key[7], key[8],
                                                0, None, None, None, None))
            ids.append(cid)
        return np.array(ids, dtype=np.int64)

    def kernel(self, ev: dict[str, Any]) -> None:
        a = ev.get("args") or {}
        start, end = self._times(ev)
        grid, block = a.get("grid") or (None, None, None), a.get("block") or (None, None, None)
        key = (ev["name"], *grid, *block, a.get("registers per thread"), a.get("shared memory"))
        cid = self.configs.get(key)
        if cid is None:
            cid = self.configs[key] = len(self.configs)
            name = self._name(ev["name"])
            self.sink.add("kernel_config", (cid, name, name, *key[1:7], None, None, None, key[7], key[8],
                                            0, None, None, None, None))
        self.sink.add("kernel", (start, end, None, None, PENDING_PID, _device(ev, a), a.get("context"),
                                 _stream(ev, a), a.get("correlation"), cid, None, None))

    def memcpy(self, ev: dict[str, Any]) -> None:
        a = ev.get("args") or {}
        start, end = self._times(ev)
        kind, src, dst = copy_kind(ev.get("name", ""))
        self.sink.add("memcpy", (start, end, PENDING_PID, _device(ev, a), a.get("context"), _stream(ev, a),
                                 a.get("correlation"), kind, src, dst, a.get("bytes"), None, None, None))

    def memset(self, ev: dict[str, Any]) -> None:
        a = ev.get("args") or {}
        start, end = self._times(ev)
        self.sink.add("memset", (start, end, PENDING_PID, _device(ev, a), a.get("context"), _stream(ev, a),
                                 a.get("correlation"), set_kind(ev.get("name", "")), a.get("bytes"), None, None,
                                 None, None))

    def api(self, ev: dict[str, Any]) -> None:
        a = ev.get("args") or {}
        start, end = self._times(ev)
        pid, tid, name = ev.get("pid"), ev.get("tid"), ev.get("name", "")
        self.cpu_pids[pid] += 1
        domain = "driver" if ev["cat"] == "cuda_driver" or name.startswith("cu") and not name.startswith("cuda") \
            else "runtime"
        corr = a.get("correlation")
        sid = self._name(name)
        self.sink.add("api_call", (start, end, pid, tid, domain, a.get("cbid"), sid, corr, None))
        if name in SYNC_APIS:
            self.sink.add("sync_site", (start, end, pid, tid, sid, corr, 0))

    def cuda_sync(self, ev: dict[str, Any]) -> None:
        a = ev.get("args") or {}
        start, end = self._times(ev)
        kind = a.get("cuda_sync_kind") or ev.get("name", "")
        stream = a.get("stream")
        stream = None if stream in (-1, 4294967295) else stream  # a device-wide synchronization
        self.sink.add("sync", (start, end, PENDING_PID, a.get("context"), stream, a.get("Event ID"),
                               _SYNC_KIND.get(kind, kind), a.get("correlation"), None))

    def cpu_op(self, ev: dict[str, Any]) -> None:
        name = ev.get("name", "")
        if name.startswith("ProfilerStep#"):  # older traces write ProfilerStep as an operator
            self.annotation(ev)
            return
        a = ev.get("args") or {}
        start, end = self._times(ev)
        self.cpu_pids[ev.get("pid")] += 1
        shapes, dtypes, outs, scalars = op_columns(name, a)
        if shapes is not None:
            self.with_shapes = True
        seq = a.get("Sequence number")
        self.sink.add("torch_op", (start, end, ev.get("pid"), ev.get("tid"), self._name(name), seq, shapes,
                                   dtypes, outs, scalars))

    def _range(self, ev: dict[str, Any], name: str, source: str, category: str, kind: str = "range") -> None:
        start, end = self._times(ev)
        self.range_id += 1
        self.sink.add("nvtx_range", (start, end, ev.get("pid"), ev.get("tid"), self.range_id, 0, self._name(name),
                                     kind, source, category, None))

    def annotation(self, ev: dict[str, Any]) -> None:
        name = ev.get("name", "")
        if name.startswith("ProfilerStep#"):
            self.profiler_steps += 1
            self._range(ev, "step", "kineto", "step")
        elif name.startswith("Optimizer.step#"):
            self._range(ev, name.split("#", 1)[1], "torch", "optimizer")
            start, end = self._times(ev)
            self.optimizer_ends.append((ev.get("pid"), ev.get("tid"), end))
        elif name.startswith("Optimizer.zero_grad#"):
            self._range(ev, name.split("#", 1)[1], "torch", "zero_grad")
        else:
            self._range(ev, name, "kineto", "annotation")

    def python_function(self, ev: dict[str, Any]) -> None:
        name = ev.get("name", "")
        if name.startswith(MODULE_PREFIX):
            start, end = self._times(ev)
            self.modules.append((ev.get("pid"), ev.get("tid"), start, end, name[len(MODULE_PREFIX):]))

    def instant(self, ev: dict[str, Any]) -> None:
        if ev.get("name") != "[memory]":
            return
        a = ev.get("args") or {}
        ts = self.base + round(ev["ts"] * 1000)
        where = f"gpu{a.get('Device Id', 0)}" if a.get("Device Type") == 1 else "cpu"
        pid = ev.get("pid")
        if a.get("Total Allocated") is not None:
            self.sink.add("host_counter", (ts, pid, f"{where}.memory_allocated_bytes", float(a["Total Allocated"])))
        if a.get("Total Reserved") is not None:
            self.sink.add("host_counter", (ts, pid, f"{where}.memory_reserved_bytes", float(a["Total Reserved"])))

    def overhead(self, ev: dict[str, Any]) -> None:
        start, end = self._times(ev)
        self.sink.add("overhead", (start, end, PENDING_PID, ev.get("tid"), ev.get("name", "")))

    # -- end ----------------------------------------------------------------------------------
    def _module_ranges(self) -> None:
        """Forward ranges of the ``nn.Module`` events, named by their nesting per thread (the
        profiler gives class and instance number, ``Linear_3``; the root keeps its class name)."""
        by_thread: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
        for pid, tid, start, end, label in self.modules:
            by_thread.setdefault((pid, tid), []).append((start, end, label))
        for (pid, tid), items in by_thread.items():
            items.sort(key=lambda x: (x[0], -x[1]))
            stack: list[tuple[int, str]] = []
            names = []
            for start, end, label in items:
                while stack and stack[-1][0] <= start:
                    stack.pop()
                name = f"{stack[-1][1]}.{label}" if stack else label.rsplit("_", 1)[0]
                stack.append((end, name))
                names.append(name)
            first = self.range_id + 1
            self.range_id += len(items)
            self.sink.add_block("nvtx_range", {
                "start_ns": np.array([x[0] for x in items], dtype=np.int64),
                "end_ns": np.array([x[1] for x in items], dtype=np.int64), "pid": pid, "tid": tid,
                "id": np.arange(first, self.range_id + 1, dtype=np.int64), "domain_id": 0,
                "name_id": np.array([self._name(n) for n in names], dtype=np.int64),
                "kind": "range", "source": "torch", "category": "forward",
            }, len(items))  # fmt: skip

    def finish(self, path: Path, events: int) -> dict[str, Any]:
        """Write what needs the whole trace (process, devices, modules, step marks); return ``meta``."""
        gpu = sum(self.cats[c] for c in ("kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"))
        if not gpu:
            found = ", ".join(f"{n:,} {c}" for c, n in self.cats.most_common(4)) or "no events"
            raise GpuscopeError(f"{path}: no GPU events (kernels, copies, sets) in this trace ({found}); "
                                "record it with ProfilerActivity.CUDA")
        pid = self.cpu_pids.most_common(1)[0][0] if self.cpu_pids else 0
        for table in GPU_TABLES:
            self.sink.execute(f"UPDATE {table} SET pid = ? WHERE pid = ?", [pid, PENDING_PID])
        self.sink.add("process", (pid, None, self.process_names.get(pid), None, None, self.first_ns, self.last_ns,
                                  "cupti", 0))
        for dev in self.header.get("deviceProperties") or []:
            self.sink.add("device", _device_row(pid, dev))
        self._module_ranges()
        if not self.profiler_steps:
            for opid, tid, end in self.optimizer_ends:
                self.range_id += 1
                self.sink.add("nvtx_range", (end, end, opid, tid, self.range_id, 0, self._name("step"), "mark",
                                             "torch", "step", None))
        return self._meta(path, events)

    def _meta(self, path: Path, events: int) -> dict[str, Any]:
        dist = self.header.get("distributedInfo") or {}
        lacks = {
            "cpu": "Python stack samples (cpu_hotspots): a PyTorch profiler trace has none",
            "host": "host and process CPU counters: a PyTorch profiler trace has none",
            "torch_backward": "per-module backward ranges: a PyTorch profiler trace has none",
            "nvtx": "NVTX ranges: a PyTorch profiler trace has record_function annotations instead "
                    "(imported as ranges of source kineto)",
        }
        if not self.with_shapes:
            lacks["torch_ops"] = ("operator input shapes (op_sum, FLOPs, roofline): the trace was recorded without "
                                  "record_shapes=True")
            lacks["torch-ops"] = lacks["torch_ops"]
        if not self.header.get("deviceProperties"):
            lacks["device"] = "device properties (the GPU's name and roofline ceilings): the trace has none"
        if not self.modules:
            lacks["torch"] = "PyTorch module ranges (layer_sum): the trace was recorded without with_modules=True"
        if not (self.cats["cuda_runtime"] or self.cats["Runtime"] or self.cats["cuda_driver"]):
            lacks["cuda_api"] = "CUDA API calls: the trace has none"
        source = {
            "format": "pytorch-profiler", "file": path.name, "events": events,
            "categories": dict(self.cats.most_common()),
            "profiler_steps": self.profiler_steps, "module_events": len(self.modules),
            "python_functions_not_imported": self.cats["python_function"] - len(self.modules),
        }
        meta: dict[str, Any] = {"imported_from": source, "not_recorded": lacks, "trace": ["cuda", "cuda-api"]}
        if "rank" in dist:
            meta["rank"] = dist.get("rank")
        if "world_size" in dist:
            meta["world_size"] = dist.get("world_size")
        if self.first_ns is not None:
            meta["wall_ns"] = self.last_ns - self.first_ns
        return meta


def _device(ev: dict[str, Any], a: dict[str, Any]) -> Any:
    dev = a.get("device")
    return dev if dev is not None else ev.get("pid")


def _stream(ev: dict[str, Any], a: dict[str, Any]) -> Any:
    stream = a.get("stream")
    return stream if stream is not None else ev.get("tid")


def _device_row(pid: int, d: dict[str, Any]) -> tuple[Any, ...]:
    warp = d.get("warpSize")
    threads = d.get("maxThreadsPerMultiprocessor")
    major, minor = d.get("computeMajor"), d.get("computeMinor")
    return (pid, d.get("id"), d.get("name"), f"{major}.{minor}" if major is not None else None, d.get("numSms"),
            d.get("totalGlobalMem"), None, None, None, d.get("maxThreadsPerBlock"),
            d.get("sharedMemPerBlockOptin") or d.get("sharedMemPerBlock"), d.get("sharedMemPerMultiprocessor"),
            d.get("regsPerMultiprocessor"), threads // warp if threads and warp else None, None, warp, None)


def import_kineto(path: Path, sink: ReportSink) -> dict[str, Any]:
    """Import the Kineto trace at ``path`` into ``sink``; return the report's ``meta`` items."""
    header = kineto_stream.read_header(path)
    if "traceEvents" not in header:
        raise GpuscopeError(f"{path}: not a PyTorch profiler trace (a JSON object without traceEvents)")
    importer = KinetoImporter(sink, header)
    counter = [0]
    if kineto_read is None:
        for ev in kineto_stream.events(path, counter):
            importer.event(ev)
    else:
        kineto_read.read_events(path, importer, counter, header)
    if not ("schemaVersion" in header or "deviceProperties" in header or importer.cats.keys() & {
            "kernel", "Kernel", "cpu_op", "Operator", "cuda_runtime", "Runtime"}):
        raise GpuscopeError(f"{path}: not a PyTorch profiler trace (its {counter[0]:,} events have no kernels, "
                            "operators or CUDA calls)")
    return importer.finish(path, counter[0])

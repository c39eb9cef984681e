"""Small hand-made reports for tests: kernels, API calls, memory operations and ranges, row by row.

The file is created by the project's ReportWriter (schema, meta, interned strings); the rows are
inserted directly, with every time in integer nanoseconds as the caller gives them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuscope.trace.report import Report
from gpuscope.trace.writer import ReportWriter


class ReportBuilder:
    """Builds a report file; ``open()`` finishes it and returns it opened."""

    def __init__(self, path: Path, pid: int = 100) -> None:
        self.path = path
        self.pid = pid
        self.writer = ReportWriter(path)
        self._correlation = 0
        self._configs: dict[str, int] = {}
        self._range_id = 0
        self.writer.con.execute(
            "INSERT INTO process (pid, ppid, start_ns, clock) VALUES (?, 1, 0, 'cupti')", [pid]
        )

    def _exec(self, sql: str, params: list[Any]) -> None:
        self.writer.con.execute(sql, params)

    def _config(self, name: str) -> int:
        cid = self._configs.get(name)
        if cid is None:
            cid = self._configs[name] = len(self._configs)
            sid = self.writer.intern(name)
            self._exec("INSERT INTO kernel_config (id, name_id, mangled_id) VALUES (?, ?, ?)", [cid, sid, sid])
        return cid

    def api(self, start: int, end: int, tid: int, name: str = "cudaLaunchKernel", pid: int | None = None) -> int:
        """Add a runtime API call; return its correlation id."""
        self._correlation += 1
        self._exec(
            "INSERT INTO api_call VALUES (?, ?, ?, ?, 'runtime', 0, ?, ?, 0)",
            [start, end, pid or self.pid, tid, self.writer.intern(name), self._correlation],
        )
        return self._correlation

    def kernel(self, name: str, start: int, end: int, *, tid: int | None = None, launch: int | None = None,
               queued: int | None = None, pid: int | None = None) -> None:
        """Add a kernel; with ``tid`` and ``launch`` also the cudaLaunchKernel call (1 µs) that launched it."""
        if tid is not None and launch is not None:
            corr = self.api(launch, launch + 1000, tid, pid=pid)
        else:
            self._correlation += 1
            corr = self._correlation
        self._exec(
            "INSERT INTO kernel (start_ns, end_ns, queued_ns, pid, device_id, context_id, stream_id, "
            "correlation_id, config_id) VALUES (?, ?, ?, ?, 0, 1, 7, ?, ?)",
            [start, end, queued, pid or self.pid, corr, self._config(name)],
        )

    def memcpy(self, start: int, end: int, *, tid: int | None = None, launch: int | None = None,
               kind: str = "HtoD", nbytes: int = 4096) -> None:
        """Add a memcpy, with the cudaMemcpyAsync call that launched it when ``tid`` and ``launch`` are given."""
        if tid is not None and launch is not None:
            corr = self.api(launch, launch + 1000, tid, name="cudaMemcpyAsync")
        else:
            self._correlation += 1
            corr = self._correlation
        self._exec(
            "INSERT INTO memcpy (start_ns, end_ns, pid, device_id, context_id, stream_id, correlation_id, "
            "copy_kind, bytes) VALUES (?, ?, ?, 0, 1, 7, ?, ?, ?)",
            [start, end, self.pid, corr, kind, nbytes],
        )

    def anchor(self, t: int, tid: int = 1, pid: int | None = None) -> int:
        """Add a launch anchor (a ``launch_call`` row) at ``t``; return its correlation id."""
        self._correlation += 1
        self._exec("INSERT INTO launch_call VALUES (?, ?, ?, ?, ?, ?)",
                   [t, t + 100, pid or self.pid, tid, self.writer.intern("cuDriverGetVersion"), self._correlation])
        return self._correlation

    def range(self, name: str, start: int, end: int | None, tid: int, *, source: str = "torch",
              category: str | None = None, kind: str = "range", domain: str = "", pid: int | None = None) -> None:
        """Add a range (``end`` None: it never ended) or, with ``kind='mark'``, a mark."""
        self._range_id += 1
        self._exec(
            "INSERT INTO nvtx_range VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
            [start, end, pid or self.pid, tid, self._range_id, self.writer.intern(domain),
             self.writer.intern(name), kind, source, category],
        )

    def mark(self, name: str, t: int, tid: int, *, source: str = "torch", category: str | None = "step") -> None:
        """Add a mark (a step boundary by default)."""
        self.range(name, t, t, tid, source=source, category=category, kind="mark")

    def open(self, **meta: Any) -> Report:
        """Finish the file and return it opened."""
        self.writer.close(**meta)
        return Report.open(self.path)


# The hand-made PyTorch training run of the layer, range and step tests: (name, launch time,
# launching thread, GPU start, GPU end, what it belongs to). Thread 1 runs the program, thread 2 is
# autograd's worker, thread 3 another thread. Times in ns.
TORCH_OPS = [
    ("init", 500, 1, 600, 620, "(not in a module)"),
    ("memcpy", 1500, 1, 3000, 3400, "DataLoader.__next__"),
    ("embed", 2500, 1, 10000, 10100, "Net forward"),
    ("gemm", 4000, 1, 10100, 10600, "Net.enc.fc forward"),
    ("relu", 5500, 1, 10600, 10700, "Net.enc forward"),
    ("gemm", 8000, 1, 10700, 11000, "Net.head forward"),
    ("fill", 11500, 2, 12000, 12050, "backward (autograd: thread 2 has no range open)"),
    ("gemm", 12500, 2, 13000, 13600, "Net.head backward"),
    ("gemm", 15000, 2, 13600, 14400, "Net.enc.fc backward"),
    ("relu_bwd", 17000, 2, 14400, 14520, "Net.enc backward"),
    ("accumulate", 18500, 2, 14500, 14560, "Net backward (overlaps relu_bwd on the GPU by 20 ns)"),
    ("fill2", 19500, 2, 14560, 14600, "backward (autograd)"),
    ("multi_tensor", 22000, 1, 23000, 23200, "SGD.step"),
    ("zero", 23700, 1, 24000, 24030, "SGD.zero_grad"),
    ("embed", 30500, 1, 31000, 31100, "Net forward, second call"),
    ("gemm", 33000, 1, 33000, 33300, "Net.head forward, second call (a range that never ended)"),
    ("tail", 41000, 3, 41000, 41010, "(not in a module), after the last step"),
]

# (name, start, end, thread, category)
TORCH_RANGES: list[tuple[str, int, int | None, int, str]] = [
    ("DataLoader.__next__", 1000, 2000, 1, "dataloader"),
    ("Net", 2000, 10000, 1, "forward"),
    ("Net.enc", 3000, 6000, 1, "forward"),
    ("Net.enc.fc", 3500, 5000, 1, "forward"),
    ("Net.head", 7000, 9000, 1, "forward"),
    ("backward", 11000, 20000, 1, "autograd"),
    ("Net", 11800, 19000, 2, "backward"),
    ("Net.head", 12000, 13000, 2, "backward"),
    ("Net.enc", 13000, 18000, 2, "backward"),
    ("Net.enc.fc", 14000, 16000, 2, "backward"),
    ("SGD.step", 21000, 23000, 1, "optimizer"),
    ("SGD.zero_grad", 23500, 24000, 1, "zero_grad"),
    ("Net", 30000, 31000, 1, "forward"),
    ("Net.head", 32000, None, 1, "forward"),
]
TORCH_STEP_MARKS = [23000, 40000]  # the ends of the two optimizer.step() calls


def torch_training(path: Path, api: bool = True) -> Report:
    """The run of TORCH_OPS and TORCH_RANGES, with step marks; with ``api`` its launches are API
    calls on their threads, otherwise kernels carry their launch time as ``queued_ns`` (and the
    memcpy has only its GPU start)."""
    b = ReportBuilder(path)
    for name, launch, tid, start, end, _ in TORCH_OPS:
        thread, at = (tid, launch) if api else (None, None)
        if name == "memcpy":
            b.memcpy(start, end, tid=thread, launch=at)
        else:
            b.kernel(name, start, end, tid=thread, launch=at, queued=None if api else launch)
    for name, begin, finish, tid, category in TORCH_RANGES:
        b.range(name, begin, finish, tid, source="torch", category=category)
    for t in TORCH_STEP_MARKS:
        b.mark("step", t, 1)
    return b.open()


def add_stack(builder: ReportBuilder, frames: list[tuple[str, int, str]], pid: int | None = None) -> int:
    """Add a Python stack (outermost frame first, each (file, line, function)); return its node id."""
    con = builder.writer.con
    pid = pid or builder.pid
    node = 0
    for file, line, func in frames:
        fid = con.execute("SELECT coalesce(max(id), 0) + 1 FROM cpu_frame WHERE pid = ?", [pid]).fetchone()[0]
        con.execute("INSERT INTO cpu_frame VALUES (?, ?, ?, ?, ?)",
                    [pid, fid, builder.writer.intern(file), line, builder.writer.intern(func)])
        nid = con.execute("SELECT coalesce(max(id), 0) + 1 FROM cpu_stack WHERE pid = ?", [pid]).fetchone()[0]
        con.execute("INSERT INTO cpu_stack VALUES (?, ?, ?, ?)", [pid, nid, node, fid])
        node = nid
    return node


def add_sync_site(builder: ReportBuilder, start: int, end: int, stack: int, api: str = "cudaStreamSynchronize",
                  tid: int = 1, correlation_id: int = 0) -> None:
    """Add a synchronizing CUDA call made from Python stack node ``stack``."""
    builder.writer.con.execute(
        "INSERT INTO sync_site VALUES (?, ?, ?, ?, ?, ?, ?)",
        [start, end, builder.pid, tid, builder.writer.intern(api), correlation_id, stack])


def add_torch_op(builder: ReportBuilder, name: str, start: int, end: int, tid: int, *, shapes: str = "[]",
                 dtypes: str = "[]", out_shapes: str = "[]", scalars: str = "{}", seq: int | None = None,
                 pid: int | None = None) -> None:
    """Add a PyTorch operator call (``shapes`` and the like as the JSON text the recorder stores)."""
    builder.writer.con.execute(
        "INSERT INTO torch_op VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [start, end, pid or builder.pid, tid, builder.writer.intern(name), seq, shapes, dtypes, out_shapes,
         scalars])


PROBES = (10, 35)  # probe_run's overhead probes start at the end of these steps


def probe_run(path: Path, off_ms: int, first_ms: int = 30) -> Report:
    """60 optimizer steps of 10 ms (step 1: ``first_ms``, warm-up where above 15 ms) on the CPU, with two overhead probes as
    the capture window writes them: collection off from the end of steps 10 and 35 for three steps,
    back on during the fourth; the probes' steps take ``off_ms``."""
    ms = 1_000_000
    b = ReportBuilder(path)
    b.range("Net", 0, 1 * ms, 1, category="forward")
    t, marks = 0, []
    for n in range(1, 61):
        in_probe = any(p < n <= p + 4 for p in PROBES)
        t += first_ms * ms if n == 1 else (off_ms * ms if in_probe else 10 * ms)
        marks.append(t)
        b.mark("step", t, 1)
    con = b.writer.con
    opened = 0
    for p in PROBES:
        reason = "process start" if p == PROBES[0] else f"end of overhead probe at step {PROBES[0] + 3}"
        con.execute("INSERT INTO capture_window VALUES (100, ?, ?, ?)",
                    [opened, marks[p - 1], f"{reason} to overhead probe at step {p}"])
        opened = marks[p + 2] + 100  # once the collectors are back on, after the mark that ended it
    con.execute("INSERT INTO capture_window VALUES (100, ?, ?, ?)",
                [opened, t + ms, f"end of overhead probe at step {PROBES[1] + 3} to process end"])
    return b.open(wall_ns=t + 2 * ms)

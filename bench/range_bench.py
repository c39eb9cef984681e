"""Time of the range reports (nvtx_sum, nvtx_gpu_proj_sum, layer_sum, step_sum) and of the
attribution they rest on, on a synthetic PyTorch-like report of about 1M kernels and 100k ranges.

The report imitates ``--trace torch``: a model of 41 modules (a root, 8 blocks of 4 layers) whose
forward ranges nest on thread 1 and backward ranges on thread 2 (autograd's worker), a
``loss.backward()`` range, an optimizer range with one kernel, a step mark and a zero_grad range
per step; every leaf layer launches the same number of kernels. With ``--no-api`` the kernels
carry only their queued time (no CUDA API calls, so no launching thread).

Run it from the repository root with the project's environment::

    .venv/bin/python bench/range_bench.py                 # 1M kernels, 100k ranges
    .venv/bin/python bench/range_bench.py --no-api --kernels 200000 --ranges 20000

Each step is timed once, in order, on one opened report (later steps reuse the tables the earlier
ones left on the connection, as ``gpuscope stats`` does).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from gpuscope.analysis.ops import attribution
from gpuscope.analysis.ranges.summaries import REPORTS
from gpuscope.trace.report import Report
from gpuscope.trace.writer import ReportWriter

MODULES = ["M"] + [f"M.b{i}" for i in range(8)] + [f"M.b{i}.l{j}" for i in range(8) for j in range(4)]
PID = 1


def _insert(w: ReportWriter, table: str, frame: pd.DataFrame) -> None:
    w.con.register("incoming", frame)
    cols = ", ".join(frame.columns)
    w.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM incoming")
    w.con.unregister("incoming")


def make(path: Path, kernels: int, ranges: int, api: bool) -> tuple[int, int]:
    """Write the synthetic report; return its numbers of kernels and ranges."""
    path.unlink(missing_ok=True)
    w = ReportWriter(path)
    name = {m: w.intern(m) for m in [*MODULES, "backward", "AdamW.step", "AdamW.zero_grad", "step"]}
    per_step = 2 * len(MODULES) + 3
    steps = max(ranges // per_step, 1)
    per_leaf = max(kernels // steps // (2 * 32), 1)
    rows: list[tuple[object, ...]] = []
    launches: list[tuple[int, int]] = []  # (time, thread)
    t = 1_000_000

    def add(module: str, start: int, tid: int, category: str) -> None:
        rows.append((start, t, PID, tid, len(rows), 0, name[module], "range", "torch", category, None))

    def tree(tid: int, category: str) -> None:
        nonlocal t
        root = t
        for i in range(8):
            block = t = t + 100
            for j in range(4):
                leaf = t = t + 100
                for _ in range(per_leaf):
                    launches.append((t, tid))
                    t += 1000
                add(f"M.b{i}.l{j}", leaf, tid, category)
            add(f"M.b{i}", block, tid, category)
        add("M", root, tid, category)
        t += 100

    for _ in range(steps):
        tree(1, "forward")
        call = t
        tree(2, "backward")
        add("backward", call, 1, "autograd")
        opt = t = t + 100
        launches.append((t, 1))
        t += 1000
        add("AdamW.step", opt, 1, "optimizer")
        rows.append((t, t, PID, 1, len(rows), 0, name["step"], "mark", "torch", "step", None))
        zero = t = t + 100
        t += 100
        add("AdamW.zero_grad", zero, 1, "zero_grad")
    at = np.array([x for x, _ in launches], dtype=np.int64)
    n = len(at)
    config_names = [w.intern(f"kernel_{i}") for i in range(50)]
    w.con.execute("INSERT INTO kernel_config (id, name_id, mangled_id) "
                  "SELECT i, ?[i + 1], ?[i + 1] FROM range(50) t(i)", [config_names, config_names])
    frame = pd.DataFrame({
        "start_ns": at + 5000, "end_ns": at + 5800, "queued_ns": at + 300, "submitted_ns": at + 400,
        "pid": PID, "device_id": 0, "context_id": 1, "stream_id": 7,
        "correlation_id": np.arange(1, n + 1), "config_id": np.arange(n) % 50,
    })  # fmt: skip
    _insert(w, "kernel", frame)
    if api:
        calls = pd.DataFrame({
            "start_ns": at, "end_ns": at + 900, "pid": PID, "tid": [tid for _, tid in launches],
            "domain": "runtime", "cbid": 211, "name_id": w.intern("cudaLaunchKernel"),
            "correlation_id": frame["correlation_id"], "return_value": 0,
        })  # fmt: skip
        _insert(w, "api_call", calls)
    table = pd.DataFrame(rows, columns=["start_ns", "end_ns", "pid", "tid", "id", "domain_id", "name_id",
                                        "kind", "source", "category", "color"])
    _insert(w, "nvtx_range", table)
    w.close()
    return n, int((table["kind"] == "range").sum())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", type=int, default=1_000_000)
    p.add_argument("--ranges", type=int, default=100_000)
    p.add_argument("--no-api", action="store_true", help="no CUDA API calls: launches without threads")
    p.add_argument("--report", type=Path, default=Path("/tmp/range_bench.gpuscope"))
    args = p.parse_args()
    t0 = time.perf_counter()
    n, r = make(args.report, args.kernels, args.ranges, api=not args.no_api)
    print(f"{args.report}: {n:,} kernels, {r:,} ranges, written in {time.perf_counter() - t0:.1f} s")
    with Report.open(args.report) as report:
        steps = [
            ("launch points", lambda: attribution.ops_table(report)),
            ("innermost range", lambda: attribution.innermost_table(report)),
            ("enclosing ranges", lambda: attribution.enclosing_table(report)),
            ("range tree", lambda: attribution.range_tree_table(report)),
            *((f"report {name}", (lambda fn=fn: fn(report))) for name, fn in REPORTS.items()),
        ]
        for label, step in steps:
            t0 = time.perf_counter()
            step()
            print(f"  {label:<26} {time.perf_counter() - t0:6.2f} s")


if __name__ == "__main__":
    main()

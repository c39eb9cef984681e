"""Cross-check of ``gpuscope import`` against Holistic Trace Analysis (HTA) on the shared Kineto traces.

For each trace: kernel counts and total kernel time per stream, and HTA's temporal breakdown (GPU
span, idle, compute and non-compute time), from HTA and from the gpuscope report the trace imports
to. HTA is not a gpuscope dependency: it runs in its own environment (``--hta-python``, a Python
with ``pip install HolisticTraceAnalysis``), in a subprocess of this script, which prints its
numbers as JSON (``--hta-side``).

HTA reads a trace two ways: parsed as it is (``Trace.parse_traces``), and as ``TraceAnalysis`` sees
it, keeping only GPU work launched by CPU calls up to the last ``ProfilerStep`` (here with
``include_last_profiler_step=True``; by default it also drops that step). Both are compared, the
second against the same selection made on the gpuscope report.

    python3 -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis
    PYTHONPATH=src python bench/hta_check.py --hta-python /tmp/hta/bin/python
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces" / "kineto"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


# -- HTA's side (runs in HTA's environment) ----------------------------------------------------------
def hta_numbers(path: str) -> dict[str, Any]:
    """HTA's numbers for one trace (µs, as HTA keeps them)."""
    import logging

    logging.disable(logging.WARNING)
    from hta.common.trace import Trace
    from hta.trace_analysis import TraceAnalysis

    t = Trace(trace_files={0: path}, trace_dir="")
    t.parse_traces()
    out: dict[str, Any] = {"raw": _per_stream(t.get_trace(0), t.symbol_table.get_sym_table())}
    try:
        a = TraceAnalysis(trace_files={0: path}, trace_dir="", include_last_profiler_step=True)
        out["analysis"] = _per_stream(a.t.get_trace(0), a.t.symbol_table.get_sym_table())
        row = a.get_temporal_breakdown(visualize=False).to_dict("records")[0]
        out["temporal"] = {k: float(row[k]) for k in ("idle_time(us)", "compute_time(us)", "non_compute_time(us)",
                                                       "kernel_time(us)")}
    except Exception as exc:  # noqa: BLE001 - HTA's own failure is a result here
        out["analysis_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


def _per_stream(df: Any, sym: list[str]) -> dict[str, Any]:
    cats = df["cat"].map(lambda i: sym[i])
    res: dict[str, Any] = {}
    for cat in GPU_CATS:
        sel = df[cats == cat]
        res[cat] = {str(int(s)): [int(len(g)), float(g["dur"].sum())] for s, g in sel.groupby("stream")}
    return res


# -- gpuscope's side ---------------------------------------------------------------------------------------
def ours(trace: Path, scratch: Path) -> dict[str, Any]:
    """gpuscope's numbers for one trace: the whole import, and HTA's selection of it (µs)."""
    from gpuscope.analysis.overview import busy_time
    from gpuscope.trace.importers import import_trace
    from gpuscope.trace.report import Report

    out = scratch / (trace.name + ".gpuscope")
    out.unlink(missing_ok=True)
    import_trace(trace, out)
    with Report.open(out) as r:
        res: dict[str, Any] = {"raw": {}}
        for cat, table in zip(GPU_CATS, ("kernel", "memcpy", "memset")):
            rows = r.sql(f"SELECT stream_id, count(*), sum(end_ns - start_ns) FROM {table} GROUP BY 1")
            res["raw"][cat] = {str(s): [int(n), ns / 1000] for s, n, ns in rows}
        busy = busy_time(r)
        res["whole"] = {"busy_us": sum(d.busy_ns for d in busy) / 1000, "span_us": sum(d.span_ns for d in busy) / 1000}
        # HTA's selection: with two ProfilerSteps or more, the GPU work whose launching call started
        # before the last ProfilerStep ended; all of it otherwise
        steps, last = r.sql("SELECT count(*), max(r.end_ns) FROM nvtx_range r JOIN string n ON n.id = r.name_id "
                            "WHERE n.value = 'step' AND r.source = 'kineto'")[0]
        cond = f"a.start_ns <= {int(last)}" if steps >= 2 else "true"
        if steps is not None:
            ops = r.sql(f"""
                SELECT g.stream_id, g.start_ns, g.end_ns, g.kind, g.name FROM (
                    SELECT k.stream_id, k.start_ns, k.end_ns, k.correlation_id, k.pid, 'kernel' AS kind, n.value AS name
                    FROM kernel k JOIN kernel_config c ON c.id = k.config_id JOIN string n ON n.id = c.name_id
                    UNION ALL SELECT stream_id, start_ns, end_ns, correlation_id, pid, 'gpu_memcpy', 'Memcpy' FROM memcpy
                    UNION ALL SELECT stream_id, start_ns, end_ns, correlation_id, pid, 'gpu_memset', 'Memset' FROM memset
                ) g WHERE EXISTS (SELECT 1 FROM api_call a WHERE a.correlation_id = g.correlation_id
                                  AND a.pid = g.pid AND {cond}) OR {steps} < 2""")
            sel: dict[str, Any] = {c: {} for c in GPU_CATS}
            for stream, s, e, kind, _ in ops:
                n, us = sel[kind].get(str(stream), [0, 0.0])
                sel[kind][str(stream)] = [n + 1, us + (e - s) / 1000]
            res["analysis"] = sel
            starts = np.array([o[1] for o in ops], dtype=np.int64)
            ends = np.array([o[2] for o in ops], dtype=np.int64)
            compute = np.array([o[3] == "kernel" and "nccl" not in o[4].lower() for o in ops])
            span = (ends.max() - starts.min()) / 1000 if len(ops) else 0.0
            busy_us = _union(starts, ends) / 1000
            comp_us = _union(starts[compute], ends[compute]) / 1000
            res["temporal"] = {"kernel_time(us)": span, "idle_time(us)": span - busy_us,
                               "compute_time(us)": comp_us, "non_compute_time(us)": busy_us - comp_us}
    out.unlink(missing_ok=True)
    return res


def _union(s: np.ndarray, e: np.ndarray) -> float:
    """Length of the union of the intervals [s, e)."""
    if not len(s):
        return 0.0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    island_end = np.maximum.reduceat(e, idx)
    return float((island_end - s[idx]).sum())


def _totals(per_stream: dict[str, list[float]]) -> tuple[int, float]:
    return sum(int(v[0]) for v in per_stream.values()), sum(v[1] for v in per_stream.values())


def _streams_equal(a: dict[str, list[float]], b: dict[str, list[float]], tol_us: float) -> bool:
    if set(a) != set(b):
        return False
    return all(a[s][0] == b[s][0] and abs(a[s][1] - b[s][1]) <= tol_us * max(1, a[s][0]) for s in a)


# HTA keeps times in whole µs: it moves an event's start up and its end down to whole µs (a kernel
# of 10.464 µs from 859.938 is 10 µs from 860), so its totals are up to 2 µs an event lower; the
# per-stream check allows that and no more.


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hta-python", help="a Python with HolisticTraceAnalysis installed")
    p.add_argument("--hta-side", nargs="*", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.hta_side is not None:
        print(json.dumps({t: hta_numbers(t) for t in args.hta_side}))
        return
    if not args.hta_python:
        raise SystemExit("give --hta-python: a Python with HolisticTraceAnalysis installed")
    traces = sorted(SHARED.glob("*.json.gz"))
    res = subprocess.run([args.hta_python, __file__, "--hta-side", *map(str, traces)], capture_output=True,
                         text=True, check=True)
    theirs = json.loads(res.stdout.strip().splitlines()[-1])
    print("| trace | kernels (ours / HTA) | kernel time ms (ours / HTA) | per stream | HTA's selection: kernels "
          "| GPU span ms | idle ms | compute ms | non-compute ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for trace in traces:
            h = theirs[str(trace)]
            try:
                o = ours(trace, Path(tmp))
            except Exception as exc:  # noqa: BLE001 - an import error is a result here
                print(f"| {trace.name} | gpuscope: {str(exc).split(': ', 1)[-1][:80]} | | | | | | | |")
                continue
            ok_, ot = _totals(o["raw"]["kernel"])
            hk, ht = _totals(h["raw"]["kernel"])
            same = "equal" if _streams_equal(o["raw"]["kernel"], h["raw"]["kernel"], 2.0) else "**differ**"
            cells = [trace.name.split("--", 1)[-1][:48], f"{ok_:,} / {hk:,}", f"{ot / 1e3:.3f} / {ht / 1e3:.3f}", same]
            if "temporal" in h and "temporal" in o:
                sk, _ = _totals(o["analysis"]["kernel"])
                hsk, _ = _totals(h["analysis"]["kernel"])
                cells.append(f"{sk:,} / {hsk:,}")
                for key in ("kernel_time(us)", "idle_time(us)", "compute_time(us)", "non_compute_time(us)"):
                    cells.append(f"{o['temporal'][key] / 1e3:.3f} / {h['temporal'][key] / 1e3:.3f}")
            else:
                cells += [h.get("analysis_error", "no ProfilerStep")[:60]] + [""] * 4
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())

"""Check a profiled multi-rank job (tests/device/workloads/dist4.py) against what each rank timed itself.

    python tests/device/dist4_truth.py REPORT TIMING_DIR [--kineto DIR] [--json OUT]

Per rank, from the report and from the rank's own CUDA event pairs (``TIMING_DIR/rankN.json``):

- **GEMM windows**: the job's five windows of 20 bf16 GEMMs, each queued behind a spin kernel: the
  report's kernels between that spin and the next (count, sum, first start to last end) against the
  event pair;
- **collectives**: each timed collective (queued behind a spin, after a barrier): the first NCCL kernel
  after its spin against its event pair; gpuscope's row for that kernel (``collectives()``): kind,
  algorithm, protocol, bytes, group size, and its bus bandwidth against the one nccl-tests' formula
  gives from the true bytes and the event time;
- **overlap** of communication with compute in the training loop: gpuscope's share (``rank_sum``)
  against the same share computed here from the kernels of a torch.profiler trace of the same job
  (``--kineto``: one ``rankN.json`` per rank), a capture by another tool;
- the per-rank steps gpuscope found against the step times the job measured.
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import gpuscope
from gpuscope.analysis.distributed.collectives import BUS_FACTOR, collectives
from gpuscope.analysis.distributed.summaries import rank_steps


def kernels(r, pid: int) -> pd.DataFrame:
    return r.df("SELECT k.start_ns, k.end_ns, n.value AS name FROM kernel k JOIN kernel_config c ON c.id = k.config_id "
                "JOIN string n ON n.id = c.name_id WHERE k.pid = ? ORDER BY k.start_ns", [pid])


def windows(k: pd.DataFrame) -> list[pd.DataFrame]:
    """The kernels after each spin kernel, up to the next spin (the job's timed windows, in order)."""
    spin = k[k["name"].str.contains("spin", case=False)]
    out = []
    starts = spin["start_ns"].to_list() + [None]
    for (_, s), nxt in zip(spin.iterrows(), starts[1:]):
        w = k[(k["start_ns"] >= s["end_ns"]) & ~k["name"].str.contains("spin", case=False)]
        out.append(w if nxt is None else w[w["start_ns"] < nxt])
    return out


def interval_union(s: np.ndarray, e: np.ndarray) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(zip(s.tolist(), e.tolist())):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def overlap_share(comm: list[tuple[int, int]], compute: list[tuple[int, int]]) -> float | None:
    """Share of the communication kernels' time during which a compute kernel ran (plain sweep)."""
    cu = interval_union(np.array([a for a, _ in compute]), np.array([b for _, b in compute])) if compute else []
    total = hidden = 0
    for a, b in comm:
        total += b - a
        for c, d in cu:
            if d <= a:
                continue
            if c >= b:
                break
            hidden += min(b, d) - max(a, c)
    return hidden / total if total else None


def kineto_overlap(path: Path, t0_us: float | None = None) -> dict:
    doc = json.loads(path.read_text())
    ev = [e for e in doc.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") == "kernel"]
    comm = [(int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)) for e in ev if "nccl" in e["name"].lower()]
    comp = [(int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)) for e in ev if "nccl" not in e["name"].lower()]
    return {"kernels": len(ev), "nccl_kernels": len(comm), "nccl_ms": sum(b - a for a, b in comm) / 1e6,
            "compute_ms": sum(b - a for a, b in comp) / 1e6, "overlap_share": overlap_share(comm, comp)}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("report")
    p.add_argument("timing_dir")
    p.add_argument("--kineto")
    p.add_argument("--json")
    a = p.parse_args()
    r = gpuscope.load(a.report)
    coll = collectives(r)
    per_step = rank_steps(r)
    out: dict = {"report": a.report, "ranks": []}
    for pid, rank in r.sql("SELECT pid, rank FROM rank ORDER BY rank"):
        t = json.loads(Path(a.timing_dir, f"rank{rank}.json").read_text())
        k = kernels(r, pid)
        ws = windows(k)
        n_coll = sum(len(c["event_ms"]) for c in t.get("collectives", []))
        coll_ws, gemm_ws = ws[:n_coll], ws[n_coll:]
        row: dict = {"rank": rank, "pid": pid, "mean_step_ms": t["mean_step_ms"], "collectives": [], "gemm_windows": []}
        mine = coll[coll["pid"] == pid].set_index("start_ns")
        i = 0
        for c in t.get("collectives", []):
            for ev in c["event_ms"]:
                w = coll_ws[i] if i < len(coll_ws) else k.iloc[0:0]
                i += 1
                nccl = w[w["name"].str.contains("nccl", case=False)].head(1)
                if not len(nccl):
                    row["collectives"].append({"kind": c["kind"], "event_ms": ev, "found": False})
                    continue
                s, e = int(nccl["start_ns"].iloc[0]), int(nccl["end_ns"].iloc[0])
                g = mine.loc[s] if s in mine.index else None
                if isinstance(g, pd.DataFrame):
                    g = g.iloc[0]
                kern_ms = (e - s) / 1e6
                truth_bus = c["bytes"] / (ev / 1e3) * BUS_FACTOR[c["kind"]](c["group_size"]) / 1e9
                gs_bytes = None if g is None or pd.isna(g["bytes"]) else float(g["bytes"])
                gs_n = None if g is None or pd.isna(g["group_size"]) else int(g["group_size"])
                gs_bus = (gs_bytes / (kern_ms / 1e3) * BUS_FACTOR[g["kind"]](gs_n) / 1e9
                          if gs_bytes and gs_n and g["kind"] in BUS_FACTOR else None)
                row["collectives"].append({
                    "kind": c["kind"], "group_ranks": c["group_ranks"], "bytes": c["bytes"], "event_ms": ev,
                    "found": True, "kernel": nccl["name"].iloc[0][:80], "kernel_ms": kern_ms,
                    "kernel_over_event": kern_ms / ev if ev else None,
                    "gpuscope": None if g is None else {
                        "kind": g["kind"], "algorithm": g["algorithm"], "protocol": g["protocol"], "bytes": gs_bytes,
                        "group_size": gs_n, "bus_GBps": gs_bus},
                    "truth_bus_GBps": truth_bus,
                    "bus_over_truth": gs_bus / truth_bus if gs_bus and truth_bus else None})
        for ev, w in zip(t.get("gemm_window_ms", []), gemm_ws):
            w = w.head(t.get("gemm_per_window", 20))
            span = (w["end_ns"].max() - w["start_ns"].min()) / 1e6 if len(w) else 0.0
            total = float((w["end_ns"] - w["start_ns"]).sum()) / 1e6
            row["gemm_windows"].append({"event_ms": ev, "kernels": int(len(w)), "sum_over_event": total / ev,
                                        "span_over_event": span / ev})
        steps = per_step[per_step["pid"] == pid]
        steady = steps[~steps["warmup"].astype(bool)]
        comm = float(steady["comm_ns"].sum())
        row["gpuscope_steps"] = int(len(steps))
        row["gpuscope_mean_step_ms"] = float(steady["duration_ns"].mean()) / 1e6 if len(steady) else None
        row["gpuscope_overlap_share"] = float(steady["overlap_ns"].sum()) / comm if comm else None
        # the same share from this report's raw kernels, in the steady steps, computed here
        if len(steady):
            lo, hi = int(steady["start_ns"].min()), int((steady["start_ns"] + steady["duration_ns"]).max())
            kk = k[(k["start_ns"] >= lo) & (k["start_ns"] < hi)]
            isn = kk["name"].str.contains("nccl", case=False)
            row["report_overlap_share"] = overlap_share(list(zip(kk[isn]["start_ns"], kk[isn]["end_ns"])),
                                                        list(zip(kk[~isn]["start_ns"], kk[~isn]["end_ns"])))
        if a.kineto and Path(a.kineto, f"rank{rank}.json").exists():
            row["kineto"] = kineto_overlap(Path(a.kineto, f"rank{rank}.json"))
        out["ranks"].append(row)
    text = json.dumps(out, indent=1, default=str)
    if a.json:
        Path(a.json).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

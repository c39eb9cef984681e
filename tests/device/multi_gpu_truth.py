"""Check a profiled NCCL job (tests/device/workloads/ddp_nccl.py) against the CUDA events each rank took.

    python tests/device/multi_gpu_truth.py REPORT TIMING_DIR [--json OUT]

Per rank: the five windows of 20 bf16 GEMMs the job timed with CUDA events (each queued behind a
``torch.cuda._sleep`` spin kernel, so a window is the kernels between one spin kernel and the next
thing after it), the report's kernels in each window (count, sum of durations, first start to last
end) against the event pair; and the five 16 MB all-reduces (the NCCL kernels after the training
loop, each after its barrier's) against theirs. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import gpuscope


def rank_windows(r, pid: int) -> dict:
    k = r.df(
        "SELECT k.start_ns, k.end_ns, k.stream_id, n.value AS name FROM kernel k "
        "JOIN kernel_config c ON c.id = k.config_id JOIN string n ON n.id = c.name_id "
        "WHERE k.pid = ? ORDER BY k.start_ns", [pid])
    spin = k[k["name"].str.contains("spin", case=False)]
    gemms = []
    for i, (_, s) in enumerate(spin.iterrows()):
        nxt = spin["start_ns"].iloc[i + 1] if i + 1 < len(spin) else None
        w = k[(k["start_ns"] >= s["end_ns"]) & ~k["name"].str.contains("spin", case=False)
              & ~k["name"].str.contains("nccl", case=False)]
        if nxt is not None:
            w = w[w["start_ns"] < nxt]
        w = w.head(20)  # the window's 20 GEMMs; what follows belongs to the program's end
        gemms.append({"kernels": int(len(w)), "sum_ms": float((w["end_ns"] - w["start_ns"]).sum()) / 1e6,
                      "span_ms": float(w["end_ns"].max() - w["start_ns"].min()) / 1e6 if len(w) else 0.0,
                      "names": sorted(set(w["name"].str.slice(0, 60)))})
    nccl = k[k["name"].str.contains("nccl", case=False)]
    # each timed all-reduce follows a barrier, itself a one-element all-reduce: the last ten NCCL
    # kernels before the GEMM windows alternate barrier, all-reduce
    last = nccl[nccl["start_ns"] < (spin["start_ns"].min() if len(spin) else 2**63)].tail(10).iloc[1::2]
    return {"gemm_windows": gemms, "all_reduce_kernel_ms": [float(d) / 1e6 for d in (last["end_ns"] - last["start_ns"])],
            "kernels_total": int(len(k)), "kernel_time_total_ms": float((k["end_ns"] - k["start_ns"]).sum()) / 1e6}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("report")
    p.add_argument("timing_dir")
    p.add_argument("--json")
    a = p.parse_args()
    r = gpuscope.load(a.report)
    ranks = r.sql("SELECT pid, rank FROM rank ORDER BY rank")
    out = {"report": a.report, "ranks": []}
    for pid, rank in ranks:
        t = json.loads(Path(a.timing_dir, f"rank{rank}.json").read_text())
        got = rank_windows(r, pid)
        rows = []
        for ev, w in zip(t["gemm_window_ms"], got["gemm_windows"]):
            rows.append({"event_ms": ev, **w, "sum_over_event": w["sum_ms"] / ev if ev else None,
                         "span_over_event": w["span_ms"] / ev if ev else None})
        out["ranks"].append({"rank": rank, "pid": pid, "windows": rows,
                             "all_reduce_event_ms": t["all_reduce_16MB_ms"],
                             "all_reduce_kernel_ms": got["all_reduce_kernel_ms"],
                             "kernels_total": got["kernels_total"],
                             "kernel_time_total_ms": got["kernel_time_total_ms"],
                             "mean_step_ms": t["mean_step_ms"]})
    text = json.dumps(out, indent=1)
    if a.json:
        Path(a.json).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

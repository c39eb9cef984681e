"""Checks of recorded reports against independent truths; run on the GPU machine by run_all.sh.

    python3 tests/device/check.py events REPORT TRUTH_JSON
    python3 tests/device/check.py torchprof REPORT TORCH_TRACE_JSON
    python3 tests/device/check.py crash REPORT MARKER_FILE
    python3 tests/device/check.py layers REPORT TORCH_TRACE_JSON[.gz] [WARMUP_STEPS]
    python3 tests/device/check.py sync REPORT LINES_JSON
    python3 tests/device/check.py graphs REPORT FACTS_JSON

Each prints a JSON result and exits non-zero when the check fails.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from typing import Any

import gpuscope

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def events(report_path: str, truth_path: str) -> dict[str, Any]:
    """Sum of kernel durations inside each CUDA-event-timed region vs the event time (2%)."""
    truth = json.load(open(truth_path))
    with gpuscope.load(report_path) as r:
        offsets = dict(r.sql("SELECT pid, clock_offset_ns FROM process"))
        (off,) = set(offsets.values())
        rows = []
        for t in truth:
            lo, hi = t["t0_monotonic_ns"] + off, t["t1_monotonic_ns"] + off
            n, total, first, last = r.sql(
                "SELECT count(*), sum(end_ns - start_ns), min(start_ns), max(end_ns) FROM kernel k "
                "JOIN kernel_config c ON c.id = k.config_id JOIN string s ON s.id = c.name_id "
                "WHERE start_ns >= ? AND end_ns <= ? AND s.value NOT LIKE '%spin_kernel%'", [lo, hi])[0]
            event_ns = t["event_ms"] * 1e6
            span = last - first
            rows.append({**t, "kernels": n, "kernel_sum_ns": total, "kernel_span_ns": span,
                         "ratio_sum_to_event": total / event_ns, "ratio_span_to_event": span / event_ns,
                         # The host fell behind the GPU: the region has idle gaps the events include.
                         "saturated": total >= 0.98 * span})
    saturated = [x for x in rows if x["saturated"]]
    ok = (
        len(saturated) >= len(rows) - 1
        and all(abs(x["ratio_sum_to_event"] - 1) <= 0.02 for x in saturated)
        and all(abs(x["ratio_span_to_event"] - 1) <= 0.02 for x in rows)
    )
    return {"check": "events", "ok": ok, "rows": rows}


def torchprof(report_path: str, trace_path: str) -> dict[str, Any]:
    """Per-kernel-name totals of gpuscope vs torch.profiler for the same program (5%)."""
    trace = json.load(open(trace_path))
    theirs: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for ev in trace["traceEvents"]:
        if ev.get("cat") == "kernel" and ev.get("ph") == "X":
            theirs[ev["name"]] += ev["dur"] * 1e3
            counts[ev["name"]] += 1
    with gpuscope.load(report_path) as r:
        ours = {name: (total, n) for name, total, n in r.sql(
            "SELECT s.value, sum(k.end_ns - k.start_ns), count(*) FROM kernel k "
            "JOIN kernel_config c ON c.id = k.config_id JOIN string s ON s.id = c.name_id GROUP BY 1")}
    grand = sum(t for t, _ in ours.values())
    rows = []
    for name in sorted(set(ours) | set(theirs), key=lambda n: -ours.get(n, (0, 0))[0]):
        o, on = ours.get(name, (0, 0))
        t = theirs.get(name, 0.0)
        rows.append({"name": name[:120], "gpuscope_ns": o, "gpuscope_n": on, "torch_ns": round(t),
                     "torch_n": counts.get(name, 0), "share": o / grand if grand else 0,
                     "rel_diff": (o - t) / t if t else None})
    major = [x for x in rows if x["share"] >= 0.005]
    ok = bool(major) and all(x["rel_diff"] is not None and abs(x["rel_diff"]) <= 0.05 for x in major)
    total_t = sum(theirs.values())
    return {"check": "torchprof", "ok": ok, "total_gpuscope_ns": grand, "total_torch_ns": total_t,
            "total_rel_diff": (grand - total_t) / total_t if total_t else None,
            "names_gpuscope": len(ours), "names_torch": len(theirs), "rows": rows}


def crash(report_path: str, marker_path: str) -> dict[str, Any]:
    """The report of a program that ended abruptly holds its kernels up to ~1 s before the end."""
    last_mono = int(open(marker_path).read())
    with gpuscope.load(report_path) as r:
        off = r.sql("SELECT clock_offset_ns FROM process ORDER BY start_ns LIMIT 1")[0][0]
        n, last_end = r.sql("SELECT count(*), max(end_ns) FROM kernel")[0]
        meta = r.meta
    gap_s = (last_mono + off - last_end) / 1e9 if last_end else None
    ok = n > 0 and gap_s is not None and gap_s <= 1.0
    return {"check": "crash", "ok": ok, "kernels": n, "gap_s": gap_s,
            "exit_code": meta.get("exit_code"), "exit_signal": meta.get("exit_signal"),
            "status": meta.get("status")}


def layers(report_path: str, trace_path: str, skip_steps: str = "3") -> dict[str, Any]:
    """Kernels per module and phase, gpuscope vs torch.profiler (same program, separate runs).

    torch.profiler's attribution (tests/device/torch_truth.py) comes from its Python module events
    and autograd sequence numbers; its module instances are matched to gpuscope's qualified names
    by the order of calls within a step. gpuscope counts the kernels launched after its first
    ``skip_steps`` steps (the profiled run's warm-up), per step, like torch.profiler's window.
    Parameterless modules have no backward range in gpuscope, so torch.profiler's backward kernels
    of those are counted to their parent module.
    """
    import torch_truth

    from gpuscope.analysis.ops.attribution import ops_table
    from gpuscope.analysis.ranges.layers import _owned
    from gpuscope.analysis.steps.source import step_source

    truth = torch_truth.kernel_counts(trace_path)
    calls = torch_truth.module_calls(trace_path)
    with gpuscope.load(report_path) as r:
        marks = [t for (t,) in r.sql("SELECT start_ns FROM nvtx_range WHERE source = 'torch' "
                                     "AND category = 'step' ORDER BY start_ns")]
        cut = marks[int(skip_steps) - 1]
        steps = len(marks) - int(skip_steps)
        fwd = [n for (n,) in r.sql("SELECT s.value FROM nvtx_range g JOIN string s ON s.id = g.name_id "
                                   "WHERE g.source = 'torch' AND g.category = 'forward' AND g.start_ns > ? "
                                   "ORDER BY g.start_ns", [marks[-2]])]
        has_backward = {n for (n,) in r.sql("SELECT DISTINCT s.value FROM nvtx_range g JOIN string s "
                                            "ON s.id = g.name_id WHERE g.category = 'backward'")}
        owned = _owned(r, step_source(r))
        by_kind = dict(r.sql(f"SELECT coalesce(row_kind, 'outside'), sum(d) FROM ({owned}) WHERE in_step GROUP BY 1"))
        from gpuscope.analysis.steps.table import step_sum

        busy = sum(row[4] for row in step_sum(r).rows if row[1].isdigit())
        ours = {(name, cat): n for name, cat, n in r.sql(
            f"SELECT o.row_name, o.category, count(*) FROM ({owned}) o JOIN {ops_table(r)} l USING (op_id) "
            f"WHERE o.kind = 'kernel' AND l.launch_ns > ? AND l.launch_ns <= ? GROUP BY ALL", [cut, marks[-1]])}
    per_step = len(calls) // 5 if calls else 0
    label_to_name = dict(zip(calls[:per_step], fwd))
    profiled_steps = len(calls) // per_step if per_step else 0
    theirs: dict[tuple[str, str], float] = defaultdict(float)
    for phase in ("forward", "backward"):
        for label, n in truth[phase].items():
            name = label_to_name.get(label, label)
            if phase == "backward":
                while name not in has_backward and "." in name:
                    name = name.rsplit(".", 1)[0]
            theirs[(name, phase)] += n / profiled_steps
    rows = []
    for key in sorted(set(theirs) | {k for k in ours if k[1] in ("forward", "backward")}):
        mine = ours.get(key, 0) / steps
        rows.append({"module": key[0], "phase": key[1], "gpuscope_per_step": mine,
                     "torch_per_step": theirs.get(key, 0.0)})
    mismatched = [x for x in rows if abs(x["gpuscope_per_step"] - x["torch_per_step"]) > 1e-9]
    in_modules = sum(x["gpuscope_per_step"] for x in rows)
    layer_time = sum(by_kind.values())
    return {"check": "layers",
            "ok": not mismatched and len(label_to_name) == per_step > 0 and abs(layer_time / busy - 1) <= 0.05,
            "step_gpu_busy_ns": busy, "layer_gpu_self_ns_by_kind": by_kind,
            "layers_over_step_busy": layer_time / busy,
            "modules_over_step_busy": by_kind.get("module", 0) / busy,
            "modules_matched": len(label_to_name), "rows": rows, "mismatched": mismatched,
            "gpuscope_kernels_per_step_in_modules": in_modules,
            "torch_kernels_per_step_in_modules": sum(x["torch_per_step"] for x in rows),
            "gpuscope_other_per_step": {f"{k[0]} [{k[1]}]": v / steps for k, v in ours.items()
                                        if k[1] not in ("forward", "backward")},
            "torch_unattributed_per_step": {k: v / profiled_steps for k, v in truth["unattributed"].items()}}


def sync(report_path: str, lines_path: str) -> dict[str, Any]:
    """sync_sum shows the ``.item()`` and ``nonzero`` lines; their waits match the GPU timeline.

    For each synchronizing call, the GPU work it waited for is the time from the call's start to
    the end of the last GPU operation that finished before the call returned (0 when the GPU was
    already idle). Per line, the host waits must add up to that GPU time within 5%. The GPU idle
    time after each call (until the next GPU operation starts) is reported too: it is what the
    synchronization costs the GPU.
    """
    from gpuscope.analysis.ops.sync import sync_site_frame, sync_sum

    lines = json.load(open(lines_path))
    base = os.path.basename(lines["file"])
    want = {f"{base}:{lines['item']}": "item", f"{base}:{lines['nonzero']}": "nonzero"}
    with gpuscope.load(report_path) as r:
        table = sync_sum(r)
        sites = sync_site_frame(r)
        ends = r.df("SELECT start_ns, end_ns FROM kernel UNION ALL SELECT start_ns, end_ns FROM memcpy "
                    "UNION ALL SELECT start_ns, end_ns FROM memset ORDER BY end_ns")
    import numpy as np

    end_sorted = ends["end_ns"].to_numpy()
    starts_sorted = np.sort(ends["start_ns"].to_numpy())
    per_line: dict[str, dict[str, float]] = {}
    for loc, start, end, wait in zip(sites["location"], sites["start_ns"], sites["end_ns"], sites["wait_ns"]):
        key = os.path.basename(loc.rsplit(":", 1)[0]) + ":" + loc.rsplit(":", 1)[1]
        if key not in want:
            continue
        i = np.searchsorted(end_sorted, end, side="right") - 1
        drained = max(int(end_sorted[i]) - int(start), 0) if i >= 0 else 0
        j = np.searchsorted(starts_sorted, end, side="left")
        idle_after = int(starts_sorted[j]) - int(end) if j < len(starts_sorted) else 0
        d = per_line.setdefault(want[key], {"calls": 0, "wait_ns": 0, "gpu_drain_ns": 0, "gpu_idle_after_ns": 0})
        d["calls"] += 1
        d["wait_ns"] += int(wait)
        d["gpu_drain_ns"] += drained
        d["gpu_idle_after_ns"] += idle_after
    for d in per_line.values():
        d["wait_over_drain"] = d["wait_ns"] / d["gpu_drain_ns"] if d["gpu_drain_ns"] else None
    shown = {rec["Location"] for rec in table.records()}
    ok = (all(any(s.endswith(k) for s in shown) for k in want) and set(per_line) == {"item", "nonzero"}
          and sum(d["wait_ns"] for d in per_line.values()) > 0
          and abs(sum(d["wait_ns"] for d in per_line.values())
                  / max(sum(d["gpu_drain_ns"] for d in per_line.values()), 1) - 1) <= 0.05)
    return {"check": "sync", "ok": ok, "lines": want, "per_line": per_line, "sync_sum": table.records()[:8]}


def graphs(report_path: str, facts_path: str) -> dict[str, Any]:
    """Kernels of CUDA graph replays are attributed to the range around the replay."""
    from gpuscope.analysis.ops.attribution import innermost

    facts = json.load(open(facts_path))
    with gpuscope.load(report_path) as r:
        ops = innermost(r)
        graph_ids = r.df("SELECT correlation_id, graph_id, queued_ns FROM kernel")
    in_graph = graph_ids["graph_id"].fillna(0) != 0
    n_graph = int(in_graph.sum())
    kernels = ops[ops["kind"] == "kernel"]
    by_range = kernels.groupby(kernels["range_name"].fillna("(none)")).size().to_dict()
    steps = facts["steps"]
    queued_zero = int((graph_ids.loc[in_graph, "queued_ns"].fillna(0) == 0).sum())
    # every kernel of a replay inside "replay", the one eager kernel of each step inside "eager"
    ok = n_graph > 0 and n_graph % steps == 0 and by_range.get("replay", 0) == n_graph \
        and by_range.get("eager", 0) == steps
    return {"check": "graphs", "ok": ok, "graph_kernels": n_graph, "kernels_per_replay": n_graph / steps,
            "kernels_by_innermost_range": by_range, "graph_kernels_without_queued_time": queued_zero}


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    result = {"events": events, "torchprof": torchprof, "crash": crash, "layers": layers, "sync": sync,
              "graphs": graphs}[kind](*rest)
    print(json.dumps(result, indent=1, default=str))
    sys.exit(0 if result["ok"] else 1)

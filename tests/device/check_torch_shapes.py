"""Check the operator samples (``--trace torch-shapes``) of a GPU run against every operator; run on the GPU machine.

    python3 tests/device/check_torch_shapes.py SAMPLED FULL [--timing-with T.json --timing-without T.json]

SAMPLED is a workload (``workloads/transformer.py``, ``mlp.py``) profiled with the default collectors
(``torch-shapes`` among them); FULL the same workload and arguments profiled with ``torch-ops`` added,
where every kernel's work comes from its own operator. Checks:

- SAMPLED has sample windows, and its operators lie inside them;
- per kernel name, the launches with work, and the mean FLOPs and bytes per launch, agree with FULL
  (within 1%) for every name above 0.5% of kernel time in FULL;
- the share of kernel time with work is at least FULL's less 2 points;
- the roofline's bound classes per kernel name (of its points with work) agree for those names.

With the step timings (``--timing-out`` of the workload) of SAMPLED and of the same run without
``torch-shapes``, it reports the cost of sampling (median step ratio). Prints a JSON result; exits
non-zero when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import pandas as pd

import gpuscope
from gpuscope.analysis.roofline.work import carried_summary
from gpuscope.analysis.roofline.work.kernels import kernel_work
from gpuscope.analysis.roofline.points import kernel_points

MIN_SHARE = 0.005
TOLERANCE = 0.01


def _per_name(path: str) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Per kernel name: launches, launches with work, time, mean FLOPs and bytes per launch; the points;
    and facts of the report."""
    with gpuscope.load(path) as r:
        work = kernel_work(r)
        points = kernel_points(r).groupby("name")["bound"].agg(lambda s: "+".join(sorted(set(s) - {"unknown"})))
        facts: dict[str, Any] = {"windows": r.df("SELECT * FROM torch_op_window").to_dict("records"),
                                 "operators": r.count("torch_op")}
        if facts["windows"]:
            (outside,) = r.sql("""SELECT count(*) FROM torch_op t WHERE NOT EXISTS (SELECT 1 FROM torch_op_window w
                                  WHERE w.pid = t.pid AND t.start_ns >= w.start_ns
                                  AND t.start_ns <= coalesce(w.end_ns, 9223372036854775807))""")[0]
            facts["operators_outside_windows"] = int(outside)
            c = carried_summary.summary(r)
            facts["carried"] = c.__dict__ if c is not None else None
            facts["note"] = carried_summary.note(r)
    work["known"] = work["flops"].notna()
    g = work.groupby("name")
    table = pd.DataFrame({
        "launches": g.size(), "with_work": g["known"].sum(), "time_ns": g["time_ns"].sum(),
        "flops_per_launch": g["flops"].mean(), "bytes_per_launch": g["bytes"].mean(),
        "sources": g["source"].agg(lambda s: ",".join(sorted(set(s.dropna())))),
    })
    facts["known_share"] = float(work.loc[work["known"], "time_ns"].sum() / max(work["time_ns"].sum(), 1))
    return table, points.to_frame("bound"), facts


def _close(a: float, b: float) -> bool:
    if a != a or b != b:
        return a != a and b != b
    return abs(a - b) <= TOLERANCE * max(abs(a), abs(b), 1.0)


def check(sampled: str, full: str, timing_with: str | None, timing_without: str | None) -> dict[str, Any]:
    s, s_points, s_facts = _per_name(sampled)
    f, f_points, f_facts = _per_name(full)
    big = f[f["time_ns"] >= MIN_SHARE * f["time_ns"].sum()].index
    mismatches = []
    for name in big:
        if name not in s.index:
            mismatches.append({"name": name, "why": "not in the sampled run"})
            continue
        a, b = s.loc[name], f.loc[name]
        why = []
        if a["with_work"] / a["launches"] < b["with_work"] / b["launches"] - 1e-9:
            why.append(f"launches with work {a['with_work']}/{a['launches']} against {b['with_work']}/{b['launches']}")
        if not _close(a["flops_per_launch"], b["flops_per_launch"]):
            why.append(f"FLOPs per launch {a['flops_per_launch']:.4g} against {b['flops_per_launch']:.4g}")
        if not _close(a["bytes_per_launch"], b["bytes_per_launch"]):
            why.append(f"bytes per launch {a['bytes_per_launch']:.4g} against {b['bytes_per_launch']:.4g}")
        bound_a = s_points["bound"].get(name)
        bound_b = f_points["bound"].get(name)
        if bound_a != bound_b:
            why.append(f"bound {bound_a} against {bound_b}")
        if why:
            mismatches.append({"name": name[:120], "why": "; ".join(why), "sources": a["sources"]})
    result: dict[str, Any] = {
        "check": "torch_shapes",
        "sampled": s_facts,
        "full": {"operators": f_facts["operators"], "known_share": f_facts["known_share"]},
        "kernel_names_checked": len(big),
        "mismatches": mismatches[:20],
    }
    if timing_with and timing_without:
        with_s = json.load(open(timing_with))["median_step_s"]
        without_s = json.load(open(timing_without))["median_step_s"]
        result.update(step_ms_with=with_s * 1e3, step_ms_without=without_s * 1e3, step_ratio=with_s / without_s)
    result["ok"] = (bool(s_facts["windows"]) and s_facts.get("operators_outside_windows") == 0 and len(big) > 0
                    and not mismatches and s_facts["known_share"] >= f_facts["known_share"] - 0.02)
    return result


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sampled")
    p.add_argument("full")
    p.add_argument("--timing-with")
    p.add_argument("--timing-without")
    a = p.parse_args()
    out = check(a.sampled, a.full, a.timing_with, a.timing_without)
    print(json.dumps(out, indent=1, default=str))
    sys.exit(0 if out["ok"] else 1)

"""Check PyTorch operator records (``--trace torch-ops``) of a GPU training run; run on the GPU machine.

    python3 tests/device/check_torch_ops.py REPORT [--timing-with T.json --timing-without T.json]

REPORT is ``workloads/mlp.py`` (or ``transformer.py``) profiled with ``-t cuda,nvtx,torch,torch-ops``
(``cuda-api`` may be added). Between the first and the last step mark (the first step is warm-up):

- every kernel is attributed to a PyTorch operator (op_kernels_table);
- every ``aten::addmm`` / ``aten::mm`` call launched at least one kernel;
- backward operators were recorded (``threshold_backward``, ``mm``), with autograd sequence numbers
  that match forward ``addmm`` calls.

With the step timings (``--timing-out`` of the workload) of the same run with and without
``torch-ops``, it also reports the cost per operator. Prints a JSON result; exits non-zero when a
check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

import gpuscope
from gpuscope.analysis.ops.attribution import innermost_table, ops_table, ranges_table
from gpuscope.analysis.ranges.operators import op_kernels_table, torch_ops_table


def check(report_path: str, timing_with: str | None, timing_without: str | None) -> dict[str, Any]:
    with gpuscope.load(report_path) as r:
        marks = [t for (t,) in r.sql("SELECT start_ns FROM nvtx_range WHERE source = 'torch' AND category = 'step' "
                                     "ORDER BY start_ns")]
        lo, hi = (marks[0], marks[-1]) if len(marks) >= 2 else (0, 2**62)
        steps = max(len(marks) - 1, 1)
        calls, ops, owner = torch_ops_table(r), ops_table(r), op_kernels_table(r)
        kernels = r.df(f"""
            SELECT o.op_id, s.value AS kernel, w.torch_op_id, t.name AS op
            FROM {owner} w JOIN {ops} o USING (op_id) JOIN string s ON s.id = o.name_id
            LEFT JOIN {calls} t USING (torch_op_id)
            WHERE o.kind = 'kernel' AND o.launch_ns > ? AND o.launch_ns <= ?""", [lo, hi])
        lost = kernels[kernels["torch_op_id"].isna()]
        context = {}
        if len(lost):  # the PyTorch range around each unattributed kernel, to see where it came from
            inner = innermost_table(r, sources=("torch",))
            context = dict(Counter(n for (n,) in r.sql(f"""
                SELECT coalesce(s.value, '(no range)') FROM {ops} o LEFT JOIN {inner} i USING (op_id)
                LEFT JOIN {ranges_table(r)} g ON g.rid = i.rid LEFT JOIN string s ON s.id = g.name_id
                WHERE o.op_id IN ({','.join(str(int(x)) for x in lost['op_id'])})""")))
        in_steps = r.df(f"SELECT * FROM {calls} WHERE start_ns > ? AND end_ns <= ?", [lo, hi])
        per_call = Counter(int(x) for x in kernels["torch_op_id"].dropna())
        gemms = in_steps[in_steps["name"].isin(["aten::addmm", "aten::mm"])]
        gemms_without = [(n, s) for i, n, s in zip(gemms["torch_op_id"], gemms["name"], gemms["shapes"])
                         if per_call[int(i)] == 0]
        forward_tids = set(in_steps.loc[in_steps["name"] == "aten::addmm", "tid"])
        backward = in_steps[in_steps["name"].isin(["aten::threshold_backward", "aten::mm"])]
        addmm_seqs = set(in_steps.loc[in_steps["name"] == "aten::addmm", "seq"].dropna())
        mm_seqs = set(in_steps.loc[in_steps["name"] == "aten::mm", "seq"].dropna())
        collector = r.df("SELECT records, failed_records, detail FROM collector WHERE name = 'torch-ops'")
        diagnostics = [m for (m,) in r.sql("SELECT message FROM diagnostic WHERE message LIKE '%operator%'")]
    result: dict[str, Any] = {
        "check": "torch_ops",
        "steps": steps,
        "kernels_in_steps": len(kernels),
        "kernels_without_operator": len(lost),
        "kernels_without_operator_by_name": dict(Counter(lost["kernel"]).most_common(10)),
        "torch_range_of_those": context,
        "operators_per_step": len(in_steps) / steps,
        "kernels_per_operator_name": dict(Counter(kernels["op"].dropna()).most_common(15)),
        "gemm_calls": len(gemms),
        "gemm_calls_without_kernels": gemms_without[:10],
        "addmm_shapes": sorted(set(in_steps.loc[in_steps["name"] == "aten::addmm", "shapes"]))[:5],
        "forward_threads": sorted(int(t) for t in forward_tids),
        "backward_threads": sorted(int(t) for t in set(backward["tid"])),
        "backward_calls": len(backward),
        "mm_seqs_matching_addmm": len(mm_seqs & addmm_seqs), "mm_seqs": len(mm_seqs),
        "collector": collector.to_dict("records"),
        "diagnostics": diagnostics,
    }
    if timing_with and timing_without:
        with_s = json.load(open(timing_with))["median_step_s"]
        without_s = json.load(open(timing_without))["median_step_s"]
        result.update(step_ms_with=with_s * 1e3, step_ms_without=without_s * 1e3,
                      step_ratio=with_s / without_s,
                      us_per_operator=(with_s - without_s) / max(result["operators_per_step"], 1) * 1e6)
    result["ok"] = (len(kernels) > 0 and len(lost) == 0 and len(gemms) > 0 and not gemms_without
                    and len(backward) > 0 and bool(mm_seqs) and mm_seqs <= addmm_seqs
                    and int(collector["failed_records"].sum()) == 0)
    return result


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report")
    p.add_argument("--timing-with")
    p.add_argument("--timing-without")
    a = p.parse_args()
    out = check(a.report, a.timing_with, a.timing_without)
    print(json.dumps(out, indent=1, default=str))
    sys.exit(0 if out["ok"] else 1)

"""Capture ranges on a GPU: the kernels of exactly the asked steps, against a full run of the same program.

Run from the repository root on the GPU machine (gpuscope importable, e.g. PYTHONPATH=src):

    python3 tests/device/check_capture_range.py --out /tmp/gpuscope-device/capture

It profiles workloads/capture_steps.py (the launch-bound MLP, one optimizer step per step):

- ``full``: the whole run of 30 steps: the truth, per step, by step_sum;
- ``steps``: ``--steps 10-20``: step_sum must list steps 10 to 20 with the full run's kernel count
  and kernel names for each, and nothing else may be in the report;
- ``profiler_api``: ``--capture-range=cudaProfilerApi`` around steps 12 to 16
  (torch.cuda.profiler.start/stop): the kernels of those five steps, one capture window;
- ``nvtx``: ``--capture-range=nvtx --nvtx-capture backward`` on workloads/mlp.py --nvtx
  (torch.cuda.nvtx ranges): the kernels launched inside the backward ranges of a full run, and the
  backward ranges themselves as NVTX records from CUPTI;
- ``inprocess``: ``with gpuscope.profile()`` over steps 5 to 9 of a process that initialised CUDA
  before (not under gpuscope profile): the kernels of those five steps.

Prints one JSON document; exits 1 when a check fails. ``trimmed`` shows how many records CUPTI
delivered from outside the windows (turning collection on and off is not instantaneous).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any

import gpuscope
from gpuscope.analysis.attribution import ops_table
from gpuscope.analysis.steps import op_steps_table, step_source, step_sum

HERE = os.path.dirname(os.path.abspath(__file__))
WL = os.path.join(HERE, "workloads")
STEPS = 30


def _gs(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "gpuscope", "profile", "--force-overwrite", *args], check=True,
                   timeout=300)


def _per_step(path: str) -> tuple[dict[int, int], dict[int, Counter[str]]]:
    """Kernels per step (step_sum) and kernel names per step (the operations launched in each)."""
    with gpuscope.load(path) as r:
        counts = {int(row[1]): int(row[6]) for row in step_sum(r).rows if str(row[1]).isdigit()}
        names: dict[int, Counter[str]] = {}
        source = step_source(r)
        if source.kind is not None:
            for step, name in r.sql(
                    f"""SELECT x.step, s.value FROM {op_steps_table(r, source)} x JOIN {ops_table(r)} o USING (op_id)
                        JOIN string s ON s.id = o.name_id WHERE o.kind = 'kernel'"""):
                names.setdefault(int(step), Counter())[name] += 1
    return counts, names


def _kernel_names(path: str) -> tuple[Counter[str], dict[str, Any]]:
    with gpuscope.load(path) as r:
        names = Counter(n for (n,) in r.sql("SELECT s.value FROM kernel k JOIN kernel_config c ON c.id = "
                                             "k.config_id JOIN string s ON s.id = c.name_id"))
        facts = {"windows": r.sql("SELECT start_ns, end_ns, reason FROM capture_window ORDER BY start_ns"),
                 "trimmed": r.meta.get("capture_trimmed", {}), "devices": r.count("device"),
                 "diagnostics": [m for (m,) in r.sql("SELECT DISTINCT message FROM diagnostic")]}
    return names, facts


def _sum(names: dict[int, Counter[str]], steps: range) -> Counter[str]:
    out: Counter[str] = Counter()
    for s in steps:
        out += names.get(s, Counter())
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="/tmp/gpuscope-device/capture")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    out = lambda name: os.path.join(args.out, name)  # noqa: E731
    workload = os.path.join(WL, "capture_steps.py")
    results: dict[str, Any] = {}

    _gs("-o", out("full"), workload, "--steps", str(STEPS))
    full_counts, full_names = _per_step(out("full.gpuscope"))
    results["full"] = {"steps": len(full_counts), "kernels_per_step": full_counts}

    _gs("-o", out("steps"), "--steps", "10-20", workload, "--steps", str(STEPS))
    counts, names = _per_step(out("steps.gpuscope"))
    all_names, facts = _kernel_names(out("steps.gpuscope"))
    want = range(10, 21)
    results["steps"] = {
        "ok": sorted(counts) == list(want)
        and all(counts[s] == full_counts.get(s) for s in want)
        and all(names.get(s) == full_names.get(s) for s in want)
        and all_names == _sum(full_names, want),
        "kernels_per_step": counts, "kernels": sum(all_names.values()),
        "expected_kernels": sum(_sum(full_names, want).values()), **facts}

    _gs("-o", out("profiler_api"), "--capture-range=cudaProfilerApi", workload, "--steps", str(STEPS),
        "--profiler-start", "12", "--profiler-stop", "16")
    all_names, facts = _kernel_names(out("profiler_api.gpuscope"))
    expected = _sum(full_names, range(12, 17))
    results["profiler_api"] = {
        "ok": all_names == expected and len(facts["windows"]) == 1
        and facts["windows"][0][2] == "cudaProfilerStart to cudaProfilerStop",
        "kernels": sum(all_names.values()), "expected_kernels": sum(expected.values()), **facts}

    mlp = os.path.join(WL, "mlp.py")
    _gs("-o", out("nvtx_full"), mlp, "--steps", "10", "--warmup", "0", "--nvtx")
    _gs("-o", out("nvtx"), "--capture-range=nvtx", "--nvtx-capture", "backward", mlp, "--steps", "10",
        "--warmup", "0", "--nvtx")
    with gpuscope.load(out("nvtx_full.gpuscope")) as r:
        expected = Counter(n for (n,) in r.sql(
            f"""SELECT s.value FROM {ops_table(r)} o JOIN string s ON s.id = o.name_id
                WHERE o.kind = 'kernel' AND EXISTS (
                    SELECT 1 FROM nvtx_range g JOIN string n ON n.id = g.name_id
                    WHERE n.value = 'backward' AND g.source = 'nvtx' AND g.pid = o.pid
                      AND o.launch_ns BETWEEN g.start_ns AND g.end_ns)"""))
    all_names, facts = _kernel_names(out("nvtx.gpuscope"))
    with gpuscope.load(out("nvtx.gpuscope")) as r:
        cupti_ranges = Counter(n for (n,) in r.sql(
            "SELECT s.value FROM nvtx_range g JOIN string s ON s.id = g.name_id WHERE g.source = 'nvtx'"))
    results["nvtx"] = {
        "ok": all_names == expected and cupti_ranges.get("backward") == 10 and len(facts["windows"]) == 10,
        "kernels": sum(all_names.values()), "expected_kernels": sum(expected.values()),
        "cupti_ranges": dict(cupti_ranges), **{k: v for k, v in facts.items() if k != "windows"},
        "windows": len(facts["windows"])}

    env = dict(os.environ)
    env.pop("GPUSCOPE_SPOOL", None)
    subprocess.run([sys.executable, workload, "--steps", "15", "--inprocess", out("inprocess.gpuscope"),
                    "--inprocess-steps", "5-9"], check=True, timeout=300, env=env)
    all_names, facts = _kernel_names(out("inprocess.gpuscope"))
    expected = _sum(full_names, range(5, 10))
    with gpuscope.load(out("inprocess.gpuscope")) as r:
        in_process = r.meta.get("in_process")
        step_marks = r.count("nvtx_range WHERE kind = 'mark' AND category = 'step'")
    results["inprocess"] = {
        "ok": all_names == expected and in_process is True and step_marks == 5,
        "kernels": sum(all_names.values()), "expected_kernels": sum(expected.values()),
        "step_marks": step_marks, **facts}

    ok = all(v.get("ok", True) for v in results.values())
    print(json.dumps({"check": "capture", "ok": ok, **results}, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

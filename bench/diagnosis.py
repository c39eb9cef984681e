"""Validation of ``gpuscope analyze`` on workloads with one planted bottleneck each (tests/workloads).

For each workload: run it untraced, planted and ``--fixed`` (the measured gain is the difference of
their step times, or total times for a warm-up problem); run the planted variant under
``gpuscope profile`` and diagnose the report; check that the planted problem is the top finding,
and compare its estimated saving (share of the step) with the measured gain. Writes
``diagnosis.json`` and ``diagnosis.md`` (a table for bench/RESULTS.md) to ``--out``, and keeps the
planted reports in ``--out/reports`` (gzip them into tests/fixtures to pin the results in CI).

    python3 bench/diagnosis.py --out /tmp/diagnosis                # all workloads
    python3 bench/diagnosis.py --out /tmp/diagnosis --only sync_item,fp32_gemm

Exits 1 when a planted problem is not the top finding.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "tests" / "workloads"
TRACE = "cuda,nvtx,torch,host,nvml,cpu"  # the defaults on a GPU machine, plus Python samples for the evidence
TIMEOUT_S = 240

# workload -> (the planted problem, the rules whose finding names it)
PLANTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "sync_item": (".item() every step, then 3 ms of host work", ("host_sync",)),
    "pageable_copy": ("64 MB copied from pageable memory each step", ("pageable_copies",)),
    "slow_dataloader": ("DataLoader(num_workers=0), 5 ms of Python per batch", ("data_loader",)),
    "launch_bound": ("300 tiny kernels per step launched from Python", ("launch_bound",)),
    "fp32_gemm": ("float32 matmuls with TF32 off", ("no_tensor_cores",)),
    "small_gemms": ("256 small same-shape matmuls in a Python loop", ("small_gemms",)),
    "cpu_preprocess": ("per-value Python normalization in the loop", ("idle_cpu_work",)),
    "sync_d2h": ("blocking 8 MB device-to-host copy, then 3 ms of host work", ("sync_copies",)),
    "first_compile": ("torch.compile with a cold cache", ("warmup",)),
}


def _run(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[int, float]:
    t = time.perf_counter()
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=TIMEOUT_S, cwd=ROOT,
                                env=env).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, time.perf_counter() - t


def _timing(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def measure(name: str, out: Path) -> dict[str, Any]:
    """Run one workload three ways and diagnose its planted report."""
    work = out / "work"
    reports = out / "reports"
    script = str(WORKLOADS / f"{name}.py")
    py = sys.executable
    row: dict[str, Any] = {"workload": name, "planted": PLANTED[name][0], "expected": list(PLANTED[name][1])}
    runs = {
        "planted": [py, script],
        "fixed": [py, script, "--fixed", "--cache-dir", str(work / "compile-cache")] if name == "first_compile"
        else [py, script, "--fixed"],
        "traced": [py, "-m", "gpuscope", "profile", "-t", TRACE, "-o", str(reports / name), "--force-overwrite",
                   script],
    }
    wall = {}
    for kind, cmd in runs.items():
        timing = work / f"{name}.{kind}.json"
        timing.unlink(missing_ok=True)
        rc, wall[kind] = _run([*cmd, "--timing-out", str(timing)], work / f"{name}.{kind}.log")
        row[f"{kind}_rc"] = rc
        row[f"{kind}_timing"] = _timing(timing)
    row["wall_s"] = {k: round(v, 1) for k, v in wall.items()}
    planted, fixed = row["planted_timing"], row["fixed_timing"]
    if planted and fixed:
        metric = planted["metric"]
        row["metric"] = metric
        row["measured_gain"] = 1 - fixed[metric] / planted[metric]
    report = reports / f"{name}.gpuscope"
    if report.exists():
        row.update(_diagnose(report, out, name))
    return row


def _diagnose(report: Path, out: Path, name: str) -> dict[str, Any]:
    from gpuscope.analysis.diagnosis import diagnose
    from gpuscope.reporters import findings_markdown
    from gpuscope.trace.report import Report

    with Report.open(report) as r:
        t = time.perf_counter()
        diag = diagnose(r)
        seconds = time.perf_counter() - t
    (out / "reports" / f"{name}.analyze.md").write_text(findings_markdown.render(diag))
    expected = PLANTED[name][1]
    rank = next((i for i, f in enumerate(diag.findings, 1) if f.rule in expected), None)
    found = diag.findings[rank - 1] if rank else None
    parts = diag.processes[0].mean_parts() if diag.processes else {}
    return {
        "analyze_s": round(seconds, 2),
        "top_rule": diag.findings[0].rule if diag.findings else None,
        "top_title": diag.findings[0].title if diag.findings else None,
        "rank": rank,
        "estimated_share": found.share if found else None,
        "estimated_saving_ns": int(found.saving_ns) if found else None,
        "one_time": bool(found.one_time) if found else None,
        "finding": found.as_dict() if found else None,
        "breakdown_share": {k: v / parts["duration_ns"] for k, v in parts.items() if k != "duration_ns"} if parts else None,
        "skipped": [s.rule for s in diag.skipped],
    }


def _ms(timing: dict[str, Any] | None, metric: str) -> str:
    if not timing:
        return "-"
    v = timing[metric]
    return f"{v:.2f} s" if metric == "total_s" else f"{v * 1e3:.2f} ms"


def markdown(rows: list[dict[str, Any]], device: str) -> str:
    """The results table for bench/RESULTS.md."""
    lines = [
        f"Device: {device}. Estimated: the saving the planted problem's finding estimates, as a share of the "
        "traced step (of all steps, for the warm-up); measured: 1 - fixed / planted, untraced.",
        "",
        "| workload | planted problem | top finding | rank of expected | estimated | measured | planted | fixed |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        metric = r.get("metric", "median_step_s")
        est = f"{r['estimated_share']:.0%}" if r.get("estimated_share") is not None else "-"
        gain = f"{r['measured_gain']:.0%}" if r.get("measured_gain") is not None else "-"
        top = r.get("top_rule") or "-"
        ok = "" if r.get("rank") == 1 else " **(miss)**"
        lines.append(f"| {r['workload']} | {r['planted']} | `{top}`{ok} | {r.get('rank') or '-'} | {est} | {gain} | "
                     f"{_ms(r.get('planted_timing'), metric)} | {_ms(r.get('fixed_timing'), metric)} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory for results and reports")
    p.add_argument("--only", help="comma-separated workloads (default: all)")
    args = p.parse_args()
    out = Path(args.out)
    (out / "work").mkdir(parents=True, exist_ok=True)
    (out / "reports").mkdir(exist_ok=True)
    names = args.only.split(",") if args.only else list(PLANTED)
    unknown = [n for n in names if n not in PLANTED]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(PLANTED)}")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    rows = []
    t0 = time.perf_counter()
    for name in names:
        row = measure(name, out)
        rows.append(row)
        print(f"{name}: top {row.get('top_rule')} (expected {'/'.join(row['expected'])}, rank {row.get('rank')}), "
              f"estimated {row.get('estimated_share')}, measured {row.get('measured_gain')}, wall {row['wall_s']}",
              flush=True)
    device = next((r["planted_timing"]["device"] for r in rows if r.get("planted_timing")), "unknown")
    doc = {"device": device, "trace": TRACE, "seconds": round(time.perf_counter() - t0, 1), "workloads": rows}
    (out / "diagnosis.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / "diagnosis.md").write_text(markdown(rows, device))
    print((out / "diagnosis.md").read_text())
    print(f"wrote {out / 'diagnosis.json'}, {out / 'diagnosis.md'}; reports in {out / 'reports'}")
    return 0 if all(r.get("rank") == 1 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

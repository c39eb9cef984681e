"""Overhead of profiling: step time of workloads traced / untraced, runs interleaved.

Each run is a fresh process; a workload times its own steady-state steps and writes their mean
and median and its peak RSS. The ratio is taken on the mean step time: work the profiler does in
bursts (handing over a full buffer of records) stalls a few steps, which a median would hide.
Within a round every mode runs once per workload (A B C D, A B C D, ...), so slow drifts of the
machine hit every mode alike; ratios are taken within a round and summarized by their median and
range over rounds (the ratio of medians is kept beside it).

    python3 bench/overhead.py --workloads mlp,gemm --rounds 3 --out overhead.json

``--ablation`` runs the per-collector ablation in one call: ``untraced`` and each mode of
``ABLATION``, every one adding a collector to the one before (CUPTI kernel records alone, + memory
copies and sets, + synchronization sites, + launch anchors, + PyTorch module ranges, + the NVML
and host samplers, + operator samples: the default), on the launch-bound MLP and the GPT eager loop, as many
interleaved rounds as fit ``--budget-s`` (rounds start only while the slowest round so far still
fits). It writes the JSON (``--out``) and the markdown table (``--md``), with, for each traced run,
the end-of-run line's estimate (analysis/steps/overhead.py) against the measured slowdown: the traced
run's ``program_s`` (from the workload's start to its last step) minus the untraced one's of the
same round, and against the steps' part of it (the timed steps' extra time: mean step minus the
untraced run's, times the steps), which leaves out the start-up the line does not count.

    python3 bench/overhead.py --ablation --out ablation.json --md ablation.md   # about 8 minutes on an H100

Fresh processes on one machine drift by up to ~30% in step time; pinned to a few cores (``taskset -c
4-11 python3 bench/overhead.py ...``, which its children inherit) by about 8%.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "tests" / "device" / "workloads"

WORKLOAD_ARGS = {
    "mlp": ["mlp.py", "--steps", "300", "--warmup", "30"],
    "gemm": ["gemm.py", "--steps", "30", "--warmup", "5"],
    "gpt": ["transformer.py", "--steps", "50", "--warmup", "5"],
    "gpt-compiled": ["transformer.py", "--compile", "model", "--steps", "50", "--warmup", "10"],
    "cnn": ["cnn.py", "--steps", "100", "--warmup", "10"],
    "sync": ["sync_loop.py", "--steps", "100", "--warmup", "10"],
}
MODES = ["untraced", "gpuscope", "gpuscope-notorch", "gpuscope-api", "torch-profiler"]
# Modes that split the default's cost into its parts: (--trace value, environment).
PARTS: dict[str, tuple[str, dict[str, str]]] = {
    "gpuscope-all": ("cuda,cuda-api,nvtx,torch,torch-backward,cpu,host,nvml", {}),
    "gs-torch-only": ("torch", {}),
    "gs-kernel": ("cuda", {"GPUSCOPE_CUPTI_KINDS": "kernel,device,context", "GPUSCOPE_SYNC_SITES": "0",
                           "GPUSCOPE_LATENCY_TIMESTAMPS": "0"}),
    "gs-kernel-latency": ("cuda", {"GPUSCOPE_CUPTI_KINDS": "kernel,device,context", "GPUSCOPE_SYNC_SITES": "0",
                                   "GPUSCOPE_LATENCY_TIMESTAMPS": "1"}),
    "gs-kernel-mem": ("cuda", {"GPUSCOPE_CUPTI_KINDS": "kernel,device,context,memcpy,memset",
                               "GPUSCOPE_SYNC_SITES": "0"}),
    "gs-kernel-mem-sync": ("cuda,cuda-api", {"GPUSCOPE_CUPTI_KINDS": "kernel,device,context,memcpy,memset,sync",
                                             "GPUSCOPE_SYNC_SITES": "0"}),
    "gs-torch-backward": ("cuda,nvtx,torch,torch-backward,host,nvml", {}),
    "gs-cuda-nosites": ("cuda", {"GPUSCOPE_SYNC_SITES": "0"}),
    "gs-cuda": ("cuda", {}),
    "gs-objects": ("cuda,nvtx,torch,host,nvml", {"GPUSCOPE_RAW_BUFFERS": "0"}),  # the default, via cupti-python's objects
    # the default placing kernels by CUPTI's queued times instead of launch anchors
    "gs-latency": ("cuda,nvtx,torch,host,nvml", {"GPUSCOPE_LATENCY_TIMESTAMPS": "1", "GPUSCOPE_ANCHORS": "0"}),
    "gs-noanchors": ("cuda,nvtx,torch,host,nvml", {"GPUSCOPE_ANCHORS": "0"}),
    "default-noanchors": ("cuda,nvtx,torch,torch-shapes,host,nvml", {"GPUSCOPE_ANCHORS": "0"}),
    # the default with its anchors made through a Python callback, not in C
    "default-pyanchors": ("cuda,nvtx,torch,torch-shapes,host,nvml", {"GPUSCOPE_NATIVE_ANCHORS": "0"}),
    "default-nohost": ("cuda,nvtx,torch,torch-shapes", {}),  # the default less the host and NVML samplers
    "cuda+nvtx": ("cuda,nvtx", {}),  # what ab-+torch-ranges adds, one at a time
    "cuda+torch": ("cuda,torch", {}),
}
# The ablation: each mode adds one collector to the one before it; the last is the default.
_NO_SITES = {"GPUSCOPE_SYNC_SITES": "0", "GPUSCOPE_ANCHORS": "0", "GPUSCOPE_LATENCY_TIMESTAMPS": "0"}
ABLATION: dict[str, tuple[str, dict[str, str]]] = {
    "ab-kernels": ("cuda", {"GPUSCOPE_CUPTI_KINDS": "kernel,device,context", **_NO_SITES}),
    "ab-+memcpy-memset": ("cuda", {"GPUSCOPE_CUPTI_KINDS": "kernel,device,context,memcpy,memset,overhead",
                                   **_NO_SITES}),
    "ab-+sync-sites": ("cuda", {"GPUSCOPE_ANCHORS": "0"}),
    "ab-+anchors": ("cuda", {}),
    "ab-+torch-ranges": ("cuda,nvtx,torch", {}),
    "ab-+torch-ranges-noanchors": ("cuda,nvtx,torch", {"GPUSCOPE_ANCHORS": "0"}),
    "ab-+host-nvml": ("cuda,nvtx,torch,host,nvml", {}),
    "ab-+torch-shapes=default": ("cuda,nvtx,torch,torch-shapes,host,nvml", {}),
}
PARTS.update(ABLATION)
ABLATION_WORKLOADS = "mlp,gpt"


def command(mode: str, workload: str, timing: str, scratch: str) -> tuple[list[str], dict[str, str]]:
    """Return the command line and the extra environment of one run. A mode ending in ``@base`` runs
    the mode before it with ``PYTHONPATH`` set to ``$OVERHEAD_BASE_PYTHONPATH`` (another version of
    gpuscope, to compare two versions interleaved in one run)."""
    if mode.endswith("@base"):
        argv, env = command(mode[: -len("@base")], workload, timing, scratch)
        own = os.path.join(scratch, f"{workload}-{mode[: -len('@base')]}")  # its report, named apart
        return [os.path.join(scratch, f"{workload}-{mode}") if a == own else a for a in argv], {
            **env, "PYTHONPATH": os.environ["OVERHEAD_BASE_PYTHONPATH"]}
    py = sys.executable
    wl = [str(WORKLOADS / WORKLOAD_ARGS[workload][0]), *WORKLOAD_ARGS[workload][1:], "--timing-out", timing]
    report = os.path.join(scratch, f"{workload}-{mode}")
    # the overhead probe off: its steps without collection would dilute the mean step this compares
    gs = [py, "-m", "gpuscope", "profile", "-o", report, "--force-overwrite", "--no-overhead-probe"]
    if mode == "untraced":
        return [py, *wl], {}
    if mode == "gpuscope":
        return [*gs, *wl], {}
    if mode == "gpuscope-notorch":
        return [*gs, "-t", "cuda,nvtx", *wl], {}
    if mode == "gpuscope-api":
        return [*gs, "-t", "cuda,cuda-api,nvtx,torch,torch-backward", *wl], {}
    if mode == "torch-profiler":
        return [py, *wl, "--torch-profiler", report + ".json"], {}
    if mode in PARTS:
        trace, env = PARTS[mode]
        return [*gs, "-t", trace, *wl], env
    raise ValueError(mode)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--workloads", default="mlp,gemm")
    p.add_argument("--modes", default=os.environ.get("OVERHEAD_MODES", ",".join(MODES)))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", required=True)
    p.add_argument("--ablation", action="store_true", help="the per-collector ablation (see above)")
    p.add_argument("--budget-s", type=float, help="start rounds only while they fit (with --ablation: 480 s "
                   "unless given, and as many rounds as fit)")
    p.add_argument("--md", help="write the markdown table here too")
    args = p.parse_args()
    if args.ablation:
        args.modes = ",".join(["untraced", *ABLATION])
        if args.workloads == p.get_default("workloads"):
            args.workloads = ABLATION_WORKLOADS
        args.rounds = max(args.rounds, 20)  # as many as --budget-s allows
        args.budget_s = args.budget_s or 480.0
    workloads = args.workloads.split(",")
    modes = args.modes.split(",")
    runs = []
    began = time.perf_counter()
    slowest = 0.0
    with tempfile.TemporaryDirectory() as scratch:
        for rnd in range(args.rounds):
            elapsed = time.perf_counter() - began
            if args.budget_s is not None and rnd and elapsed + slowest > args.budget_s:
                print(f"stopping after {rnd} rounds: {elapsed:.0f} s of the {args.budget_s:.0f} s budget", flush=True)
                break
            round_began = time.perf_counter()
            order = modes[rnd % len(modes):] + modes[:rnd % len(modes)]
            for wl in workloads:
                for mode in order:
                    timing = os.path.join(scratch, "timing.json")
                    if os.path.exists(timing):
                        os.unlink(timing)
                    t = time.perf_counter()
                    argv, env = command(mode, wl, timing, scratch)
                    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env})
                    wall = time.perf_counter() - t
                    if proc.returncode != 0 or not os.path.exists(timing):
                        print(f"FAILED {wl} {mode}: rc={proc.returncode}\n{proc.stderr[-2000:]}", file=sys.stderr)
                        continue
                    doc = json.load(open(timing))
                    if mode != "untraced" and mode != "torch-profiler":
                        doc.update(_estimate(os.path.join(scratch, f"{wl}-{mode}.gpuscope")))
                    runs.append({"round": rnd, "workload": wl, "mode": mode, "wall_s": wall, **doc})
                    print(f"round {rnd} {wl:6s} {mode:15s} step mean {doc['mean_step_s'] * 1e3:8.3f} ms "
                          f"median {doc['median_step_s'] * 1e3:8.3f} ms "
                          f"wall {wall:6.1f} s rss {doc['max_rss_kb'] / 1024:.0f} MB", flush=True)
            slowest = max(slowest, time.perf_counter() - round_began)
    summary = summarize(runs, workloads, modes)
    json.dump({"runs": runs, "summary": summary, "device": _device()}, open(args.out, "w"), indent=1)
    table = markdown(summary)
    print(table)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(f"{_device()}, {time.strftime('%Y-%m-%d')}, {len({r['round'] for r in runs})} rounds\n\n{table}\n")


def _estimate(report: str) -> dict:
    """The end-of-run line's estimate of a traced run (total ns and parts), or nothing without the report."""
    sys.path.insert(0, str(ROOT / "src"))
    try:
        from gpuscope.analysis.steps.overhead import collection_overhead
        from gpuscope.trace.report import Report

        with Report.open(report) as r:
            o = collection_overhead(r)
    except Exception as exc:  # noqa: BLE001  (the timing still counts)
        print(f"no estimate from {report}: {exc}", file=sys.stderr)
        return {}
    return {"estimate_ns": o.total_ns, "estimate_parts": {p.name: p.ns for p in o.parts}}


def _device() -> str:
    """The GPU's name, as nvidia-smi gives it (or "unknown")."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out[0] if out else "unknown"


def summarize(runs: list[dict], workloads: list[str], modes: list[str]) -> list[dict]:
    out = []
    for wl in workloads:
        base = {r["round"]: r for r in runs if r["workload"] == wl and r["mode"] == "untraced"}
        for mode in modes:
            mine = [r for r in runs if r["workload"] == wl and r["mode"] == mode]
            ratios = [r["mean_step_s"] / base[r["round"]]["mean_step_s"] for r in mine if r["round"] in base]
            of_medians = [r["median_step_s"] / base[r["round"]]["median_step_s"] for r in mine if r["round"] in base]
            if not mine:
                continue
            checks = [(r["estimate_ns"] / 1e9, r["program_s"] - base[r["round"]]["program_s"]) for r in mine
                      if "estimate_ns" in r and "program_s" in r and "program_s" in base.get(r["round"], {})]
            # the steps' share of the slowdown: the timed steps' extra time over the untraced run's of the round
            step_checks = [(r["estimate_ns"] / 1e9, (r["mean_step_s"] - base[r["round"]]["mean_step_s"]) * r["steps"])
                           for r in mine if "estimate_ns" in r and r["round"] in base]
            check = {}
            if checks:
                est, slow = statistics.median(e for e, _ in checks), statistics.median(m for _, m in checks)
                check = {"estimate_s": est, "slowdown_s": slow, "estimate_over_slowdown": est / slow if slow > 0 else None}
            if step_checks:
                slow = statistics.median(m for _, m in step_checks)
                quotients = sorted(e / m for e, m in step_checks if m > 0)
                check.update({"steps_slowdown_s": slow,
                              "estimate_over_steps_slowdown": statistics.median(quotients) if quotients else None,
                              "estimate_over_steps_slowdown_range": [quotients[0], quotients[-1]] if quotients else None})
            out.append({**check,
                "workload": wl, "mode": mode, "rounds": len(ratios),
                "step_ms_mean": statistics.median(r["mean_step_s"] for r in mine) * 1e3,
                "ratio_median": statistics.median(ratios) if ratios else None,
                "ratio_min": min(ratios) if ratios else None,
                "ratio_max": max(ratios) if ratios else None,
                "ratio_of_median_steps": statistics.median(of_medians) if of_medians else None,
                "peak_rss_mb": max(r["max_rss_kb"] for r in mine) / 1024,
            })
    return out


def markdown(summary: list[dict]) -> str:
    lines = ["| workload | mode | mean step (ms) | ratio of mean steps (median over rounds) | range | "
             "ratio of median steps | target peak RSS (MB) | line's estimate (s) | measured slowdown (s) | "
             "estimate / slowdown | the steps' slowdown (s) | estimate / the steps' slowdown (median; range) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in summary:
        ratio = f"{s['ratio_median']:.3f}" if s["ratio_median"] else "-"
        rng = f"{s['ratio_min']:.3f} - {s['ratio_max']:.3f}" if s["ratio_min"] else "-"
        med = f"{s['ratio_of_median_steps']:.3f}" if s["ratio_of_median_steps"] else "-"
        lines.append(f"| {s['workload']} | {s['mode']} | {s['step_ms_mean']:.3f} | {ratio} | {rng} | {med} | "
                     f"{s['peak_rss_mb']:.0f} | {_num(s.get('estimate_s'))} | {_num(s.get('slowdown_s'))} | "
                     f"{_num(s.get('estimate_over_slowdown'), 2)} | {_num(s.get('steps_slowdown_s'))} | "
                     f"{_steps_quotient(s)} |")
    return "\n".join(lines)


def _steps_quotient(s: dict) -> str:
    q, rng = s.get("estimate_over_steps_slowdown"), s.get("estimate_over_steps_slowdown_range")
    return f"{q:.2f} ({rng[0]:.2f} - {rng[1]:.2f})" if isinstance(q, float) and rng else ""


def _num(x: object, digits: int = 3) -> str:
    return f"{x:.{digits}f}" if isinstance(x, float) else ""


if __name__ == "__main__":
    main()

"""Overhead of profiling: step time of workloads traced / untraced, runs interleaved.

Each run is a fresh process; a workload times its own steady-state steps and writes their mean
and median and its peak RSS. The ratio is taken on the mean step time: work the profiler does in
bursts (handing over a full buffer of records) stalls a few steps, which a median would hide.
Within a round every mode runs once per workload (A B C D, A B C D, ...), so slow drifts of the
machine hit every mode alike; ratios are taken within a round and summarized by their median and
range over rounds (the ratio of medians is kept beside it).

    python3 bench/overhead.py --workloads mlp,gemm --rounds 3 --out overhead.json
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
}


def command(mode: str, workload: str, timing: str, scratch: str) -> tuple[list[str], dict[str, str]]:
    """Return the command line and the extra environment of one run."""
    py = sys.executable
    wl = [str(WORKLOADS / WORKLOAD_ARGS[workload][0]), *WORKLOAD_ARGS[workload][1:], "--timing-out", timing]
    report = os.path.join(scratch, f"{workload}-{mode}")
    gs = [py, "-m", "gpuscope", "profile", "-o", report, "--force-overwrite"]
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
    args = p.parse_args()
    workloads = args.workloads.split(",")
    modes = args.modes.split(",")
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for rnd in range(args.rounds):
            for wl in workloads:
                for mode in modes:
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
                    runs.append({"round": rnd, "workload": wl, "mode": mode, "wall_s": wall, **doc})
                    print(f"round {rnd} {wl:6s} {mode:15s} step mean {doc['mean_step_s'] * 1e3:8.3f} ms "
                          f"median {doc['median_step_s'] * 1e3:8.3f} ms "
                          f"wall {wall:6.1f} s rss {doc['max_rss_kb'] / 1024:.0f} MB", flush=True)
    summary = summarize(runs, workloads, modes)
    json.dump({"runs": runs, "summary": summary}, open(args.out, "w"), indent=1)
    print(markdown(summary))


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
            out.append({
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
             "ratio of median steps | target peak RSS (MB) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in summary:
        ratio = f"{s['ratio_median']:.3f}" if s["ratio_median"] else "-"
        rng = f"{s['ratio_min']:.3f} - {s['ratio_max']:.3f}" if s["ratio_min"] else "-"
        med = f"{s['ratio_of_median_steps']:.3f}" if s["ratio_of_median_steps"] else "-"
        lines.append(f"| {s['workload']} | {s['mode']} | {s['step_ms_mean']:.3f} | {ratio} | {rng} | {med} | "
                     f"{s['peak_rss_mb']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

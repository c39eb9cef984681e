"""Cost of gpuscope's CPU-side collectors, runs interleaved (no GPU needed), and the check of the
end-of-run overhead line against it.

Each run is a fresh process. The training workloads (bench/workloads/cpu_train.py: ``sgd4``,
``adam8``, ``cnn``) time their own loop and their whole run from the script's start; the older
``python`` and ``torch`` workloads (bench/workloads/cpu_work.py) their fixed work. Within a round
every mode runs once per workload, the order of the modes turning from round to round; the ratio is
traced over untraced of the same round, summarized by its median and range over rounds.

The overhead-line check: for each traced run of a training workload, the report's estimate of the
time collection added (analysis/steps/overhead.py, the end-of-run line) against the measured slowdown,
the traced run's ``total_s`` minus the untraced one's of the same round (both from the script's
start to the end of its loop). Their ratio (estimate / measured) is summarized the same way; the
target is 0.7 to 1.3.

The overhead probe's check (:func:`probe_check`): where the report has an overhead probe, its cost
(the recorded steps' median over those with collection off) against the real cost of a recorded step
(the same median over the untraced run's median step of the round), per run and summarized.

Modes ending in ``-base`` run the same collectors with the gpuscope of another source tree
(``GPUSCOPE_BENCH_BASE_SRC``: its ``src`` folder), for a before-and-after in the same rounds.

    python3 bench/cpu_overhead.py --workloads sgd4,adam8,cnn --rounds 9 --out cpu-overhead.json
    python3 bench/cpu_overhead.py --modes untraced,cpu --workloads sgd4 --rounds 5 --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "src"))

TRAIN = BENCH / "workloads" / "cpu_train.py"
WORK = BENCH / "workloads" / "cpu_work.py"
TRAININGS = ("sgd4", "adam8", "cnn", "infer", "hfgen")
# label -> (--trace value or None for untraced, extra environment[, extra options of gpuscope profile]).
# "default" is no --trace at all.
MODES: dict[str, tuple[Any, ...]] = {
    "untraced": (None, {}),
    "torch": ("torch", {}),
    "host": ("host", {}),
    "cpu": ("cpu", {}),
    "torch-ops": ("torch-ops", {}),
    "torch-shapes": ("torch-shapes", {}),
    "default": ("", {}),
    "all-ops": ("torch,host,cpu,torch-ops", {}),  # the default without a GPU before operators were sampled
    "cpu-250hz": ("cpu", {"GPUSCOPE_SAMPLE_HZ": "250"}),
    "default-250hz": ("", {"GPUSCOPE_SAMPLE_HZ": "250"}),
    "default-1khz": ("", {"GPUSCOPE_SAMPLE_HZ": "1000"}),
    "cpu-1khz": ("cpu", {"GPUSCOPE_SAMPLE_HZ": "1000"}),
    # collection off for the whole run (a capture range that never opens): what stays on in a probe
    "default-off": ("", {}, ["--steps", "1000000-1000001"]),
    "torch-off": ("torch", {}, ["--steps", "1000000-1000001"]),
    "shapes-off": ("torch-shapes", {}, ["--steps", "1000000-1000001"]),
    "cpu-off": ("cpu", {}, ["--steps", "1000000-1000001"]),
    "none-off": ("none", {}, ["--steps", "1000000-1000001"]),
    "default-noprobe": ("", {}, ["--no-overhead-probe"]),
    "none": ("none", {}),  # the agent and the launcher, no collector
}
BASE_ENV = "GPUSCOPE_BENCH_BASE_SRC"  # another gpuscope source tree, for the ``*-base`` modes
DEFAULT_MODES = "untraced,torch,cpu,torch-shapes,torch-ops,default,all-ops"


def command(mode: str, workload: str, out: str, scratch: str) -> tuple[list[str], dict[str, str], str | None]:
    """Return the command line, the extra environment and the report path (None: untraced) of one run."""
    script = TRAIN if workload in TRAININGS else WORK
    argv = [sys.executable, str(script), workload, out]
    trace, env, *more = MODES[mode.removesuffix("-base")]
    if mode.endswith("-base"):  # the same mode, run by the gpuscope of another source tree
        env = {**env, "PYTHONPATH": os.environ[BASE_ENV]}
    if trace is None:
        return argv, env, None
    report = os.path.join(scratch, f"{workload}-{mode}")
    gs = [sys.executable, "-m", "gpuscope", "profile", "-o", report, "--force-overwrite", *(more[0] if more else [])]
    if trace:
        gs += ["-t", trace]
    return [*gs, *argv[1:]], env, report + ".gpuscope"


def estimate(report_path: str) -> dict[str, object]:
    """Return the report's overhead estimate: total ns, its parts, and what it says it can not see."""
    from gpuscope.analysis.steps.overhead import collection_overhead
    from gpuscope.trace.report import Report

    with Report.open(report_path) as report:
        o = collection_overhead(report)
    out: dict[str, object] = {"estimate_ns": o.total_ns, "parts": {p.name: p.ns for p in o.parts},
                              "not_measured": o.not_measured}
    if o.probes:  # the overhead probe's measurement (one process)
        t = o.probes[0]
        out.update(probe_ratio=t.ratio, probe_off_s=t.off_median / 1e9, probe_on_s=t.on_median / 1e9,
                   probe_off_steps=len(t.off_ns), probe_on_steps=len(t.on_ns))
    return out


def probe_check(run: dict[str, Any], untraced: dict[str, Any]) -> dict[str, float] | None:
    """Return the overhead probe's cost against the real cost of a recorded step, for one traced run and
    the untraced run of its round; None where the run has no probe.

    ``probe``: the recorded steps' median over the probe's steps' (collection off), less 1. ``real``:
    the recorded steps' median over the untraced run's median step, less 1 (both mark to mark: the
    report's step marks come right after the optimizer step, where the workload reads its clock).
    ``quotient``: probe over real (1.0: the probe measured the whole cost; None where real is not
    above zero). ``off_over_untraced``: the probe's steps over the untraced steps (above 1: what stays
    on during a probe costs that much)."""
    if "probe_ratio" not in run or not untraced.get("median_step_s"):
        return None
    probe = float(run["probe_ratio"]) - 1.0
    real = float(run["probe_on_s"]) / float(untraced["median_step_s"]) - 1.0
    return {"probe": probe, "real": real, "quotient": probe / real if real > 0 else None,
            "off_over_untraced": float(run["probe_off_s"]) / float(untraced["median_step_s"])}


def run_once(mode: str, workload: str, scratch: str) -> dict[str, object] | None:
    out = os.path.join(scratch, "t.json")
    if os.path.exists(out):
        os.unlink(out)
    argv, env, report = command(mode, workload, out, scratch)
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env})
    if proc.returncode != 0 or not os.path.exists(out):
        print(f"FAILED {workload} {mode}: rc={proc.returncode}\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    doc: dict[str, object] = json.load(open(out))
    if "seconds" in doc:  # cpu_work.py: the whole work is the loop
        doc = {"total_s": doc["seconds"], "loop_s": doc["seconds"]}
    if report is not None and workload in TRAININGS:
        doc.update(estimate(report))
        os.unlink(report)
    return doc


def summarize(runs: list[dict], workloads: list[str], modes: list[str]) -> list[dict]:
    """Per workload and mode: the loop time and the ratio to untraced (median, range over rounds), and
    the overhead line's estimate against the measured slowdown."""
    out = []
    for wl in workloads:
        base = {r["round"]: r for r in runs if r["workload"] == wl and r["mode"] == "untraced"}
        for mode in modes:
            mine = [r for r in runs if r["workload"] == wl and r["mode"] == mode and r["round"] in base]
            if not mine:
                continue
            ratios = [r["loop_s"] / base[r["round"]]["loop_s"] for r in mine]
            row = {"workload": wl, "mode": mode, "rounds": len(mine),
                   "loop_s": statistics.median(r["loop_s"] for r in mine),
                   "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
            if all("loop_cpu_s" in r for r in [*mine, *base.values()]):
                cpu = [r["loop_cpu_s"] / base[r["round"]]["loop_cpu_s"] for r in mine]
                row.update(loop_cpu_s=statistics.median(r["loop_cpu_s"] for r in mine),
                           cpu_ratio=statistics.median(cpu), cpu_ratio_min=min(cpu), cpu_ratio_max=max(cpu))
            checks = [(r["estimate_ns"] / 1e9, r["total_s"] - base[r["round"]]["total_s"]) for r in mine
                      if "estimate_ns" in r]
            if checks:
                row["estimate_s"] = statistics.median(e for e, _ in checks)
                row["slowdown_s"] = statistics.median(m for _, m in checks)
                # the median estimate over the median slowdown: a single round's difference of two noisy
                # runs can be near zero or negative, so per-round ratios are not summarized
                row["estimate_over_slowdown"] = row["estimate_s"] / row["slowdown_s"] if row["slowdown_s"] > 0 else None
                row["slowdown_range_s"] = (min(m for _, m in checks), max(m for _, m in checks))
                cpu_checks = [r["total_cpu_s"] - base[r["round"]]["total_cpu_s"] for r in mine if "estimate_ns" in r]
                row["cpu_slowdown_s"] = statistics.median(cpu_checks)
                row["estimate_over_cpu_slowdown"] = (row["estimate_s"] / row["cpu_slowdown_s"]
                                                     if row["cpu_slowdown_s"] > 0 else None)
            probes = [c for c in (probe_check(r, base[r["round"]]) for r in mine) if c is not None]
            if probes:
                row["probe_runs"] = probes
                for key in ("probe", "real", "off_over_untraced"):
                    row[key] = _spread([c[key] for c in probes])
                quotients = [c["quotient"] for c in probes if c["quotient"] is not None]
                row["quotient"] = _spread(quotients) if quotients else None
            out.append(row)
    return out


def _spread(values: list[float]) -> tuple[float, float, float]:
    """Median, least and greatest."""
    return statistics.median(values), min(values), max(values)


def probe_markdown(summary: list[dict]) -> str:
    """The table of the overhead probe against the real cost of a recorded step, per run and summarized."""
    lines = ["| workload | mode | probe's cost per run | real cost per run | probe / real per run "
             "| probe / real (median; range) | probe's steps / untraced steps (median; range) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]

    def spread(v: tuple[float, float, float] | None, fmt: str) -> str:
        return "" if v is None else f"{v[0]:{fmt}} ({v[1]:{fmt}} - {v[2]:{fmt}})"

    for s in summary:
        if "probe_runs" not in s:
            continue
        runs = s["probe_runs"]
        probe = ", ".join(f"{c['probe']:+.0%}" for c in runs)
        real = ", ".join(f"{c['real']:+.0%}" for c in runs)
        quotient = ", ".join("-" if c["quotient"] is None else f"{c['quotient']:.2f}" for c in runs)
        lines.append(f"| {s['workload']} | {s['mode']} | {probe} | {real} | {quotient} | "
                     f"{spread(s['quotient'], '.2f')} | {spread(s['off_over_untraced'], '.3f')} |")
    return "\n".join(lines)


def markdown(summary: list[dict]) -> str:
    """The table for bench/RESULTS.md."""
    lines = ["| workload | mode | loop wall (s, median) | wall ratio (median; range) | loop CPU ratio (median; range) "
             "| line's estimate (s) | wall slowdown (s, median; range) | estimate / wall slowdown | CPU slowdown (s) "
             "| estimate / CPU slowdown |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def ratio(x: object) -> str:
        return f"{x:.2f}" if isinstance(x, float) else ""

    for s in summary:
        est = f"{s['estimate_s']:.3f}" if "estimate_s" in s else ""
        slow = (f"{s['slowdown_s']:.3f} ({s['slowdown_range_s'][0]:.3f} - {s['slowdown_range_s'][1]:.3f})"
                if "slowdown_s" in s else "")
        cpu = (f"{s['cpu_ratio']:.3f} ({s['cpu_ratio_min']:.3f} - {s['cpu_ratio_max']:.3f})"
               if "cpu_ratio" in s else "")
        cpu_slow = f"{s['cpu_slowdown_s']:.3f}" if "cpu_slowdown_s" in s else ""
        lines.append(f"| {s['workload']} | {s['mode']} | {s['loop_s']:.3f} | {s['ratio']:.3f} "
                     f"({s['ratio_min']:.3f} - {s['ratio_max']:.3f}) | {cpu} | {est} | {slow} | "
                     f"{ratio(s.get('estimate_over_slowdown'))} | {cpu_slow} | {ratio(s.get('estimate_over_cpu_slowdown'))} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default=",".join(TRAININGS), help="sgd4, adam8, cnn, python, torch")
    p.add_argument("--modes", default=DEFAULT_MODES, help=f"choose from {', '.join(MODES)}")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out", required=True, help="JSON of every run and the summary")
    args = p.parse_args()
    workloads, modes = args.workloads.split(","), args.modes.split(",")
    if "untraced" not in modes:
        modes.insert(0, "untraced")
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for rnd in range(args.rounds):
            order = modes[rnd % len(modes):] + modes[:rnd % len(modes)]
            for wl in workloads:
                for mode in order:
                    doc = run_once(mode, wl, scratch)
                    if doc is None:
                        continue
                    runs.append({"round": rnd, "workload": wl, "mode": mode, **doc})
                    extra = f" estimate {doc['estimate_ns'] / 1e9:.3f} s" if "estimate_ns" in doc else ""
                    cpu = f" loop CPU {doc['loop_cpu_s']:.3f} s" if "loop_cpu_s" in doc else ""
                    print(f"round {rnd} {wl:6s} {mode:14s} loop {doc['loop_s']:.3f} s{cpu} total {doc['total_s']:.3f} s"
                          f"{extra} (load {os.getloadavg()[0]:.1f})", flush=True)
            summary = summarize(runs, workloads, modes)  # after every round: a stopped run keeps what it measured
            machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                       "started": started, "ended": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "rounds": rnd + 1}
            json.dump({"machine": machine, "runs": runs, "summary": summary}, open(args.out, "w"), indent=1)
    print(markdown(summary))
    print(probe_markdown(summary))


if __name__ == "__main__":
    main()

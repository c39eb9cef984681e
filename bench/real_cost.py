"""What profiling costs on real-client programs: each program of ``tests/workloads/clients/`` timed
untraced, under gpuscope's default, under the previous version of gpuscope, with CUPTI's kernel
records alone (the floor under any ``cuda`` trace), and under torch.profiler (CPU and CUDA
activities, ``record_shapes``), in fresh processes, interleaved.

Each run is a plain run of the program as written (``harness.run_steady``): it builds the program,
runs its warm-up iterations, and times the rest between two waits for the device; the ratio is of
that steady time per iteration against the untraced run of the same round. A round runs every mode
of a program once, in an order that turns from round to round, so a slow drift of the machine hits
every mode alike; ratios are summarized by their median and range over rounds. gpuscope runs as a
user runs it (``gpuscope profile prog.py``: the overhead probe on, its few steps with collection off
among the timed ones).

With several GPUs (``--gpus N``), the programs are dealt to N workers, one per GPU, each pinned to
its own CPU cores: every ratio is still taken within one worker, on one GPU.

For the traced runs it also keeps what the end-of-run line said (the collection overhead estimate,
the probe's measurement) and, for compiled programs, dynamo's counters (frames compiled, graph
breaks, recompiles) to compare with the untraced run's.

    python3 bench/real_cost.py --rounds 3 --gpus 4 --out real_cost.json --md real_cost.md
    python3 bench/real_cost.py --only hf_bert_infer,jax_mlp --modes untraced,default --rounds 2 --out x.json

Two more references, by ``--modes``: ``bare`` (CUPTI's kernel records through libcupti alone, no
gpuscope: ``bare_cupti.py``, what any CUPTI-based profiler pays) and ``tp-cuda`` (torch.profiler with
its CUDA activity alone); with ``floor``, they split the floor into CUPTI's part and gpuscope's.

``--previous DIR``: the ``src`` folder of the previous version (mode ``previous``; without it the
mode is left out). Mode ``elsewhere``: this version's ``src`` copied outside the checkout, run as
``default`` is: a control for where the source lies (on one host the same source measured a third
slower on ``generate`` from the checkout than from a copy outside it, a cause not yet found).
``--budget-s``: stop starting rounds once the slowest round so far would not fit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = ROOT / "tests" / "workloads" / "clients"
TORCH_PROFILER = Path(__file__).resolve().parent / "under_torch_profiler.py"
BARE_CUPTI = Path(__file__).resolve().parent / "bare_cupti.py"
MODES = ["untraced", "floor", "default", "previous", "torch-profiler"]
FLOOR_ENV = {"GPUSCOPE_CUPTI_KINDS": "kernel,device,context", "GPUSCOPE_SYNC_SITES": "0", "GPUSCOPE_ANCHORS": "0",
             "GPUSCOPE_LATENCY_TIMESTAMPS": "0"}
# Modes that split the default's cost (--modes ...): (--trace, environment).
DEFAULT = "cuda,nvtx,torch,torch-shapes,host,nvml"
PARTS: dict[str, tuple[str, dict[str, str], list[str]]] = {
    "cuda": ("cuda", {}, []),
    "cuda-graph": ("cuda,cuda-graph", {}, []),
    "no-shapes": ("cuda,nvtx,torch,host,nvml", {}, []),
    "no-torch": ("cuda,nvtx,host,nvml", {}, []),
    "no-probe": (DEFAULT, {}, ["--no-overhead-probe"]),
    "pace": (DEFAULT, {"GPUSCOPE_PACE_PROBE": "1"}, []),  # the probe paced by CUDA graph launches (opt-in)
    "pace-poll": (DEFAULT, {"GPUSCOPE_PACE_PROBE": "poll"}, []),  # its launch counter read, never switching
    "no-sites": (DEFAULT, {"GPUSCOPE_SYNC_SITES": "0"}, []),  # nor graph launches
    "default-graphs": (DEFAULT + ",cuda-graph", {}, []),  # graph-level records from the start
    "graph-nodes": (DEFAULT + ",graph-nodes", {}, []),  # every graph node's kernel, however large the graphs
    "both-sites": (DEFAULT, {"GPUSCOPE_SYNC_LAYER": "both"}, []),  # runtime and driver API watched
    "no-anchors": (DEFAULT, {"GPUSCOPE_ANCHORS": "0"}, []),
    "no-samplers": ("cuda,nvtx,torch,torch-shapes", {}, []),
    "module-steps": (DEFAULT, {"GPUSCOPE_MODULE_STEPS": "sample"}, []),  # module ranges in some steps only
}
NOT_PROGRAMS = {"nanogpt_model", "triton_kernels"}  # modules the programs import


def programs(only: str | None) -> list[str]:
    """The client programs, by name (file stem), in a fixed order; with ``only``, those named there,
    where ``NAME:VARIANT`` is program NAME run as its variant VARIANT (``--variant``: a fix applied,
    such as ``hf_gpt2_generate:static_cache``), a program of its own in the table."""
    names = sorted(p.stem for p in CLIENTS.glob("*.py") if p.stem not in NOT_PROGRAMS and not p.stem.startswith("_"))
    if only:
        wanted = only.split(",")
        unknown = [w for w in wanted if w.partition(":")[0] not in names]
        if unknown:
            sys.exit(f"no client program {', '.join(unknown)}; there are {', '.join(names)}")
        names = [n for n in names if n in wanted] + [w for w in wanted if ":" in w]
    return names


def split_variant(name: str) -> tuple[str, str | None]:
    """``NAME:VARIANT`` as (NAME, VARIANT); a plain name as (name, None)."""
    program, _, variant = name.partition(":")
    return program, variant or None


MIN_TIMED = 20  # iterations timed at least


def scaled_iterations(program: str, scale: float) -> int:
    """The program's iterations times ``scale``, leaving at least :data:`MIN_TIMED` after its warm-up."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"client_{program}", CLIENTS / f"{program}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(CLIENTS))
    spec.loader.exec_module(module)
    prog = module.PROGRAM
    return max(prog.warmup + MIN_TIMED, round(prog.iterations * scale))


def command(mode: str, program: str, timing: str, report: str, args: argparse.Namespace
            ) -> tuple[list[str], dict[str, str]]:
    """The command line and extra environment of one run."""
    py = sys.executable
    program, variant = split_variant(program)
    prog = [str(CLIENTS / f"{program}.py"), "--timing-out", timing]
    if variant:
        prog += ["--variant", variant]
    if args.iterations:
        prog += ["--iterations", str(args.iterations)]
    elif args.scale != 1.0:
        prog += ["--iterations", str(scaled_iterations(program, args.scale))]
    prog += args.program_args.split()
    gs = [py, "-m", "gpuscope", "profile", "-o", report, "--force-overwrite"]
    src = str(ROOT / "src")
    if mode == "untraced":
        return [py, *prog], {}
    if mode == "torch-profiler":
        return [py, str(TORCH_PROFILER), *prog], {}
    if mode == "tp-cuda":  # torch.profiler's floor: its CUDA activity alone
        return [py, str(TORCH_PROFILER), *prog], {"TORCH_PROFILER_ACTIVITIES": "cuda"}
    if mode == "bare":  # CUPTI's floor: kernel records through libcupti, no gpuscope
        return [py, str(BARE_CUPTI), *prog], {}
    if mode == "default":
        return [*gs, *prog], {"PYTHONPATH": _path(src)}
    if mode == "previous":
        return [*gs, *prog], {"PYTHONPATH": _path(args.previous)}
    if mode == "elsewhere":
        return [*gs, *prog], {"PYTHONPATH": _path(args.elsewhere)}
    if mode == "floor":
        return [*gs, "-t", "cuda", *prog], {"PYTHONPATH": _path(src), **FLOOR_ENV}
    if mode in PARTS:
        trace, env, more = PARTS[mode]
        return [*gs, "-t", trace, *more, *prog], {"PYTHONPATH": _path(src), **env}
    raise ValueError(f"unknown mode {mode}")


def _path(first: str) -> str:
    """``first`` before the rest of PYTHONPATH, with this version's ``src`` left out."""
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT / "src")]
    return os.pathsep.join([first, *rest])


def line_of(report: str, src: str) -> dict[str, Any]:
    """What the end-of-run line of ``report`` said, read with the gpuscope in ``src``: the estimate
    (ns, share of wall) and each probe's ratio; {} where the report cannot be read."""
    code = (
        "import json, sys\n"
        "from gpuscope.analysis.steps.overhead import collection_overhead\n"
        "from gpuscope.trace.report import Report\n"
        "with Report.open(sys.argv[1]) as r:\n"
        "    o = collection_overhead(r)\n"
        "    steps = r.sql(\"SELECT count(*) FROM nvtx_range WHERE kind = 'mark' AND category IN ('step', 'iteration')\")[0][0]\n"
        "    cap = [json.loads(d) for (d,) in r.sql(\"SELECT detail FROM collector WHERE name = 'capture'\") if d]\n"
        "    try:\n"  # the bound from the busiest GPU, in versions that have it
        "        from gpuscope.analysis.overview import overview\n"
        "        at_most = overview(r).overhead.at_most\n"
        "    except Exception:\n"
        "        at_most = None\n"
        "print(json.dumps({'estimate_ns': o.total_ns, 'wall_ns': o.wall_ns, 'percent': o.percent, 'marks': steps,\n"
        "                  'at_most_percent': None if at_most is None else 100 * at_most,\n"
        "                  'switches': sum(c.get('switches', 0) for c in cap), 'switch_ns': sum(c.get('switch_ns', 0) for c in cap),\n"
        "                  'probes': [{'ratio': t.ratio, 'measured': t.measured, 'off': len(t.off_ns), 'on': len(t.on_ns),\n"
        "                              'source': getattr(t, 'source', 'torch')} for t in o.probes]}))\n")
    try:
        out = subprocess.run([sys.executable, "-c", code, report], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": _path(src)})
        return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"error": out.stderr[-300:]}
    except (subprocess.SubprocessError, ValueError, IndexError) as exc:
        return {"error": repr(exc)}


def worker(gpu: int | None, cores: str | None, names: list[str], modes: list[str], args: argparse.Namespace,
           runs: list[dict[str, Any]], lock: threading.Lock, began: float) -> None:
    """Run every round of ``names`` on one GPU, appending each run's result to ``runs``."""
    env_base = dict(os.environ)
    if gpu is not None:
        env_base["CUDA_VISIBLE_DEVICES"] = str(gpu)
    slowest = 0.0
    with tempfile.TemporaryDirectory(prefix=f"real-cost-{gpu}-") as scratch:
        for rnd in range(args.rounds):
            if rnd and args.budget_s and time.perf_counter() - began + slowest > args.budget_s:
                print(f"[gpu {gpu}] stopping after {rnd} rounds: the budget would not hold another", flush=True)
                return
            t_round = time.perf_counter()
            for name in names:
                order = modes[rnd % len(modes):] + modes[:rnd % len(modes)]
                if args.previous_programs and name not in args.previous_programs.split(","):
                    order = [m for m in order if m != "previous"]
                for mode in order:
                    timing = os.path.join(scratch, "timing.json")
                    report = os.path.join(scratch, f"{name.replace(':', '-')}-{mode}")
                    for stale in (timing, report + ".gpuscope"):
                        if os.path.exists(stale):
                            os.unlink(stale)
                    argv, env = command(mode, name, timing, report, args)
                    if cores:
                        argv = ["taskset", "-c", cores, *argv]
                    t0 = time.perf_counter()
                    try:
                        proc = subprocess.run(argv, capture_output=True, text=True, env={**env_base, **env},
                                              timeout=args.run_timeout_s)
                        rc, err = proc.returncode, proc.stderr
                    except subprocess.TimeoutExpired as exc:
                        rc, err = 124, str(exc.stderr or "")[-2000:]
                    wall = time.perf_counter() - t0
                    row: dict[str, Any] = {"round": rnd, "program": name, "mode": mode, "gpu": gpu, "rc": rc,
                                           "process_s": wall}
                    if rc == 0 and os.path.exists(timing):
                        # the timing names the program's file: the row keeps the name it was run by
                        # (NAME:VARIANT is a program of its own)
                        row.update({**json.load(open(timing)), "program": name})
                        if mode == "default" and os.path.exists(report + ".gpuscope"):
                            row["line"] = line_of(report + ".gpuscope", args.previous if mode == "previous" else
                                                  str(ROOT / "src"))
                    else:
                        row["error"] = "\n".join(err.strip().splitlines()[-6:])[-1500:]
                    with lock:
                        runs.append(row)
                        with open(args.out + ".runs.jsonl", "a") as fh:  # a run cut off keeps what it measured
                            fh.write(json.dumps(row) + "\n")
                    steady = row.get("steady_s_per_iteration")
                    print(f"[gpu {gpu}] round {rnd} {name:28s} {mode:15s} "
                          + (f"{steady * 1e3:9.3f} ms/it" if steady else f"FAILED rc={rc}: {row.get('error', '')[-200:]}")
                          + f"  ({wall:5.1f} s)", flush=True)
                    if os.path.exists(report + ".gpuscope"):
                        os.unlink(report + ".gpuscope")
            slowest = max(slowest, time.perf_counter() - t_round)


def summarize(runs: list[dict[str, Any]], names: list[str], modes: list[str]) -> list[dict[str, Any]]:
    """Per program and mode: the steady time, its ratio to the untraced run of the same round (median
    and range over rounds), the line's claims against the measured slowdown, dynamo's counters."""
    out = []
    for name in names:
        base = {r["round"]: r for r in runs if r["program"] == name and r["mode"] == "untraced"
                and r.get("steady_s_per_iteration")}
        for mode in modes:
            mine = [r for r in runs if r["program"] == name and r["mode"] == mode and r.get("steady_s_per_iteration")]
            failed = [r for r in runs if r["program"] == name and r["mode"] == mode and not r.get("steady_s_per_iteration")]
            ratios = [r["steady_s_per_iteration"] / base[r["round"]]["steady_s_per_iteration"]
                      for r in mine if r["round"] in base]
            row: dict[str, Any] = {"program": name, "mode": mode, "rounds": len(mine), "failed": len(failed),
                                   "error": failed[0].get("error", "")[-300:] if failed else ""}
            if mine:
                row["ms_per_iteration"] = statistics.median(r["steady_s_per_iteration"] for r in mine) * 1e3
            if ratios:
                row.update(ratio=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios))
            probes = [p["ratio"] for r in mine for p in r.get("line", {}).get("probes", []) if p.get("measured")]
            if probes:
                row["probe_ratio"] = statistics.median(probes)
            shares = [r["line"]["percent"] for r in mine if r.get("line", {}).get("percent") is not None]
            if shares:
                row["estimate_percent_of_wall"] = statistics.median(shares)
            bounds = [r["line"]["at_most_percent"] for r in mine if r.get("line", {}).get("at_most_percent") is not None]
            if bounds:
                row["at_most_percent"] = statistics.median(bounds)
            compiles = [r["compile"] for r in mine if r.get("compile")]
            if compiles:
                row["compile"] = compiles[0]
                row["compile_all_equal"] = all(c == compiles[0] for c in compiles)
            out.append(row)
    return out


def markdown(summary: list[dict[str, Any]], modes: list[str]) -> str:
    """One row per program: the untraced time, each mode's ratio (median, range), and the checks."""
    traced = [m for m in modes if m != "untraced"]
    head = ["program", "untraced ms/it", *[f"{m} (range)" for m in traced], "probe said", "default target",
            "compile counters untraced / default"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    by = {(s["program"], s["mode"]): s for s in summary}
    for name in dict.fromkeys(s["program"] for s in summary):
        u = by.get((name, "untraced"), {})
        cells = [name, f"{u['ms_per_iteration']:.3f}" if "ms_per_iteration" in u else "failed"]
        for m in traced:
            s = by.get((name, m), {})
            cells.append(f"{s['ratio']:.2f}x ({s['ratio_min']:.2f}-{s['ratio_max']:.2f})" if "ratio" in s
                         else ("failed" if s.get("failed") else "-"))
        d = by.get((name, "default"), {})
        cells.append(f"{d['probe_ratio'] - 1:+.0%}" if "probe_ratio" in d else "no probe")
        cells.append(target(by, name))
        c_u, c_d = u.get("compile"), d.get("compile")
        cells.append(f"{_counters(c_u)} / {_counters(c_d)}" if c_u or c_d else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def target(by: dict[tuple[str, str], dict[str, Any]], name: str) -> str:
    """Whether the default meets its target: at most torch.profiler's ratio, and at most 1.15x or the
    floor's ratio x 1.05 where the floor is higher."""
    d, f, t = by.get((name, "default"), {}), by.get((name, "floor"), {}), by.get((name, "torch-profiler"), {})
    if "ratio" not in d:
        return "-"
    limit = max(1.15, f["ratio"] * 1.05) if "ratio" in f else 1.15
    ok = d["ratio"] <= limit and ("ratio" not in t or d["ratio"] <= t["ratio"] + TIE)
    return f"{'met' if ok else 'missed'} (<= {limit:.2f}x{', <= torch.profiler' if 'ratio' in t else ''})"


# Two medians this close are a tie: the untraced runs of one program repeat within about 2% on one
# GPU lane, so 1.01x against 1.00x says neither profiler costs anything measurable there.
TIE = 0.02
ROUNDS_APART = 1000  # the rounds of the n-th summarized file are numbered from n x this


def _counters(c: dict[str, int] | None) -> str:
    if not c:
        return "-"
    return f"{c.get('frames_compiled', 0)} frames, {c.get('graph_breaks', 0)} breaks, {c.get('recompiles', 0)} recompiles"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help="comma-separated program names (default: every client program)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iterations", type=int, help="iterations of each plain run (default: the program's)")
    p.add_argument("--program-args", default="", help="more arguments of every program (\"--device cpu --quick\")")
    p.add_argument("--scale", type=float, default=1.0, help="run each program for this share of its iterations")
    p.add_argument("--gpus", type=int, default=1, help="workers, one per GPU (CUDA_VISIBLE_DEVICES)")
    p.add_argument("--cores-per-gpu", type=int, default=0, help="pin each worker to this many cores (0: no pinning)")
    p.add_argument("--previous", help="the src folder of the previous version (mode previous)")
    p.add_argument("--previous-programs", help="run the previous version on these programs only (comma-separated)")
    p.add_argument("--budget-s", type=float, help="start a round only while it fits in this many seconds")
    p.add_argument("--run-timeout-s", type=float, default=240.0)
    p.add_argument("--out", required=True)
    p.add_argument("--md")
    p.add_argument("--summarize", nargs="+", metavar="RUNS_JSONL", help="only summarize these runs (of cut-off calls)")
    args = p.parse_args()
    if args.summarize:
        # each file's rounds kept apart (every call numbers its rounds from 0; a ratio pairs a run with
        # the untraced run of its own round)
        runs = [{**json.loads(line), "call": i} for i, f in enumerate(args.summarize) for line in open(f)
                if line.strip()]
        for r in runs:
            r["round"] += ROUNDS_APART * r["call"]
        names = list(dict.fromkeys(r["program"] for r in runs))
        modes = [m for m in args.modes.split(",") if any(r["mode"] == m for r in runs)]
        rounds = len({r["round"] for r in runs})
        finish(args, runs, names, modes, rounds, "from " + ", ".join(args.summarize))
        return
    names = programs(args.only)
    modes = [m for m in args.modes.split(",") if m != "previous" or args.previous]
    outside = tempfile.TemporaryDirectory(prefix="real-cost-src-")  # mode elsewhere's copy, kept to the end
    args.elsewhere = str(Path(outside.name) / "src")
    if "elsewhere" in modes:
        shutil.copytree(ROOT / "src", args.elsewhere, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    runs: list[dict[str, Any]] = []
    lock = threading.Lock()
    began = time.perf_counter()
    # deal the programs round-robin over the workers, each worker a GPU and its own cores
    shares = [names[i::args.gpus] for i in range(args.gpus)]
    threads = []
    for i, mine in enumerate(shares):
        cores = (f"{i * args.cores_per_gpu}-{(i + 1) * args.cores_per_gpu - 1}" if args.cores_per_gpu else None)
        gpu = i if args.gpus > 1 else None
        th = threading.Thread(target=worker, args=(gpu, cores, mine, modes, args, runs, lock, began))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    finish(args, runs, names, modes, args.rounds, f"{args.gpus} worker(s)")


def finish(args: argparse.Namespace, runs: list[dict[str, Any]], names: list[str], modes: list[str], rounds: int,
           how: str) -> None:
    """Write the runs and their summary (``--out``), and the table (``--md``, and stdout)."""
    summary = summarize(runs, names, modes)
    recorded = sorted({r["device"] for r in runs if r.get("device")})  # as the runs said (summarized elsewhere)
    device = ", ".join(recorded) if recorded else _device()
    doc = {"device": device, "date": time.strftime("%Y-%m-%d"), "rounds": rounds, "modes": modes,
           "runs": runs, "summary": summary}
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=1)
    table = markdown(summary, modes)
    print(table)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(f"{device}, {doc['date']}, up to {rounds} rounds, {how}\n\n{table}\n")


def _device() -> str:
    """The GPU's name as nvidia-smi gives it, or "unknown"."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out[0] if out else "unknown"


if __name__ == "__main__":
    main()

"""Cost of ``--trace memory`` on the launch-bound benchmark: mean step time with and without ``memory`` added to
the collectors, runs interleaved (bench/overhead.py's way: a fresh process per run, each mode once per round in
a rotating order, ratios taken within a round, their median and range over rounds).

    python3 bench/memory_overhead.py --rounds 5 --out memory_overhead.json --md memory_overhead.md   # GPU
    python3 bench/memory_overhead.py --device cpu --rounds 7 --inprocess --out memory_overhead_cpu.json  # CPU

GPU: tests/device/workloads/mlp.py (8 x Linear(1024) + ReLU, batch 256: about 180 short kernels a step), modes
``untraced``, ``default`` (the GPU default collectors), ``default+memory`` (the allocator's history and
CUPTI's memory records) and ``default+memory-nocupti`` (the allocator's history alone). CPU:
bench/workloads/mlp_cpu.py (the same MLP, 64 wide, batch 32, one thread), modes ``untraced``, ``default``
(the CPU default) and ``default+memory`` (PyTorch's CPU storages through a dispatch mode). The ratio that
matters is ``default+memory`` over ``default`` of the same round.
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
GPU_DEFAULT = "cuda,nvtx,torch,torch-shapes,host,nvml"
CPU_DEFAULT = "torch,torch-shapes,cpu,host"
# the CUPTI kinds of the GPU default, without the memory records (activity.py's labels)
NO_CUPTI_MEMORY = {"GPUSCOPE_CUPTI_KINDS": "kernel,device,context,memcpy,memset,overhead,nvtx"}
MODES: dict[str, dict[str, tuple[str | None, dict[str, str]]]] = {
    "gpu": {"untraced": (None, {}), "default": (GPU_DEFAULT, {}), "default+memory": (GPU_DEFAULT + ",memory", {}),
            "default+memory-nocupti": (GPU_DEFAULT + ",memory", NO_CUPTI_MEMORY)},
    "cpu": {"untraced": (None, {}), "default": (CPU_DEFAULT, {}), "default+memory": (CPU_DEFAULT + ",memory", {})},
}
WORKLOAD = {
    "gpu": [str(ROOT / "tests" / "device" / "workloads" / "mlp.py"), "--steps", "300", "--warmup", "30"],
    "cpu": [str(ROOT / "bench" / "workloads" / "mlp_cpu.py"), "--steps", "300", "--warmup", "30"],
}


def run(device: str, mode: str, scratch: str) -> dict:
    """Run the workload once in ``mode``; return its timing JSON (mean_step_s, median_step_s, ...)."""
    trace, env = MODES[device][mode]
    timing = os.path.join(scratch, "timing.json")
    if os.path.exists(timing):
        os.unlink(timing)
    argv = [sys.executable, *WORKLOAD[device], "--timing-out", timing]
    if trace:
        argv = [sys.executable, "-m", "gpuscope", "profile", "-t", trace, "-o", os.path.join(scratch, "r"),
                "--force-overwrite", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env}, check=False)
    if proc.returncode != 0 or not os.path.exists(timing):
        raise SystemExit(f"{mode} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(Path(timing).read_text())


def summarize(runs: list[dict], modes: list[str]) -> list[dict]:
    """Per mode: its mean step, and its ratio to ``default`` and to ``untraced`` of the same round."""
    by = {(r["round"], r["mode"]): r for r in runs}
    out = []
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode]
        row: dict = {"mode": mode, "rounds": len(mine),
                     "mean_step_ms": statistics.median(r["mean_step_s"] for r in mine) * 1e3,
                     "mean_step_ms_min": min(r["mean_step_s"] for r in mine) * 1e3,
                     "mean_step_ms_max": max(r["mean_step_s"] for r in mine) * 1e3}
        for base in ("default", "untraced"):
            ratios = [r["mean_step_s"] / by[(r["round"], base)]["mean_step_s"] for r in mine
                      if (r["round"], base) in by]
            of_medians = [r["median_step_s"] / by[(r["round"], base)]["median_step_s"] for r in mine
                          if (r["round"], base) in by]
            row[f"vs_{base}"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
                                 "of_median_steps": statistics.median(of_medians)}
        out.append(row)
    return out


def markdown(summary: list[dict]) -> str:
    """The summary as a markdown table."""
    lines = [("| mode | mean step (ms), median over rounds (min - max) | vs `default`: median (min - max) | "
              "vs `default`, of median steps | vs untraced |"), "| --- | --- | --- | --- | --- |"]
    for s in summary:
        d, u = s["vs_default"], s["vs_untraced"]
        lines.append(f"| {s['mode']} | {s['mean_step_ms']:.3f} ({s['mean_step_ms_min']:.3f} - "
                     f"{s['mean_step_ms_max']:.3f}) | {d['median']:.3f} ({d['min']:.3f} - {d['max']:.3f}) | "
                     f"{d['of_median_steps']:.3f} | {u['median']:.3f} |")
    return "\n".join(lines)


def inprocess(rounds: int, steps: int = 200) -> dict[str, list[float]]:
    """CPU only, in this process: the median step of the CPU MLP plain, under an empty ``TorchDispatchMode`` (what
    PyTorch's Python dispatch alone costs) and under the memory recorder, interleaved; return the medians (s)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from gpuscope.capture.python.stacks import StackTable
    from gpuscope.capture.python.torch_memory import TorchMemory

    class Empty(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(8):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    model, x = torch.nn.Sequential(*layers), torch.randn(32, 64)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def median_step() -> float:
        times = []
        for i in range(steps + 20):
            t = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            opt.step()
            if i >= 20:
                times.append(time.perf_counter() - t)
        return statistics.median(times)

    out: dict[str, list[float]] = {"plain": [], "empty dispatch mode": [], "memory recorder": []}
    for _ in range(rounds):
        out["plain"].append(median_step())
        with Empty():
            out["empty dispatch mode"].append(median_step())
        rec = TorchMemory(0, StackTable(), lambda *a: None)
        rec.install(torch)
        try:
            out["memory recorder"].append(median_step())
        finally:
            rec.close()
            rec.take_rows()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", required=True, help="JSON of every run and the summary")
    p.add_argument("--md", help="write the markdown table here too")
    p.add_argument("--inprocess", action="store_true", help="CPU: also split the cost in this process (see inprocess)")
    args = p.parse_args()
    if args.inprocess:
        split = inprocess(args.rounds)
        for name, ts in split.items():
            print(f"in process: {name:20s} median step {statistics.median(ts) * 1e3:.3f} ms "
                  f"({min(ts) * 1e3:.3f} - {max(ts) * 1e3:.3f})", flush=True)
    modes = list(MODES[args.device])
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for rnd in range(args.rounds):
            for mode in modes[rnd % len(modes):] + modes[:rnd % len(modes)]:
                doc = run(args.device, mode, scratch)
                runs.append({"round": rnd, "mode": mode, **doc})
                print(f"round {rnd} {mode:24s} mean step {doc['mean_step_s'] * 1e3:8.3f} ms "
                      f"median {doc['median_step_s'] * 1e3:8.3f} ms", flush=True)
    summary = summarize(runs, modes)
    doc = {"device": args.device, "runs": runs, "summary": summary, "inprocess_s": split if args.inprocess else None}
    Path(args.out).write_text(json.dumps(doc, indent=1))
    table = markdown(summary)
    print(table)
    if args.md:
        Path(args.md).write_text(f"{args.device}, {time.strftime('%Y-%m-%d')}, {args.rounds} rounds\n\n{table}\n")


if __name__ == "__main__":
    main()

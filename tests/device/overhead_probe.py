"""Where the collection overhead comes from, measured inside one process.

A launch-bound MLP step loop runs in blocks; between blocks the CUPTI activity kinds (and other
settings) change. Every round runs each configuration once, in order, so drifts of the machine
hit them all; each configuration's block time is compared with the 'idle' block of its round
(CUPTI attached, nothing enabled). The first blocks run before CUPTI is touched at all, to show
what attaching alone costs. gpuscope's real collector ships the records (to a scratch spool).

    python3 tests/device/overhead_probe.py --out probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "src"))
from gpuscope.capture.cupti.activity import CuptiCollector  # noqa: E402
from gpuscope.capture.cupti.callbacks import CallbackHub  # noqa: E402
from gpuscope.capture.cupti.graph_launches import GraphLaunches  # noqa: E402
from gpuscope.capture.python.ranges import RangeRecorder  # noqa: E402
from gpuscope.spool import SpoolWriter  # noqa: E402
from gpuscope.capture.python.stacks import StackTable  # noqa: E402
from gpuscope.capture.cupti.sync_sites import SyncSites  # noqa: E402
from gpuscope.capture.python.torch_hooks import TorchHooks  # noqa: E402


def build(width: int = 1024, layers: int = 8, batch: int = 256):
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width, device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    return step


def block(step, steps: int) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / steps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=150)
    args = p.parse_args()
    recorder = RangeRecorder()
    hooks = TorchHooks(recorder, lambda lvl, m: print("diag", lvl, m))
    hooks.install(torch)  # installed before the model is built, as under gpuscope
    hooks._disabled = True
    step = build()
    for _ in range(30):
        step()
    pristine = [block(step, args.steps) for _ in range(3)]

    from cupti import cupti

    K = cupti.ActivityKind
    spool = tempfile.mkdtemp()
    writer = SpoolWriter(spool)
    col = CuptiCollector(writer, {"cuda"}, lambda lvl, m: print("diag", lvl, m))
    col.bind(cupti, __import__("numpy"))
    mode = {"cb": "ship"}
    counted = [0]

    def on_complete(acts):
        if mode["cb"] == "count":
            counted[0] += len(acts)
        else:
            col._on_complete(acts)

    cupti.activity_register_callbacks(col._on_request, on_complete)
    flusher = {"on": False}

    def flush_loop():
        while True:
            time.sleep(0.5)
            if flusher["on"]:
                cupti.activity_flush_all(0)

    threading.Thread(target=flush_loop, daemon=True).start()

    hub = CallbackHub(cupti, lambda lvl, m: print("diag", lvl, m))
    hub.start()
    sites = SyncSites(hub, StackTable(), 0)
    GraphLaunches(hub, 0)
    hub.set_enabled(False)

    base = [K.CONCURRENT_KERNEL]
    mem = base + [K.MEMCPY, K.MEMSET]
    configs = {
        "idle": dict(kinds=[]),
        "kernel": dict(kinds=base),
        "kernel_count_only_cb": dict(kinds=base, cb="count"),
        "kernel_latency": dict(kinds=base, latency=True),
        "kernel_mem": dict(kinds=mem),
        "kernel_mem_sync": dict(kinds=mem + [K.SYNCHRONIZATION]),
        "kernel_mem_overhead": dict(kinds=mem + [K.OVERHEAD]),
        "default_no_flush": dict(kinds=mem + [K.SYNCHRONIZATION, K.OVERHEAD], latency=True),
        "default": dict(kinds=mem + [K.SYNCHRONIZATION, K.OVERHEAD], latency=True, flush=True),
        "new_default": dict(kinds=mem + [K.OVERHEAD], latency=True, flush=True, callbacks=True),
        "callbacks_only": dict(kinds=[], callbacks=True),
        "hooks_only": dict(kinds=[], hooks="backward"),
        "hooks_forward_only": dict(kinds=[], hooks="forward"),
        "new_default_hooks": dict(kinds=mem + [K.OVERHEAD], latency=True, flush=True, callbacks=True,
                                  hooks="backward"),
        "new_default_hooks_forward": dict(kinds=mem + [K.OVERHEAD], latency=True, flush=True, callbacks=True,
                                          hooks="forward"),
        "default_plus_api": dict(kinds=mem + [K.SYNCHRONIZATION, K.OVERHEAD, K.RUNTIME, K.DRIVER],
                                 latency=True, flush=True),
    }
    results: dict[str, list[float]] = {name: [] for name in configs}
    enabled: list = []
    for rnd in range(args.rounds):
        for name, cfg in configs.items():
            for k in enabled:
                cupti.activity_disable(k)
            cupti.activity_flush_all(1)
            enabled = list(cfg["kinds"])
            for k in enabled:
                cupti.activity_enable(k)
            cupti.activity_enable_latency_timestamps(1 if cfg.get("latency") else 0)
            mode["cb"] = cfg.get("cb", "ship")
            flusher["on"] = bool(cfg.get("flush"))
            hub.set_enabled(bool(cfg.get("callbacks")))
            hooks._disabled = "hooks" not in cfg
            hooks.backward = cfg.get("hooks") == "backward"
            recorder.take()
            sites.take()
            block(step, 20)  # settle
            results[name].append(block(step, args.steps))
        print(f"round {rnd}: " + ", ".join(f"{n} {v[-1] * 1e3:.3f}" for n, v in results.items()), flush=True)
    for k in enabled:
        cupti.activity_disable(k)
    cupti.activity_flush_all(1)
    summary = {}
    for name, vals in results.items():
        ratios = [v / i for v, i in zip(vals, results["idle"])]
        summary[name] = {"step_ms_median": statistics.median(vals) * 1e3,
                         "ratio_median": statistics.median(ratios),
                         "ratio_min": min(ratios), "ratio_max": max(ratios)}
    doc = {"pristine_step_ms": [x * 1e3 for x in pristine], "summary": summary,
           "collector": {"records": col.records, "buffers": col.buffers, "callback_ms": col.callback_ns / 1e6,
                         "copied_buffers": col.copied_buffers, "counted_only": counted[0]}}
    json.dump(doc, open(args.out, "w"), indent=1)
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()

"""Time a program's variants interleaved, as ``harness.py --measure`` does, with the GPU's clocks and
power read through NVML during each timed window: whether removing the GPU's idle gaps (a host
sync, launch gaps) gains their length, or whether the GPU then runs slower (power or thermal limits).

    python tests/device/gap_truth.py tests/workloads/sync_not_bottleneck.py as_written no_item \
        --rounds 12 --iterations 60 > gap.json

Per variant and round: seconds per iteration, and over the window the median SM clock (MHz),
median power (W), and the fraction of NVML samples whose clock-event reasons held a power cap,
a thermal slowdown or a hardware slowdown. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

# NVML clock-event ("throttle") reason bits, as nvml.h defines them
REASONS = {"power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40, "power_brake": 0x80}


class Sampler:
    """Reads NVML every ``period_s`` in a thread while ``window`` is open; keeps the samples per window."""

    def __init__(self, period_s: float = 0.005) -> None:
        import pynvml

        self.nv = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.period_s = period_s
        self.samples: list[tuple[float, float, int]] = []
        self.on = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1e3
        self.max_clock = pynvml.nvmlDeviceGetMaxClockInfo(self.handle, pynvml.NVML_CLOCK_SM)

    def _reasons(self) -> int:
        fn = getattr(self.nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            self.nv.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(fn(self.handle))

    def _run(self) -> None:
        while not self.stop.is_set():
            if self.on.wait(0.05):
                clock = self.nv.nvmlDeviceGetClockInfo(self.handle, self.nv.NVML_CLOCK_SM)
                power = self.nv.nvmlDeviceGetPowerUsage(self.handle) / 1e3
                self.samples.append((float(clock), power, self._reasons()))
                time.sleep(self.period_s)

    def window(self) -> "_Window":
        """A context whose samples are returned by its ``summary``."""
        return _Window(self)


class _Window:
    def __init__(self, sampler: Sampler) -> None:
        self.s = sampler
        self.start = 0

    def __enter__(self) -> "_Window":
        self.start = len(self.s.samples)
        self.s.on.set()
        return self

    def __exit__(self, *exc: object) -> None:
        self.s.on.clear()
        self.taken = self.s.samples[self.start:]

    def summary(self) -> dict[str, Any]:
        rows = self.taken
        if not rows:
            return {"samples": 0}
        doc: dict[str, Any] = {"samples": len(rows), "sm_clock_mhz": statistics.median(r[0] for r in rows),
                               "power_w": statistics.median(r[1] for r in rows)}
        for name, bit in REASONS.items():
            doc[name] = sum(1 for r in rows if r[2] & bit) / len(rows)
        return doc


def _program(path: str) -> Any:
    sys.path.insert(0, str(Path(path).resolve().parent))
    spec = importlib.util.spec_from_file_location("program_under_test", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("program")
    p.add_argument("variants", nargs="+")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    import torch

    mod = _program(args.program)
    harness = sys.modules["harness"]
    setup = harness.Setup(torch.device("cuda"))
    steps = {}
    for name in args.variants:
        steps[name] = mod.PROGRAM.build(name, setup)
        for _ in range(args.warmup):
            steps[name]()
    torch.cuda.synchronize()
    sampler = Sampler()
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in args.variants}
    for r in range(args.rounds):
        order = args.variants if r % 2 == 0 else list(reversed(args.variants))
        for name in order:
            step = steps[name]
            for _ in range(3):
                step()
            torch.cuda.synchronize()
            with sampler.window() as w:
                t0 = time.perf_counter()
                for _ in range(args.iterations):
                    step()
                torch.cuda.synchronize()
                dt = (time.perf_counter() - t0) / args.iterations
            rounds[name].append({"s_per_iteration": dt, **w.summary()})
    sampler.stop.set()
    base = args.variants[0]
    doc: dict[str, Any] = {"program": mod.PROGRAM.name, "device": torch.cuda.get_device_name(),
                           "power_limit_w": sampler.limit_w, "max_sm_clock_mhz": sampler.max_clock,
                           "rounds": args.rounds, "iterations": args.iterations, "variants": {}}
    for name, rows in rounds.items():
        gains = [1 - row["s_per_iteration"] / b["s_per_iteration"] for row, b in zip(rows, rounds[base])]
        doc["variants"][name] = {
            "median_ms": statistics.median(r["s_per_iteration"] for r in rows) * 1e3,
            "gain_vs_first": {"median": statistics.median(gains), "min": min(gains), "max": max(gains)},
            "median_sm_clock_mhz": statistics.median(r.get("sm_clock_mhz", 0) for r in rows),
            "median_power_w": statistics.median(r.get("power_w", 0) for r in rows),
            "power_cap_share": statistics.median(r.get("power_cap", 0) for r in rows),
            "rounds": rows,
        }
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()

"""CUPTI's own cost on a step loop, inside one process, with no gpuscope agent: the floor.

Fresh processes of one loop differ by 25-35% on the lent machines, so the cost of CUPTI's kernel
records (a few per cent) does not resolve between processes. Here one untraced process attaches
CUPTI, runs a block of steps, detaches it (``cuptiFinalize``) and attaches it again in another
state, round after round, order reversed every other round. The states:

- ``bare``: CUPTI detached (after a first attach: what is left of it is in every state);
- ``attached``: buffers registered, no record kind on;
- ``kernel``: kernel records (CONCURRENT_KERNEL) alone;
- ``kernel+copies``: with memory copies and sets;
- ``records``: gpuscope's default record kinds (kernels, copies, sets, devices, contexts, overhead);
- ``subscribed``: the callback subscriber with gpuscope's default callbacks on (synchronization
  calls, graph launches, the anchor call), no records;
- ``records+subscribed``: both, as under gpuscope's default;
- ``latency``: kernel records with CUPTI's latency timestamps (``queued``/``submitted``);
- ``always-on``: the kinds a capture window leaves on (devices, contexts, overhead, memory), and
  ``only-device``, ``only-context``, ``only-overhead``, ``only-memory``, ``only-memory-pool`` one
  by one (``--states`` picks states; the default is the list above ``always-on``).

Buffers go through gpuscope's C callbacks (handoff.c) and are read and dropped after each block,
so no Python runs on CUPTI's thread. Each block: wall time per step (the step ends with a sync) and
the main thread's CPU time per step. ``pristine`` blocks run before CUPTI is ever loaded (not
interleaved: a check on ``bare``). The kernel records of a few steps count the launches per step,
which turn each state's extra time into a cost per launch.

    python tests/device/cupti_floor.py --workload mlp --out floor_mlp.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(__file__))
from where_cost import gpt_step, mlp_step  # noqa: E402

from gpuscope.capture.cupti.graph_launches import GRAPH_LAUNCH_APIS  # noqa: E402
from gpuscope.capture.cupti.launch_anchors import ANCHOR_API  # noqa: E402
from gpuscope.capture.cupti.sync_sites import SYNC_APIS  # noqa: E402

DEV = "cuda"
STATES = ["bare", "attached", "kernel", "kernel+copies", "records", "subscribed", "records+subscribed", "latency"]
# what gpuscope's default subscribes to: synchronization calls, graph launches, the anchor call
CALLBACK_APIS = [*SYNC_APIS, *GRAPH_LAUNCH_APIS, ANCHOR_API]


def workload(name: str) -> Callable[[], None]:
    if name == "mlp":
        return mlp_step()
    if name in ("gpt", "gpt-compiled"):
        return gpt_step(compiled=name == "gpt-compiled")
    if name == "launch":  # 200 one-element kernels a step: the cost of a launch, and nothing else
        t = torch.zeros(1, device=DEV)

        def step() -> None:
            for _ in range(200):
                t.add_(1.0)
        return step
    if name == "gemm":
        a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)

        def step() -> None:
            for _ in range(4):
                a @ b
        return step
    raise SystemExit(f"unknown workload {name}")


class Cupti:
    """CUPTI attached and detached through its C API, buffers through gpuscope's C callbacks."""

    def __init__(self) -> None:
        from cupti import cupti

        from gpuscope.capture.cupti import native
        from gpuscope.capture.cupti.activity import loaded_library
        from gpuscope.capture.cupti.callbacks import base_name

        cupti.get_timestamp()
        self.cupti = cupti
        self.lib = ctypes.CDLL(loaded_library("libcupti.so"))
        self.next_record = self.lib.cuptiActivityGetNextRecord
        self.next_record.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        self.next_record.restype = ctypes.c_int
        self.shim = native.load()
        self.shim.gs_set_buffer_size(8 << 20)
        k = cupti.ActivityKind
        self.kinds = {
            "kernel": [int(k.CONCURRENT_KERNEL)],
            "kernel+copies": [int(k.CONCURRENT_KERNEL), int(k.MEMCPY), int(k.MEMSET)],
            "records": [int(k.CONCURRENT_KERNEL), int(k.DEVICE), int(k.CONTEXT), int(k.MEMCPY), int(k.MEMSET),
                        int(k.OVERHEAD)],
            "latency": [int(k.CONCURRENT_KERNEL)],
        }
        self.kinds["records+subscribed"] = self.kinds["records"]
        # the kinds a capture window leaves on (activity.ALWAYS_ON), together and one by one
        self.kinds["always-on"] = [int(k.DEVICE), int(k.CONTEXT), int(k.OVERHEAD), int(k.MEMORY2),
                                   int(k.MEMORY_POOL)]
        for name, kind in (("device", k.DEVICE), ("context", k.CONTEXT), ("overhead", k.OVERHEAD),
                           ("memory", k.MEMORY2), ("memory-pool", k.MEMORY_POOL)):
            self.kinds[f"only-{name}"] = [int(kind)]
        self.callbacks: list[tuple[int, int]] = []
        wanted = set(CALLBACK_APIS)
        for domain, enum in ((int(cupti.CallbackDomain.RUNTIME_API), cupti.runtime_api_trace_cbid),
                             (int(cupti.CallbackDomain.DRIVER_API), cupti.driver_api_trace_cbid)):
            for member in enum:
                if base_name(member.name) in wanted:
                    self.callbacks.append((domain, int(member.value)))
        self.enabled: list[int] = []
        self.subscriber: Any = None
        self.state = "pristine"

    def enter(self, state: str) -> None:
        self.state = state
        if state == "bare":
            return
        rc = self.lib.cuptiActivityRegisterCallbacks(ctypes.cast(self.shim.gs_requested, ctypes.c_void_p),
                                                     ctypes.cast(self.shim.gs_completed, ctypes.c_void_p))
        assert rc == 0, f"register {rc}"
        for kind in self.kinds.get(state, []):
            rc = self.lib.cuptiActivityEnable(ctypes.c_int(kind))
            assert rc == 0, f"enable {kind}: {rc}"
            self.enabled.append(kind)
        if state == "latency":
            assert self.lib.cuptiActivityEnableLatencyTimestamps(ctypes.c_uint8(1)) == 0
        if "subscribed" in state:
            handle = ctypes.c_void_p()
            rc = self.lib.cuptiSubscribe(ctypes.byref(handle), ctypes.cast(self.shim.gs_api_callback, ctypes.c_void_p),
                                         None)
            assert rc == 0, f"subscribe {rc}"
            self.subscriber = handle
            for domain, cbid in self.callbacks:
                rc = self.lib.cuptiEnableCallback(ctypes.c_uint32(1), handle, ctypes.c_int(domain),
                                                  ctypes.c_uint32(cbid))
                assert rc == 0, f"callback {domain}/{cbid}: {rc}"

    def leave(self) -> int:
        """Detach; return the records of the kernel kind that arrived (0 where none was on)."""
        if self.state in ("bare", "pristine"):
            return 0
        torch.cuda.synchronize()
        if self.state == "latency":
            self.lib.cuptiActivityEnableLatencyTimestamps(ctypes.c_uint8(0))
        self.lib.cuptiActivityFlushAll(ctypes.c_uint32(1))
        for kind in self.enabled:
            self.lib.cuptiActivityDisable(ctypes.c_int(kind))
        self.enabled = []
        if self.subscriber is not None:
            self.lib.cuptiUnsubscribe(self.subscriber)
            self.subscriber = None
        rc = self.lib.cuptiFinalize()
        assert rc == 0, f"finalize {rc}"
        return self.drain()

    def drain(self) -> int:
        """Read and drop the queued buffers; return how many kernel records they held."""
        n = 0
        ptr, valid = ctypes.c_void_p(), ctypes.c_size_t()
        rec = ctypes.c_void_p()
        kernel = int(self.cupti.ActivityKind.CONCURRENT_KERNEL)
        while self.shim.gs_pop(ctypes.byref(ptr), ctypes.byref(valid)):
            rec.value = None
            while self.next_record(ptr, valid, ctypes.byref(rec)) == 0 and rec.value:
                n += ctypes.c_uint32.from_address(rec.value).value == kernel
            self.shim.gs_release(ptr, valid)
        return n


def block(step: Callable[[], None], steps: int) -> dict[str, float]:
    torch.cuda.synchronize()
    c0 = time.thread_time_ns()
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        step()
        torch.cuda.synchronize()
    t1 = time.perf_counter_ns()
    c1 = time.thread_time_ns()
    return {"wall_us": (t1 - t0) / steps / 1e3, "cpu_us": (c1 - c0) / steps / 1e3}


def kernels_per_step(step: Callable[[], None], c: Cupti, steps: int = 10) -> float:
    """Kernels a step launches: kernel records over ``steps`` steps."""
    c.enter("kernel")
    for _ in range(steps):
        step()
    return c.leave() / steps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="mlp")
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--states", default=",".join(STATES))
    args = p.parse_args()
    states = args.states.split(",")
    step = workload(args.workload)
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    pristine = [block(step, args.steps) for _ in range(4)]
    c = Cupti()
    launches = kernels_per_step(step, c)
    rounds: list[dict[str, dict[str, float]]] = []
    for r in range(args.rounds):
        order = states if r % 2 == 0 else list(reversed(states))
        got = {}
        for state in order:
            c.enter(state)
            step()  # the first step after attaching pays for it
            got[state] = block(step, args.steps)
            c.leave()
        rounds.append(got)
    out: dict[str, Any] = {"workload": args.workload, "kernels_per_step": launches, "rounds": rounds,
                           "pristine": pristine, "device": torch.cuda.get_device_name()}
    summary = {}
    for state in states:
        ratios = sorted(rd[state]["wall_us"] / rd["bare"]["wall_us"] for rd in rounds)
        cpu = sorted(rd[state]["cpu_us"] - rd["bare"]["cpu_us"] for rd in rounds)
        wall = sorted(rd[state]["wall_us"] - rd["bare"]["wall_us"] for rd in rounds)
        summary[state] = {
            "wall_ratio_median": statistics.median(ratios), "wall_ratio_q1_q3": (ratios[len(ratios) // 4],
                                                                                ratios[3 * len(ratios) // 4]),
            "wall_us_median": statistics.median(rd[state]["wall_us"] for rd in rounds),
            "extra_wall_us_per_launch": statistics.median(wall) / launches if launches else None,
            "extra_cpu_us_per_launch": statistics.median(cpu) / launches if launches else None,
        }
    out["summary"] = summary
    out["pristine_wall_us_median"] = statistics.median(b["wall_us"] for b in pristine)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"{args.workload}: {launches:.0f} kernels/step, pristine {out['pristine_wall_us_median']:.0f} µs")
    for state, s in summary.items():
        print(f"  {state:20s} wall x{s['wall_ratio_median']:.3f} (q1-q3 {s['wall_ratio_q1_q3'][0]:.3f}-"
              f"{s['wall_ratio_q1_q3'][1]:.3f}) {s['wall_us_median']:.0f} µs; per launch: wall "
              f"{s['extra_wall_us_per_launch']:+.2f} µs, cpu {s['extra_cpu_us_per_launch']:+.2f} µs")


if __name__ == "__main__":
    main()

"""What CUPTI's kernel records add to one launch, by the way the kernel is launched, in one process.

The end-of-run measurement (capture/cupti/launch_cost.py) launches an empty kernel; this checks it
against the launches programs make: PyTorch's elementwise kernels (one element, a million), a
small cuBLAS matmul, and the empty kernel through the driver and the runtime with no parameters
and with 512 bytes of them (PyTorch passes its tensor iterators by value). CUPTI is attached with
kernel records on, then detached, block by block (cupti_floor.py's way), 12 rounds, the order
reversed every other round.

    python tests/device/launch_paths.py --out launch_paths.json
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

import torch

sys.path.insert(0, os.path.dirname(__file__))
from cupti_floor import Cupti  # noqa: E402

from gpuscope.capture.cupti import launch_cost  # noqa: E402
from gpuscope.capture.cupti.activity import loaded_library  # noqa: E402

PARAM_KERNEL = b"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry gpuscope_params(.param .align 8 .b8 p[512])
{
    ret;
}
\0"""


def paths() -> dict[str, Callable[[int], None]]:
    torch.zeros(1, device="cuda")
    cuda = ctypes.CDLL(loaded_library("libcuda.so"))
    cudart = ctypes.CDLL(loaded_library("libcudart.so"))
    out: dict[str, Callable[[int], None]] = {}
    stream = ctypes.c_void_p()
    assert cuda.cuStreamCreate(ctypes.byref(stream), ctypes.c_uint(1)) == 0
    for name, image, entry in (("driver-empty", launch_cost.EMPTY_KERNEL, b"gpuscope_empty"),
                               ("driver-512B", PARAM_KERNEL, b"gpuscope_params")):
        module, fn = ctypes.c_void_p(), ctypes.c_void_p()
        assert cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(image)) == 0
        assert cuda.cuModuleGetFunction(ctypes.byref(fn), module, entry) == 0
        if entry == b"gpuscope_params":
            buf = (ctypes.c_uint8 * 512)()
            params = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
            u = ctypes.c_uint
            args = (fn, u(1), u(1), u(1), u(1), u(1), u(1), u(0), stream, params, None)
            out[name] = launch_cost.repeat(cuda.cuLaunchKernel, args, "cuLaunchKernel")
            out[name].keep = buf  # type: ignore[attr-defined]  # the parameters' bytes, alive with the launcher
        else:
            out[name] = launch_cost._driver_launcher(cuda, fn, stream)
    library = ctypes.c_void_p()
    rt = launch_cost._runtime_launcher(cudart, stream, library)
    if rt is not None:
        out["runtime-empty"] = rt
    one = torch.zeros(1, device="cuda")
    big = torch.zeros(1 << 20, device="cuda")
    a = torch.randn(64, 64, device="cuda")

    def add_one(n: int) -> None:
        for _ in range(n):
            one.add_(1.0)

    def add_big(n: int) -> None:
        for _ in range(n):
            big.add_(1.0)

    def mm(n: int) -> None:
        for _ in range(n):
            torch.mm(a, a)

    out.update({"torch-add-1": add_one, "torch-add-1M": add_big, "torch-mm-64": mm})
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--block", type=int, default=200)
    args = p.parse_args()
    launchers = paths()
    for f in launchers.values():
        f(50)
    torch.cuda.synchronize()
    c = Cupti()
    per: dict[str, dict[str, list[float]]] = {k: {"kernel": [], "bare": []} for k in launchers}
    for r in range(args.rounds):
        for state in (["kernel", "bare"] if r % 2 == 0 else ["bare", "kernel"]):
            c.enter(state)
            for name, f in launchers.items():
                f(10)
                torch.cuda.synchronize()
                t0 = time.perf_counter_ns()
                f(args.block)
                per[name][state].append((time.perf_counter_ns() - t0) / args.block)
                torch.cuda.synchronize()
            c.leave()
    out = {}
    for name, d in per.items():
        diffs = sorted(k - b for k, b in zip(d["kernel"], d["bare"]))
        out[name] = {"bare_ns": statistics.median(d["bare"]), "kernel_ns": statistics.median(d["kernel"]),
                     "extra_ns_median": statistics.median(diffs), "extra_ns_q1_q3": (diffs[len(diffs) // 4],
                                                                                     diffs[3 * len(diffs) // 4])}
        print(f"{name:15s} bare {out[name]['bare_ns']:7.0f} ns  kernel records {out[name]['kernel_ns']:7.0f} ns  "
              f"extra {out[name]['extra_ns_median']:6.0f} ns (q1-q3 {out[name]['extra_ns_q1_q3'][0]:.0f}-"
              f"{out[name]['extra_ns_q1_q3'][1]:.0f})")
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()

"""GPU-saturated regions timed with CUDA events, for checking kernel durations in a report.

Each region starts on an idle GPU (after a synchronize). A spin kernel (torch.cuda._sleep) keeps
the GPU busy while the start event and the region's kernels are queued behind it, so the events
time the kernels and not the host's launch latency. The CLOCK_MONOTONIC bounds of the region and
its CUDA-event time go to --out: the region's kernels are those of the report inside the bounds,
apart from the spin kernel.
"""

import argparse
import json
import time

import torch

SPIN_CYCLES = 100_000_000  # about 50 ms: far longer than it takes the host to queue a region

def regions():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    big = torch.randn(256 << 20, device="cuda")
    small = [torch.randn(4096, 4096, device="cuda") for _ in range(2)]
    yield "gemm_bf16_8192_x10", lambda: [torch.matmul(a, b) for _ in range(10)]
    yield "elementwise_1GB_x50", lambda: [big.mul_(1.0001) for _ in range(50)]
    yield "mixed_fp32_gemm_and_softmax_x20", lambda: [
        torch.softmax(small[0] @ small[1], dim=-1) for _ in range(20)
    ]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    results = []
    for name, fn in regions():
        fn()  # warm up (cuBLAS heuristics, allocator)
        torch.cuda.synchronize()
        for r in range(args.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            time.sleep(0.02)  # an idle gap separates regions in the trace
            t0 = time.monotonic_ns()
            torch.cuda._sleep(SPIN_CYCLES)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            t1 = time.monotonic_ns()
            results.append({"region": name, "repeat": r, "t0_monotonic_ns": t0,
                            "t1_monotonic_ns": t1, "event_ms": start.elapsed_time(end)})
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()

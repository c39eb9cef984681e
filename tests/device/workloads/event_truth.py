"""GPU-saturated regions timed with CUDA events, for checking kernel durations in a report.

Each region starts on an idle GPU (after a synchronize), queues its kernels without waiting, and
ends with a synchronize. The CLOCK_MONOTONIC bounds of the region and the CUDA-event time of it
go to --out; every kernel of the report inside those bounds belongs to the region.
"""

import argparse
import json
import time

import torch


def regions():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    big = torch.randn(64 << 20, device="cuda")
    small = [torch.randn(2048, 2048, device="cuda") for _ in range(2)]
    yield "gemm_bf16_8192_x10", lambda: [torch.matmul(a, b) for _ in range(10)]
    yield "elementwise_256MB_x100", lambda: [big.mul_(1.0001) for _ in range(100)]
    yield "mixed_fp32_gemm_and_softmax_x50", lambda: [
        torch.softmax(small[0] @ small[1], dim=-1) for _ in range(50)
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

"""Data-parallel training with NCCL: each rank on its own GPU where there are enough, else every rank on
GPU 0 (which NCCL refuses: "Duplicate GPU detected"). DDP by default, FSDP with ``--fsdp``.

    torchrun --nproc_per_node=2 tests/device/workloads/ddp_nccl.py [--steps N] [--slow-rank R] [--big-rank R]

``--slow-rank R``: rank R sleeps 5 ms in each step before its forward (a straggler); ``--big-rank R``:
rank R's batch is 4x larger (an imbalance); ``--torch-profiler DIR``: the training loop runs under
torch.profiler (CPU and CUDA activities), each rank's trace written to DIR after the loop. Each rank
prints one JSON line: its rank, its device, its mean step time, five 16 MB all-reduces timed with CUDA
events, and five windows of 20 bf16 GEMMs (4096 x 4096) timed with CUDA events (queued behind a GPU
sleep, so the window holds the GEMMs and nothing else); and writes it to ``--timing-dir``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--fsdp", action="store_true")
    p.add_argument("--timing-dir")
    p.add_argument("--torch-profiler")
    args = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    gpu = local if torch.cuda.device_count() > local else 0
    torch.cuda.set_device(gpu)
    dev = torch.device("cuda", gpu)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=60), device_id=dev)
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(2048, 2048), nn.ReLU())]).to(dev)
    if args.fsdp:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        model: nn.Module = FSDP(net, device_id=dev)
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net, device_ids=[gpu])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = 512 * (4 if rank == args.big_rank else 1)
    x = torch.randn(batch, 2048, device=dev)
    steps = []
    prof = None
    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        if rank == args.slow_rank:
            time.sleep(0.005)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        steps.append(time.perf_counter() - t0)
    if prof is not None:
        prof.__exit__(None, None, None)
        Path(args.torch_profiler).mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(Path(args.torch_profiler, f"rank{rank}.json")))
    buf = torch.ones(4 << 20, device=dev)  # 16 MB
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        torch.cuda.synchronize()
        a.record()
        dist.all_reduce(buf)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    m = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    (m @ m).sum().item()  # cuBLAS set up outside the windows
    gemm = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        torch.cuda._sleep(2_000_000)  # the GPU busy while the window's launches queue behind it
        a.record()
        for _ in range(20):
            m @ m
        b.record()
        torch.cuda.synchronize()
        gemm.append(a.elapsed_time(b))
    steady = steps[5:] or steps
    doc = {"rank": rank, "world": dist.get_world_size(), "gpu": gpu, "fsdp": args.fsdp, "batch": batch,
           "mean_step_ms": 1e3 * sum(steady) / len(steady), "all_reduce_16MB_ms": times,
           "gemm_window_ms": gemm, "gemm_per_window": 20}
    print(json.dumps(doc), flush=True)
    if args.timing_dir:
        Path(args.timing_dir).mkdir(parents=True, exist_ok=True)
        Path(args.timing_dir, f"rank{rank}.json").write_text(json.dumps(doc))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Data-parallel training with NCCL, every rank on GPU 0 (for a machine with one GPU): checks whether
NCCL accepts several ranks on one device there, and if it does, gives real NCCL kernels to record.

    torchrun --nproc_per_node=2 tests/device/workloads/ddp_shared_gpu.py [--steps N] [--slow-rank R]

Each rank prints its rank, its mean step time and its all-reduce times from CUDA events as JSON.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--slow-rank", type=int, default=-1, help="this rank sleeps 5 ms per step (a straggler)")
    args = p.parse_args()
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=60), device_id=torch.device("cuda", 0))
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DDP(nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)).cuda(), device_ids=[0])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024, device="cuda")
    steps = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        if rank == args.slow_rank:
            time.sleep(0.005)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        steps.append(time.perf_counter() - t0)
    buf = torch.ones(4 << 20, device="cuda")  # 16 MB all-reduce timed with CUDA events
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        a.record()
        dist.all_reduce(buf)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    print(json.dumps({"rank": rank, "world": dist.get_world_size(), "mean_step_ms": 1e3 * sum(steps[5:]) / max(1, len(steps) - 5),
                      "all_reduce_16MB_ms": times}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

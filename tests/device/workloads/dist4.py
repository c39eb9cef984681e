"""A transformer trained on every GPU of the host: FSDP, or a 2 x 2 mix of data and tensor parallelism.

    torchrun --nproc_per_node=4 tests/device/workloads/dist4.py --mode fsdp|tp [--steps N]
        [--slow-rank R] [--big-rank R] [--mlp-split A:B] [--batch B] [--seq T]
        [--timing-dir DIR] [--torch-profiler DIR] [--no-truth]

``--mode fsdp``: FSDP2 (``fully_shard``) over each block and the model, every rank one shard.
``--mode tp``: ranks form a 2 x 2 grid; the two ranks of a tensor-parallel group split each block's
attention heads and MLP hidden units (column-parallel in, row-parallel out, an all-reduce of the
activations in the forward and of the input's gradient in the backward, written by hand), and the two
ranks of a data-parallel group all-reduce their gradients in one flat bucket after the backward.

Planted problems: ``--slow-rank R``: rank R's data loading (a DataLoader over an IterableDataset)
sleeps 5 ms per batch, a straggler; ``--big-rank R`` (tp only): rank R takes 3/4 of its pair's MLP
hidden units where its peer takes 1/4, an imbalance between tensor-parallel shards (so does the rank
at R's place in every other pair, R's data-parallel replica, whose gradients must match R's);
``--mlp-split A:B`` sets the split (in units of the width: 15:1 against the balanced 8:8).
``--batch B --seq T`` (default 8 x 512 tokens) size each rank's batch: the default step is
launch-bound (its kernels are short, the GPU waits for the host), so an uneven split costs nothing
measurable; ``--batch 32 --seq 1024`` with ``--mlp-split 8:8`` or ``15:1`` makes the MLP's matmuls
most of the step (GPU-bound), so the larger shard's extra compute is what the other rank waits for.

After the training loop (unless ``--no-truth``), what a profile is checked against, each timed with
a CUDA event pair on the current stream, the launches queued behind a ``torch.cuda._sleep`` spin so
the host's launch latency stays out of the pair:
- collectives: 5 x an all-reduce of 64 MiB, an all-gather and a reduce-scatter of 64 MiB (whole
  buffer) on all ranks, and (tp) an all-reduce of 16 MiB in each tensor-parallel group; each
  after a barrier;
- five windows of 20 bf16 GEMMs (4096 x 4096).
Each rank prints one JSON line (its rank, groups, mean step time, the event times) and writes it to
``--timing-dir``. ``--torch-profiler DIR``: the training loop runs under torch.profiler (CPU and CUDA
activities), each rank's trace written to DIR.
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
import torch.nn.functional as F
from torch import nn

D, HEADS, LAYERS, SEQ, BATCH, VOCAB = 1024, 16, 4, 512, 8, 8192
COLL_BYTES, TP_BYTES = 64 << 20, 16 << 20


class Tokens(torch.utils.data.IterableDataset):
    """Random token batches; ``delay`` seconds of host work per batch (the planted straggler)."""

    def __init__(self, seed: int, delay: float, batch: int = BATCH, seq: int = SEQ) -> None:
        self.seed, self.delay, self.batch, self.seq = seed, delay, batch, seq

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        while True:
            if self.delay:
                time.sleep(self.delay)
            yield torch.randint(0, VOCAB, (self.batch, self.seq + 1), generator=g)


class ToTP(torch.autograd.Function):
    """Identity forward; all-reduce of the gradient over the tensor-parallel group in the backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        dist.all_reduce(g, group=ctx.group)
        return g, None


class FromTP(torch.autograd.Function):
    """All-reduce of the partial outputs over the tensor-parallel group; identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, None


class Block(nn.Module):
    """Pre-norm attention and MLP; with a group, this rank holds ``heads`` heads and ``hidden`` units."""

    def __init__(self, heads: int = HEADS, hidden: int = 4 * D, group=None) -> None:
        super().__init__()
        self.group, self.heads = group, heads
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * heads * (D // HEADS))
        self.proj = nn.Linear(heads * (D // HEADS), D, bias=group is None)
        self.up = nn.Linear(D, hidden)
        self.down = nn.Linear(hidden, D, bias=group is None)

    def _in(self, x):
        return ToTP.apply(x, self.group) if self.group is not None else x

    def _out(self, x):
        return FromTP.apply(x, self.group) if self.group is not None else x

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self._in(self.ln1(x))).view(b, t, 3, self.heads, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, -1)
        x = x + self._out(self.proj(a))
        return x + self._out(self.down(F.gelu(self.up(self._in(self.ln2(x))))))


class GPT(nn.Module):
    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(blocks)
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def timed(fn, spin_cycles: int = 1_000_000) -> float:
    """Milliseconds between a CUDA event pair around ``fn()``, queued behind a GPU spin."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(spin_cycles)
    a.record()
    fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b)


def truth(dev, world: int, tp_group, tp_ranks, all_reduce_only: bool = False) -> dict:
    out: dict = {}
    n = COLL_BYTES // 2  # bf16 elements
    full = torch.ones(n, device=dev, dtype=torch.bfloat16)
    shard = torch.ones(n // world, device=dev, dtype=torch.bfloat16)
    calls = [("all_reduce", None, lambda: dist.all_reduce(full), COLL_BYTES, world),
             ("all_gather", None, lambda: dist.all_gather_into_tensor(full, shard), COLL_BYTES, world),
             ("reduce_scatter", None, lambda: dist.reduce_scatter_tensor(shard, full), COLL_BYTES, world)]
    if all_reduce_only:
        calls = calls[:1]
    if tp_group is not None:
        small = torch.ones(TP_BYTES // 2, device=dev, dtype=torch.bfloat16)
        calls.append(("all_reduce", tp_ranks, lambda: dist.all_reduce(small, group=tp_group), TP_BYTES,
                      len(tp_ranks)))
    for kind, ranks, fn, nbytes, size in calls:
        fn()  # the first call of a kind sets NCCL up: outside the timing
        ms = []
        for _ in range(5):
            dist.barrier()
            ms.append(timed(fn))
        out.setdefault("collectives", []).append({"kind": kind, "group_ranks": ranks, "group_size": size,
                                                  "bytes": nbytes, "event_ms": ms})
    m = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    (m @ m).sum().item()
    out["gemm_window_ms"] = [timed(lambda: [m @ m for _ in range(20)], 2_000_000) for _ in range(5)]
    out["gemm_per_window"] = 20
    return out


def main() -> None:
    global D, SEQ, VOCAB
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["fsdp", "tp"], default="fsdp")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--mlp-split", help="tp: hidden units of the MLP of each pair's first and second rank, in "
                   "units of the model width (A:B; default 2:2, --big-rank R gives 3:1 or 1:3)")
    p.add_argument("--timing-dir")
    p.add_argument("--torch-profiler")
    p.add_argument("--no-truth", action="store_true")
    p.add_argument("--truth-all-reduce-only", action="store_true",
                   help="time only all-reduces after the loop (for NCCL_ALGO=Tree, which has no all-gather)")
    p.add_argument("--batch", type=int, help=f"sequences per rank and step (default {BATCH})")
    p.add_argument("--seq", type=int, help=f"tokens per sequence (default {SEQ}; --cpu: 32)")
    p.add_argument("--cpu", action="store_true", help="a small model on the CPU over gloo, to try the job out")
    args = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if args.cpu:
        D, SEQ, VOCAB = 64, 32, 256
        dev = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
        args.no_truth = True
    else:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120), device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    tp_group = tp_ranks = dp_group = None
    if args.mode == "tp":
        assert world % 2 == 0, "tp mode needs an even number of ranks"
        for g in range(world // 2):  # tensor-parallel pairs (0,1), (2,3), ...
            ranks = [2 * g, 2 * g + 1]
            grp = dist.new_group(ranks)
            if rank in ranks:
                tp_group, tp_ranks = grp, ranks
        for g in range(2):  # data-parallel groups (0,2,..), (1,3,..)
            ranks = list(range(g, world, 2))
            grp = dist.new_group(ranks)
            if rank in ranks:
                dp_group = grp
        hidden = 4 * D // 2
        if args.big_rank >= 0:  # the big rank's place in every pair, so data-parallel replicas stay alike
            hidden = 3 * D if rank % 2 == args.big_rank % 2 else D
        if args.mlp_split:  # hidden units (in units of D) of the first and the second rank of each pair
            hidden = int(args.mlp_split.split(":")[rank % 2]) * D
        blocks = [Block(HEADS // 2, hidden, tp_group) for _ in range(LAYERS)]
        model: nn.Module = GPT(blocks).to(dev)
    else:
        model = GPT([Block() for _ in range(LAYERS)]).to(dev)
        from torch.distributed.fsdp import fully_shard
        for b in model.blocks:
            fully_shard(b)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=not args.cpu)
    batch_size = BATCH if args.batch is None else args.batch
    seq = SEQ if args.seq is None else args.seq
    assert batch_size > 0 and seq > 0, "--batch and --seq must be positive"
    data = iter(torch.utils.data.DataLoader(Tokens(rank, 0.005 if rank == args.slow_rank else 0.0, batch_size, seq),
                                            batch_size=None, num_workers=0, pin_memory=not args.cpu))
    sync = (lambda: None) if args.cpu else torch.cuda.synchronize
    prof = None
    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    steps = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        batch = next(data).to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if dp_group is not None:
            grads = [q.grad for q in model.parameters() if q.grad is not None]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=dp_group)
            flat /= dist.get_world_size(dp_group)
            off = 0
            for g in grads:
                g.copy_(flat[off:off + g.numel()].view_as(g))
                off += g.numel()
        opt.step()
        sync()
        steps.append(time.perf_counter() - t0)
    if prof is not None:
        prof.__exit__(None, None, None)
        Path(args.torch_profiler).mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(Path(args.torch_profiler, f"rank{rank}.json")))
    steady = steps[5:] or steps
    doc = {"rank": rank, "world": world, "mode": args.mode, "tp_ranks": tp_ranks,
           "slow_rank": args.slow_rank, "big_rank": args.big_rank, "mlp_split": args.mlp_split,
           "batch": batch_size, "seq": seq,
           "mean_step_ms": 1e3 * sum(steady) / len(steady), "step_ms": [1e3 * s for s in steps],
           "loss": float(loss.detach())}
    if not args.no_truth:
        doc.update(truth(dev, world, tp_group, tp_ranks, args.truth_all_reduce_only))
    print(json.dumps(doc), flush=True)
    if args.timing_dir:
        Path(args.timing_dir).mkdir(parents=True, exist_ok=True)
        Path(args.timing_dir, f"rank{rank}.json").write_text(json.dumps(doc))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

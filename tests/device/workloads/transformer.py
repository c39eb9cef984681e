"""A small GPT-style language model trained for a few steps: for checking per-layer times.

Token embedding and position embedding, N blocks (LayerNorm, causal self-attention through
scaled_dot_product_attention, LayerNorm, MLP with GELU), final LayerNorm and head, AdamW.
With --compile model|blocks the model, or each block, runs under torch.compile; with --torch-profiler the timed steps run
under torch.profiler with Python stacks (module events), as an independent attribution.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from common import maybe_torch_profiler, parser, report, run_steps


class Attention(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(dim, 4 * dim)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, ctx: int) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(ctx, dim)
        self.blocks = torch.nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--compile", choices=["none", "model", "blocks"], default="none",
                   help="torch.compile the whole model, or each block (as per-block compilation does)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--ctx", type=int, default=256)
    args = p.parse_args()
    torch.manual_seed(0)
    model = GPT(vocab=4096, dim=args.dim, heads=8, layers=args.layers, ctx=args.ctx).cuda()
    if args.compile == "model":
        model = torch.compile(model)
    elif args.compile == "blocks":
        for i, block in enumerate(model.blocks):
            model.blocks[i] = torch.compile(block)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, 4096, (args.batch, args.ctx), device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), idx.view(-1))
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    args.warmup = 0
    with maybe_torch_profiler(args.torch_profiler, with_stack=True):
        times = run_steps(step, torch.cuda.synchronize, args)
    report(args, times)


if __name__ == "__main__":
    main()

"""Training of a small hand-written GPT (nanoGPT's ``model.py`` style, ``nanogpt_model.py``: 6
layers, d 384, 6 heads, sequence 256, character vocabulary of 65; batch 32) compiled with
``torch.compile(model)`` in the default mode, under ``torch.autocast("cuda", torch.bfloat16)``,
with AdamW (foreach), as nanoGPT's ``train.py`` does. Inductor fuses the elementwise work; every
kernel of forward and backward is still launched from Python, and the optimizer step runs eager.
Optimizer marks only.

Fixes:

- ``reduce_overhead``: ``torch.compile(model, mode="reduce-overhead")``: forward and backward replayed
  as CUDA graphs (fewer launches; the optimizer stays eager);
- ``fused_adamw``: ``AdamW(fused=True)``: the optimizer step in a few kernels.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, main  # noqa: E402
from nanogpt_model import GPT, GPTConfig, batches  # noqa: E402

BATCH = 32


def build_training(variant: str, setup: Setup, mode: str | None, batch: int) -> Step:
    """One training step of the GPT compiled in ``mode``, batch ``batch``; ``variant`` picks the optimizer."""
    dev = setup.device
    config = GPTConfig() if not setup.quick else GPTConfig(block_size=32, n_layer=2, n_head=2, n_embd=64)
    torch.manual_seed(0)
    model = GPT(config).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99),
                            fused=True if variant == "fused_adamw" else None)
    compiled = torch.compile(model, mode=mode)
    data = itertools.cycle(batches(config, setup.pick(batch, max(2, batch // 16)), dev))
    graphs = mode == "reduce-overhead"

    def step() -> torch.Tensor:
        x, y = next(data)
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(dev.type, torch.bfloat16):
            _, loss = compiled(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def build(variant: str, setup: Setup) -> Step:
    """One training step of ``variant``."""
    return build_training(variant, setup, "reduce-overhead" if variant == "reduce_overhead" else None, BATCH)


PROGRAM = Program(
    name="nanogpt_compiled",
    description="hand-written GPT (6 layers, d 384, seq 256, batch 32), torch.compile default, bf16 autocast, AdamW",
    variants=(
        Variant("as_written", "torch.compile(model), AdamW (foreach)", samples=BATCH),
        Variant("reduce_overhead", 'torch.compile(model, mode="reduce-overhead")', ("launch_bound",), samples=BATCH,
                needs_cuda=True),
        Variant("fused_adamw", "AdamW(fused=True)", ("launch_bound",), samples=BATCH),
    ),
    build=build,
    iterations=800,
    measure_iterations=100,
    warmup=20,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)

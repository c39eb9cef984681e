"""Language-model training with Hugging Face transformers, as a first script would write it: a
6-layer GPT-2 (d 512, 8 heads; random weights from ``GPT2Config``) in float32, batch 8 of 512
random token ids, ``loss = model(input_ids, labels=input_ids).loss``, ``torch.optim.AdamW``
(default: foreach). PyTorch's float32 matmul default keeps TF32 off, so the matrix products run
without the tensor cores' fast paths. Optimizer marks only.

Fixes:

- ``bf16_autocast``: forward and loss under ``torch.autocast("cuda", torch.bfloat16)``: the products
  on the tensor cores in bfloat16;
- ``tf32``: ``torch.set_float32_matmul_precision("high")``: float32 products in TF32;
- ``fused_adamw``: ``AdamW(fused=True)``: the optimizer step in a few kernels instead of a few per
  parameter group of tensors.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, main, need  # noqa: E402


def build(variant: str, setup: Setup) -> Step:
    """One training step of ``variant``."""
    transformers = need("transformers")
    dev = setup.device
    layers, d, heads, batch, seq = setup.pick((6, 512, 8, 8, 512), (2, 64, 2, 2, 32))
    torch.manual_seed(0)
    tiny = {"vocab_size": 1024, "bos_token_id": 1023, "eos_token_id": 1023} if setup.quick else {}
    config = transformers.GPT2Config(n_layer=layers, n_embd=d, n_head=heads, **tiny)
    model = transformers.GPT2LMHeadModel(config).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True if variant == "fused_adamw" else None)
    batches = itertools.cycle([torch.randint(0, config.vocab_size, (batch, seq), device=dev) for _ in range(4)])
    precision = "high" if variant == "tf32" else "highest"
    autocast = variant == "bf16_autocast"

    def step() -> torch.Tensor:
        torch.set_float32_matmul_precision(precision)
        ids = next(batches)
        with torch.autocast(dev.type, torch.bfloat16, enabled=autocast):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


PROGRAM = Program(
    name="hf_gpt2_train",
    description="transformers GPT-2 (6 layers, d 512) training, batch 8 x 512, float32, AdamW",
    variants=(
        Variant("as_written", "float32, TF32 off (PyTorch's default), AdamW (foreach)", samples=8),
        Variant("bf16_autocast", "torch.autocast(bfloat16) around forward and loss", ("precision",), samples=8),
        Variant("tf32", 'torch.set_float32_matmul_precision("high")', ("no_tensor_cores",), samples=8),
        Variant("fused_adamw", "AdamW(fused=True)", ("launch_bound",), samples=8),
    ),
    build=build,
    iterations=200,
    measure_iterations=30,
    warmup=10,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)

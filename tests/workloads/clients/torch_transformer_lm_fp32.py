"""A language model built from PyTorch's own transformer modules, as PyTorch's ``nn.Transformer``
tutorial builds one, trained in float32 with no autocast: embedding, ``nn.TransformerEncoder`` of 6
layers (d 512, 8 heads, feed-forward 2048, ``batch_first=True``) with a causal mask from
``nn.Transformer.generate_square_subsequent_mask``, a linear head over a vocabulary of 16384;
batch 16 of 256 random token ids, cross-entropy, Adam (foreach). PyTorch's float32 matmul default
keeps TF32 off. Optimizer marks only.

Fixes:

- ``tf32``: ``torch.backends.cuda.matmul.allow_tf32 = True``: float32 products in TF32 on the
  tensor cores;
- ``bf16_autocast``: forward and loss under ``torch.autocast("cuda", torch.bfloat16)``.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, main  # noqa: E402


class TransformerLM(nn.Module):
    """Embedding, a causal ``nn.TransformerEncoder``, and a linear head."""

    def __init__(self, vocab: int, d: int, heads: int, ff: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)
        self.d = d

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token logits for every position."""
        mask = nn.Transformer.generate_square_subsequent_mask(ids.shape[1], device=ids.device)
        x = self.embed(ids) * self.d**0.5
        return self.head(self.encoder(x, mask=mask, is_causal=True))


def build(variant: str, setup: Setup) -> Step:
    """One training step of ``variant``."""
    dev = setup.device
    vocab, d, heads, ff, layers, batch, seq = setup.pick((16384, 512, 8, 2048, 6, 16, 256), (256, 64, 2, 128, 2, 2, 32))
    torch.manual_seed(0)
    model = TransformerLM(vocab, d, heads, ff, layers).to(dev).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    data = torch.randint(0, vocab, (4, batch, seq + 1), device=dev)
    batches = itertools.cycle([(b[:, :-1], b[:, 1:]) for b in data])
    tf32 = variant == "tf32"
    autocast = variant == "bf16_autocast"

    def step() -> torch.Tensor:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        x, y = next(batches)
        with torch.autocast(dev.type, torch.bfloat16, enabled=autocast):
            loss = loss_fn(model(x).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


PROGRAM = Program(
    name="torch_transformer_lm_fp32",
    description="nn.TransformerEncoder LM training (6 layers, d 512, batch 16 x 256), float32, TF32 off, Adam",
    variants=(
        Variant("as_written", "float32, TF32 off (PyTorch's default)", samples=16),
        Variant("tf32", "torch.backends.cuda.matmul.allow_tf32 = True", ("no_tensor_cores",), samples=16),
        Variant("bf16_autocast", "torch.autocast(bfloat16)", ("precision",), samples=16),
    ),
    build=build,
    iterations=300,
    measure_iterations=30,
    warmup=10,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)

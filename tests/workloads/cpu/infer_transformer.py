"""An inference loop of a small transformer as a user writes it: no optimizer, no step marks, one
batched call of the model per batch (``logits = model(tokens)``) and the predicted tokens picked with
one tensor operation. Nothing to fix: the step is the model's operators.

Candidate fix: ``--fix inference_mode`` (``torch.inference_mode()`` instead of ``torch.no_grad()``).
"""

from __future__ import annotations

import torch
from torch import nn

from loop_timing import Loop, StepClock, measure, parser

VOCAB, WIDTH, LAYERS, BATCH, SEQ = 1000, 128, 2, 16, 32
STEPS = 150
FIXES = {"inference_mode": ("torch.inference_mode() instead of torch.no_grad()", ())}


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 2 * WIDTH, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


def infer(inference_mode: bool, steps: int = STEPS) -> list[float]:
    torch.manual_seed(0)
    model = TinyLM().eval()
    batches = [torch.randint(0, VOCAB, (BATCH, SEQ)) for _ in range(8)]
    preds = []
    clock = StepClock()
    with torch.inference_mode() if inference_mode else torch.no_grad():
        for i in range(steps):
            tokens = batches[i % len(batches)]
            logits = model(tokens)  # one batched call per step
            pred = logits.argmax(-1)
            preds.append(pred)
            clock.tick()
    return clock.times


def variant(inference_mode: bool) -> Loop:
    return lambda: infer(inference_mode)


def main() -> None:
    args = parser(__doc__, FIXES).parse_args()
    if args.measure:
        measure("infer_transformer", {"as_written": variant(False), "inference_mode": variant(True)},
                args.measure, args.rounds)
        return
    times = infer(args.fix == "inference_mode")
    print(f"{len(times)} steps, median {sorted(times)[len(times) // 2] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()

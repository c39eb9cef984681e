"""Token tagging inference (6 transformer encoder layers, width 1024, bfloat16; batch 32 of 256
tokens) whose results go to the host every iteration: ``probs.cpu()`` (2 MB), then Python turns the
tags into spans, a few milliseconds. The host waits for the GPU before its own work, and the GPU
waits while the host post-processes. No step marks. Fixes: copy into pinned buffers with
``non_blocking=True`` and post-process the previous batch while the GPU runs this one; or decode the
spans with tensor operations on the GPU and bring back only the spans as arrays (no per-token Python).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import nn

from harness import Program, Setup, Step, Variant, main

TAGS = 64


def spans(probs: np.ndarray) -> list[list[tuple[int, int, int, float]]]:
    """Per sequence: the runs of one tag other than 0, with their mean confidence."""
    tags = probs.argmax(-1).tolist()
    conf = probs.max(-1).tolist()
    out = []
    for seq_tags, seq_conf in zip(tags, conf):
        found = []
        start = 0
        for j in range(1, len(seq_tags) + 1):
            if j == len(seq_tags) or seq_tags[j] != seq_tags[start]:
                if seq_tags[start] != 0:
                    found.append((start, j, seq_tags[start], sum(seq_conf[start:j]) / (j - start)))
                start = j
        out.append(found)
    return out


def spans_on_device(probs: torch.Tensor) -> np.ndarray:
    """The same spans as :func:`spans`, found with tensor operations: rows of (start, end, tag, mean
    confidence), positions counted over the flattened batch (runs never cross sequences)."""
    conf, tags = probs.max(-1)
    b, s = tags.shape
    change = torch.ones_like(tags, dtype=torch.bool)
    change[:, 1:] = tags[:, 1:] != tags[:, :-1]
    start = change.flatten().nonzero().squeeze(1)
    end = torch.cat([start[1:], start.new_tensor([b * s])])
    csum = torch.cat([conf.new_zeros(1), conf.flatten().cumsum(0)])
    mean = (csum[end] - csum[start]) / (end - start)
    tag = tags.flatten()[start]
    keep = tag != 0
    return torch.stack([start[keep].float(), end[keep].float(), tag[keep].float(), mean[keep]], 1).cpu().numpy()


class Tagger(nn.Module):
    """Transformer encoder and a per-token tag head, returning tag probabilities."""

    def __init__(self, d: int, heads: int, layers: int) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, TAGS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)).float().softmax(-1)


def build(variant: str, setup: Setup) -> Step:
    """One inference iteration of ``variant``."""
    dev = setup.device
    d, heads, layers, batch, seq = setup.pick((1024, 16, 6, 32, 256), (32, 2, 1, 2, 16))
    torch.manual_seed(0)
    model = Tagger(d, heads, layers).to(dev, torch.bfloat16).eval()
    inputs = itertools.cycle([torch.randn(batch, seq, d, device=dev, dtype=torch.bfloat16) for _ in range(4)])
    results: list[list[list[tuple[int, int, int, float]]]] = []

    if variant == "pinned_overlap":
        buffers = [torch.empty(batch, seq, TAGS, pin_memory=setup.cuda) for _ in range(2)]
        events = [torch.cuda.Event() if setup.cuda else None for _ in range(2)]
        i = 0

        def step() -> None:
            nonlocal i
            with torch.inference_mode():
                probs = model(next(inputs))
            cur, prev = i % 2, (i + 1) % 2
            buffers[cur].copy_(probs, non_blocking=True)
            if events[cur] is not None:
                events[cur].record()
            if i:
                if events[prev] is not None:
                    events[prev].synchronize()
                results.append(spans(buffers[prev].numpy()))
            i += 1
            del results[:-100]

        return step

    if variant == "vectorized":
        kept: list[np.ndarray] = []

        def step() -> None:
            with torch.inference_mode():
                kept.append(spans_on_device(model(next(inputs))))
            del kept[:-100]

        return step

    def step() -> None:
        with torch.inference_mode():
            probs = model(next(inputs)).cpu()
        results.append(spans(probs.numpy()))
        del results[:-100]

    return step


PROGRAM = Program(
    name="results_to_host",
    description="transformer tagging inference, probs.cpu() then Python span decoding each batch",
    variants=(
        Variant("as_written", "probs.cpu(), then post-process", samples=32),
        Variant("pinned_overlap", "non_blocking copy to pinned buffers; post-process the previous batch",
                ("sync_copies", "host_sync", "hot_line"), samples=32),
        Variant("vectorized", "spans found with tensor operations on the GPU, only the spans copied back",
                ("hot_line",), samples=32),
    ),
    build=build,
    iterations=200,
    measure_iterations=50,
    warmup=5,
)

if __name__ == "__main__":
    main(PROGRAM)

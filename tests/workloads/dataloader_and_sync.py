"""Training of a small text classifier (embedding, 4 transformer encoder layers of width 1024,
bfloat16 autocast, fused AdamW) fed by a ``DataLoader(num_workers=0)`` whose dataset spends about
2 ms of Python per batch of 32; each step also reads the loss with ``.item()`` and then does about
1 ms of host work (metrics, logging). Optimizer marks only.

Two bottlenecks of different size: the GPU waits for the batch, and it waits while the host
works after the sync. Fixes: ``num_workers=4``; the loss kept on the GPU; both; and the training
step captured in a CUDA graph (the loader and the read of the loss as written).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from harness import Program, Setup, Step, Variant, graphed_training, main, python_work

BATCH = 32


class Sentences(Dataset):
    """Token sequences that take Python time to produce (reading, cleaning, tokenizing)."""

    def __init__(self, n: int, vocab: int, seq: int, sample_s: float) -> None:
        rng = np.random.default_rng(0)
        self.tokens = rng.integers(0, vocab, size=(1024, seq))
        self.labels = rng.integers(0, 8, size=1024)
        self.n = n
        self.sample_s = sample_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        python_work(self.sample_s)
        return torch.from_numpy(self.tokens[i % 1024]), int(self.labels[i % 1024])


class Classifier(nn.Module):
    """Embedding, transformer encoder, mean over tokens, linear head."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 8)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)).mean(1))


def build(variant: str, setup: Setup) -> Step:
    """One training iteration of ``variant``."""
    dev = setup.device
    vocab, d, heads, layers, seq = setup.pick((8000, 1024, 16, 4, 128), (100, 32, 2, 1, 16))
    data = Sentences(BATCH * 1_000_000, vocab, seq, setup.pick(0.002, 0.0004) / BATCH)
    if variant in ("workers", "both"):
        loader = DataLoader(data, batch_size=BATCH, pin_memory=setup.cuda, num_workers=4, persistent_workers=True,
                            prefetch_factor=4)
    else:
        loader = DataLoader(data, batch_size=BATCH, pin_memory=setup.cuda)
    batches = iter(loader)
    torch.manual_seed(0)
    model = Classifier(vocab, d, heads, layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True, capturable=variant == "cuda_graph")
    loss_fn = nn.CrossEntropyLoss()
    if variant == "cuda_graph":
        def train_step(tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            with torch.autocast(dev.type, torch.bfloat16, cache_enabled=False):
                loss = loss_fn(model(tokens).float(), labels)
            loss.backward()
            opt.step()
            return loss

        first = next(batches)
        replay = graphed_training(train_step, opt, (first[0].to(dev), first[1].to(dev)), batches)
        graph_losses: list[float] = []

        def graphed() -> None:
            graph_losses.append(replay().item())  # the loss still read every step, as written
            python_work(setup.pick(0.001, 0.0002))

        return graphed
    item = variant in ("as_written", "workers")
    losses: list[float] = []
    running = torch.zeros((), device=dev)

    def step() -> None:
        nonlocal running
        tokens, labels = next(batches)
        tokens, labels = tokens.to(dev, non_blocking=True), labels.to(dev, non_blocking=True)
        with torch.autocast(dev.type, torch.bfloat16):
            loss = loss_fn(model(tokens).float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if item:
            losses.append(loss.item())
        else:
            running += loss.detach()
        python_work(setup.pick(0.001, 0.0002))  # metrics, logging, bookkeeping

    return step


PROGRAM = Program(
    name="dataloader_and_sync",
    description="transformer classifier training: DataLoader(num_workers=0) 2 ms per batch, .item() + 1 ms host work",
    variants=(
        Variant("as_written", "num_workers=0, loss.item() every step", samples=BATCH),
        Variant("workers", "num_workers=4, persistent, prefetch_factor=4", ("data_loader",), samples=BATCH),
        Variant("no_item", "the loss summed on the GPU", ("host_sync",), samples=BATCH),
        Variant("both", "num_workers=4 and the loss on the GPU", ("data_loader", "host_sync"), samples=BATCH),
        Variant("cuda_graph", "forward, backward and AdamW(capturable) in one CUDA graph; loader and .item() as written",
                ("launch_bound",), samples=BATCH, needs_cuda=True),
    ),
    build=build,
    iterations=200,
    measure_iterations=60,
    warmup=10,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)

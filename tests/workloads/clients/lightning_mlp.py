"""An MLP trained with PyTorch Lightning, as its documentation writes one: a ``LightningModule``
(1024 -> 3 x 4096 ReLU -> 10 classes, cross-entropy, ``self.log`` of the loss, Adam from
``configure_optimizers``) fitted by ``Trainer(accelerator="gpu", devices=1, max_steps=...,
logger=False, enable_checkpointing=False, enable_progress_bar=False)`` on a shuffled ``DataLoader``
of a ``TensorDataset`` (16384 random samples on the host; batch 512; Lightning moves each batch to
the GPU). Float32, Lightning's default precision. Optimizer marks (Lightning calls the optimizer's
``step``).

Lightning owns the training loop, so the program runs ``trainer.fit`` once, in a thread of its own,
and a callback paces it: one iteration lets the loop run 10 training steps and waits until the
10th has ended (``on_train_batch_end``); the timed iterations are then whole Lightning steps
(hooks, logging, the batch copy, forward, backward, optimizer), without the Trainer's set-up,
which a fit per iteration would add each time.

Fixes:

- ``batch_4x``: batch 2048: Lightning's per-step work spread over 4x the samples;
- ``bf16_mixed``: ``Trainer(precision="bf16-mixed")``: forward and loss under bfloat16 autocast;
- ``workers``: ``DataLoader(num_workers=4, pin_memory=True, persistent_workers=True)``: the batches
  (512 ``TensorDataset`` lookups and a collate each) made in worker processes, ahead of the loop.
"""

from __future__ import annotations

import atexit
import sys
import threading
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, main, need  # noqa: E402

BATCH = 512
STEPS = 10  # Lightning training steps per iteration


def build(variant: str, setup: Setup) -> Step:
    """Start ``trainer.fit`` of ``variant`` paused; return one iteration (``STEPS`` training steps)."""
    pl = need("lightning.pytorch", "lightning")
    d_in, width, samples = setup.pick((1024, 4096, 16384), (32, 64, 256))
    batch = setup.pick(BATCH, 8) * (4 if variant == "batch_4x" else 1)

    class MLP(pl.LightningModule):
        """The classifier and its training step."""

        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(d_in, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                     nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    class Pace(pl.Callback):
        """Holds the loop before every ``STEPS``-th step until the next iteration lets it go."""

        def __init__(self) -> None:
            self.go = threading.Semaphore(0)
            self.done = threading.Semaphore(0)
            self.steps = 0
            self.stop = False

        def on_train_batch_start(self, trainer: object, module: object, batch: object, batch_idx: int) -> None:
            if self.steps % STEPS == 0:
                self.go.acquire()
                if self.stop:
                    trainer.should_stop = True  # type: ignore[attr-defined]

        def on_train_batch_end(self, trainer: object, module: object, outputs: object, batch: object,
                               batch_idx: int) -> None:
            self.steps += 1
            if self.steps % STEPS == 0:
                self.done.release()

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(samples, d_in), torch.randint(0, 10, (samples,)))
    workers = variant == "workers" and setup.cuda
    loader = DataLoader(data, batch_size=batch, shuffle=True, num_workers=4 if workers else 0, pin_memory=workers,
                        persistent_workers=workers)
    pace = Pace()
    trainer = pl.Trainer(accelerator="gpu" if setup.cuda else "cpu", devices=1, max_steps=10**9,
                         precision="bf16-mixed" if variant == "bf16_mixed" else "32-true", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[pace])
    failure: list[BaseException] = []

    def fit() -> None:
        try:
            trainer.fit(MLP(), loader)
        except BaseException as exc:  # noqa: BLE001  (handed to the main thread)
            failure.append(exc)
        finally:
            pace.done.release()

    loop = threading.Thread(target=fit, name="lightning-fit", daemon=True)
    loop.start()

    def finish() -> None:
        pace.stop = True
        pace.go.release()
        loop.join(timeout=30)

    atexit.register(finish)

    def step() -> None:
        pace.go.release()
        pace.done.acquire()
        if failure or not loop.is_alive() and not pace.stop:
            raise RuntimeError(f"trainer.fit ended: {failure[0]!r}" if failure else "trainer.fit ended")

    return step


PROGRAM = Program(
    name="lightning_mlp",
    description="Lightning MLP (1024 -> 3 x 4096 -> 10), batch 512, float32, Adam; one iteration = 10 steps",
    variants=(
        Variant("as_written", 'Trainer(accelerator="gpu", devices=1), precision 32', samples=BATCH * STEPS),
        Variant("batch_4x", "DataLoader batch 2048", ("gpu_memory",), work_changing=True,
                samples=4 * BATCH * STEPS),
        Variant("bf16_mixed", 'Trainer(precision="bf16-mixed")', ("precision",), samples=BATCH * STEPS),
        Variant("workers", "DataLoader(num_workers=4, pin_memory=True, persistent_workers=True)", ("data_loader",),
                samples=BATCH * STEPS),
    ),
    build=build,
    iterations=150,
    measure_iterations=15,
    warmup=5,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)

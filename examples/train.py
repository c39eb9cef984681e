"""A small training run to profile: an MLP classifier on synthetic data, on the GPU if there is one.

    gpuscope profile examples/train.py --steps 50
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=1024)
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, args.width), torch.nn.ReLU(),
        torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
        torch.nn.Linear(args.width, 10),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(args.steps, args.batch, 256)
    labels = torch.randint(0, 10, (args.steps, args.batch))
    t0 = time.perf_counter()
    for step in range(args.steps):
        x = data[step].to(device, non_blocking=True)
        y = labels[step].to(device, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")  # .item() waits for the GPU
    print(f"{args.steps} steps on {device} in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()

"""CPU work of fixed size that times itself: a pure-Python loop, or a small CPU PyTorch training.

    python bench/workloads/cpu_work.py python|torch OUT_JSON
"""

import json
import sys
import time


def python_loop() -> None:
    total = 0
    for i in range(20_000_000):
        total += i % 7
    assert total > 0


def torch_training() -> None:
    import torch

    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(128, 128), torch.nn.ReLU())])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 128)
    for _ in range(1000):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()


if __name__ == "__main__":
    kind, out = sys.argv[1], sys.argv[2]
    work = {"python": python_loop, "torch": torch_training}[kind]
    if kind == "torch":
        pass  # imported before timing: the import is not the work

    t = time.perf_counter()
    work()
    json.dump({"seconds": time.perf_counter() - t}, open(out, "w"))

"""CPU work of fixed size that times itself: a pure-Python loop, or a small CPU PyTorch training
(1000 steps; the last 800 are also timed apart, as ``late_seconds``).

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


LATE_STEP = 200  # the training's steps from this one on are timed apart ("late_seconds")
_late: list[float] = []


def torch_training() -> None:
    import torch

    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(128, 128), torch.nn.ReLU())])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 128)
    for step in range(1000):
        if step == LATE_STEP:
            _late.append(time.perf_counter())
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
    end = time.perf_counter()
    result = {"seconds": end - t}
    if _late:  # the steps after the first LATE_STEP ones (after --trace torch-shapes' sample window)
        result["late_seconds"] = end - _late[0]
    json.dump(result, open(out, "w"))

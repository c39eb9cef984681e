"""The operator recorder in sample mode (``--trace torch-shapes``) inside a process: operators are
recorded in the window only, and afterwards no thread's operators reach the recorder's handler.

Each scenario runs in a fresh interpreter (the recorder's dispatch mode and thread hook stay for the
rest of their process); the handler is wrapped to count its calls.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("torch")

PRELUDE = """
import json, threading
import torch
from gpuscope.capture.python import torch_ops
from gpuscope.capture.python.op_sample import SamplePolicy
torch.set_num_threads(1)
windows = []
anchors = [0]
def anchor():  # a launch anchor: made right before each time the recorder reads for the report
    anchors[0] += 1
rec = torch_ops.TorchOps(0, lambda level, msg: None, SamplePolicy(POLICY), lambda *row: windows.append(row), anchor)
rec.install(torch)
calls = {}
handler = type(rec.mode).__torch_dispatch__
def counting(*args, **kwargs):
    name = threading.current_thread().name
    calls[name] = calls.get(name, 0) + 1
    return handler(*args, **kwargs)
type(rec.mode).__torch_dispatch__ = counting
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 8)
def train_step():
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
def on_main():
    return calls.get("MainThread", 0)
"""

WITH_STEPS = """
go, done = threading.Event(), threading.Event()
seen = {}
def worker():  # started before the window: it has the mode on its stack
    go.wait()
    for i in range(3):
        torch.ones(3).add_(1)
        seen[i] = calls.get("early", 0)
    done.set()
early = threading.Thread(target=worker, name="early"); early.start()
per_step = []
for n in range(1, 7):
    before = on_main()
    train_step()
    rec.step_mark(n)  # as the capture range hands on optimizer steps
    per_step.append(on_main() - before)
go.set(); done.wait(); early.join()
late = threading.Thread(target=lambda: torch.ones(2).mul_(2), name="late"); late.start(); late.join()
rows = rec.take()
print(json.dumps({"per_step": per_step, "rows": len(rows), "windows": windows, "state": rec.sample.state,
                  "early": seen, "late": calls.get("late", 0), "stack": torch._C._len_torch_dispatch_stack(),
                  "recording": rec.recording, "anchors": anchors[0], "collector": list(rec.stop())}))
"""

WITHOUT_STEPS = """
for _ in range(30):
    train_step()
before = on_main()
for _ in range(10):
    train_step()
rows = rec.take()
print(json.dumps({"rows": len(rows), "windows": windows, "after": on_main() - before, "anchors": anchors[0],
                  "names": sorted({r[3] for r in rows})}))
"""


def _run(policy: str, scenario: str) -> dict[str, Any]:
    script = PRELUDE.replace("SamplePolicy(POLICY)", f"SamplePolicy({policy})") + scenario
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_with_steps_only_the_window_is_recorded_and_then_nothing_reaches_the_handler() -> None:
    got = _run("skip_ops=10**9, skip_s=10**6, steps=2, later_s=0, windows=1", WITH_STEPS)
    step = got["per_step"][1]  # the operators of one step, all recorded in the window
    assert step > 10 and got["per_step"][2] == step
    assert got["per_step"][0] == step  # step 1 passed through the handler, counted
    assert got["per_step"][3:] == [0, 0, 0]  # after the window: not one call
    assert got["rows"] == 2 * step
    opened, closed = got["windows"]
    assert opened[1] is None and opened[3] == "end of step 1"
    assert closed[0] == opened[0] and closed[1] is not None
    assert closed[2] == 2 * step and closed[3] == "end of step 1 to end of step 3"
    assert got["state"] == "finished" and got["stack"] == 0 and got["recording"] is False
    # a thread that had the mode: its first operator after the window reached the handler, and it left
    assert got["early"] == {"0": 1, "1": 1, "2": 1}
    assert got["late"] == 0  # started after the window: never had the mode
    assert got["anchors"] == 2 * got["rows"]  # around each recorded call; the step marks have their own
    name, records, _, _, failed, detail = got["collector"]
    assert (name, records, failed) == ("torch-shapes", 2 * step, 0)
    assert json.loads(detail)["windows"] == 1


def test_without_steps_the_window_closes_when_the_operators_repeat() -> None:
    got = _run("skip_ops=50, skip_s=10**6, min_ops=20, later_s=0, windows=1", WITHOUT_STEPS)
    opened, closed = got["windows"]
    assert closed[3] == "after 50 operators to operators repeating"
    assert got["rows"] == closed[2] >= 20
    assert got["after"] == 0
    assert got["anchors"] == 2 * got["rows"] + 2  # around each call, and at the window's two ends
    assert {"aten::addmm", "aten::mm", "aten::relu"} <= set(got["names"])

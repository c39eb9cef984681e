"""Module ranges on a torch.compile'd model: switching collection on and off (the overhead probe,
capture windows) must not change what the compiled graph guards on, so it compiles once, as
it does untraced. Dynamo traces gpuscope's ``nn.Module.__call__`` wrapper as the compiled
module's own frame; any state read before the wrapper sees that it is being compiled would
become a guard."""

from __future__ import annotations

from typing import Any

import pytest

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
from range_rows import recorded_rows  # noqa: E402
from gpuscope.capture.python.ranges import RangeRecorder

torch = pytest.importorskip("torch")
dynamo = pytest.importorskip("torch._dynamo")
from gpuscope.capture.python.torch_hooks import TorchHooks  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 8)
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x: Any) -> Any:
        return self.fc2(torch.relu(self.fc1(x)))


def _frames_compiled(run: Any) -> int:
    dynamo.reset()
    dynamo.utils.counters.clear()
    run()
    return int(sum(dynamo.utils.counters["frames"].values()) and dynamo.utils.counters["frames"]["total"])


@pytest.mark.parametrize("backward", [False, True])
def test_switching_collection_does_not_recompile(monkeypatch: pytest.MonkeyPatch, backward: bool) -> None:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(4, 8)

    def steps(switch: Any = None) -> None:
        compiled = torch.compile(net, backend="eager")
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        for i in range(8):
            if switch is not None:
                switch(i % 2 == 0)
            compiled(x).sum().backward()
            opt.step()
            opt.zero_grad()

    untraced = _frames_compiled(steps)
    hooks = TorchHooks(RangeRecorder(), lambda level, message: None, backward=backward)
    hooks.install(torch)
    try:
        traced = _frames_compiled(lambda: steps(hooks.set_collecting))
    finally:
        hooks.uninstall()
    assert untraced >= 1
    assert traced == untraced, f"{traced} frames compiled under the hooks, {untraced} without"
    assert hooks.counts["hook_errors"] == 0
    names = {row[5] for row in recorded_rows(hooks.r) if len(row) > 5}
    assert "Net" in names  # the compiled module's own call is still a range


class Gate(torch.nn.Module):
    def forward(self, x: Any) -> Any:
        if x.sum().item() > 1e9:  # a graph break: the rest of the forward runs frame by frame
            return x * 2
        return x


class Broken(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8), Gate(), torch.nn.ReLU(), torch.nn.Linear(8, 8),
                                           torch.nn.LayerNorm(8), Gate(), torch.nn.GELU()])

    def forward(self, x: Any) -> Any:
        for layer in self.layers:
            x = layer(x)
        return x


def test_a_graph_break_compiles_no_more_frames_under_the_hooks() -> None:
    """After a graph break dynamo compiles the frames the forward calls; gpuscope's wrapper of
    Module.__call__ is one code object for every module class and must not be one of them."""
    torch.manual_seed(0)
    net = Broken()
    x = torch.randn(4, 8)

    def steps() -> None:
        compiled = torch.compile(net, backend="eager")
        for _ in range(4):
            compiled(x).sum().backward()

    untraced = dict(_count(steps))
    hooks = TorchHooks(RangeRecorder(), lambda level, message: None)
    hooks.install(torch)
    try:
        traced = dict(_count(steps))
    finally:
        hooks.uninstall()
    assert untraced["graph_break"] >= 1
    assert traced == untraced, f"under the hooks {traced}, untraced {untraced}"


def _count(run: Any) -> Any:
    dynamo.reset()
    dynamo.utils.counters.clear()
    run()
    c = dynamo.utils.counters
    yield "frames", c["frames"]["total"]
    yield "graphs", c["stats"]["unique_graphs"]
    yield "graph_break", sum(c["graph_break"].values())


def test_dynamo_is_told_of_gpuscope_code_only_once_the_program_imports_it() -> None:
    """Importing torch._dynamo costs about 2 s of CPU: the hooks do not bring it in themselves,
    and tell it which frames to skip as soon as the program imports it (as torch.compile does)."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from gpuscope.capture.python.ranges import RangeRecorder\n"
        "from gpuscope.capture.python.torch_hooks import TorchHooks\n"
        "assert 'torch._dynamo.eval_frame' not in sys.modules\n"
        "hooks = TorchHooks(RangeRecorder(), lambda level, message: print(level, message))\n"
        "hooks.install(torch)\n"
        "print('before', 'torch._dynamo.eval_frame' in sys.modules, hooks._skipping)\n"
        "import torch._dynamo\n"
        "print('after', hooks._skipping)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "before False False" in out.stdout and "after True" in out.stdout, out.stdout


def test_gpuscopes_code_for_dynamo_to_skip_holds_setters_and_the_threads_it_starts() -> None:
    """A property's setter (the operator recorder's ``recording``) and the standard library's thread
    code that a step mark runs (starting the overhead probe's watcher) are skipped as frames too."""
    from gpuscope.capture.python.own_code import own_code
    from gpuscope.capture.python.torch_ops import TorchOps
    import threading

    codes = {id(c) for c in own_code()}
    assert id(TorchOps.recording.fset.__code__) in codes
    assert id(TorchOps.recording.fget.__code__) in codes
    assert id(threading.Thread.start.__code__) in codes
    assert id(threading.Condition.notify.__code__) in codes


COMPILED_CALL = """
import json, sys, torch
from torch._dynamo.utils import counters

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.fc = torch.nn.LayerNorm(16), torch.nn.Linear(16, 16)
    def forward(self, x):
        return x + torch.nn.functional.gelu(self.fc(self.ln(x)))

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(3))
    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x

model = Model()
compiled = torch.compile(model.__call__, backend="eager")  # as transformers compiles a static-cache decode
with torch.no_grad():
    for _ in range(40):  # past the first overhead probe, whose watcher thread starts at a step mark
        compiled(torch.randn(2, 16))
print("COUNTS", json.dumps({"frames": counters["frames"]["total"], "graphs": counters["stats"]["unique_graphs"]}))
"""


@pytest.mark.parametrize("trace", [None, "torch"])
def test_a_compiled_call_compiles_as_many_frames_under_gpuscope_as_untraced(tmp_path: Any, trace: Any) -> None:
    """``torch.compile(model.__call__)``: the compiled function is gpuscope's wrapper, so dynamo sees every
    frame the wrapper runs, the step marks' work among them. Under ``gpuscope profile`` (the default, and
    module ranges alone) the counts must be those of the program run untraced."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    prog = tmp_path / "compiled_call.py"
    prog.write_text(COMPILED_CALL)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**__import__("os").environ, "PYTHONPATH": src}

    def counts(argv: list[str]) -> dict:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("COUNTS ")), None)
        assert line is not None, out.stdout[-1000:] + out.stderr[-2000:]
        return json.loads(line[len("COUNTS "):])

    untraced = counts([sys.executable, str(prog)])
    argv = [sys.executable, "-m", "gpuscope", "profile", "-o", str(tmp_path / "r"), "--force-overwrite"]
    traced = counts(argv + (["-t", trace] if trace else []) + [str(prog)])
    assert untraced == {"frames": 1, "graphs": 1}
    assert traced == untraced, f"under gpuscope {traced}, untraced {untraced}"


def test_a_step_mark_made_inside_a_compiled_call_runs_with_dynamo_off() -> None:
    """Whatever a mark sets off (threads, CUPTI's Python bindings on a GPU), dynamo must not see it as
    frames of the compiled call: the mark after the outermost module call runs with its callback unset,
    and the callback is back for the next call."""
    from torch._C._dynamo.eval_frame import set_eval_frame

    def current() -> Any:
        prior = set_eval_frame(None)
        set_eval_frame(prior)
        return prior

    seen: list[Any] = []
    net = Net()
    hooks = TorchHooks(RangeRecorder(), lambda level, message: None)
    hooks.install(torch)
    try:
        mark = hooks.r.mark

        def watched(*args: Any, **kwargs: Any) -> Any:
            seen.append(current())
            return mark(*args, **kwargs)

        hooks.r.mark = watched  # type: ignore[method-assign]
        dynamo.reset()
        dynamo.utils.counters.clear()
        compiled = torch.compile(net.__call__, backend="eager")
        with torch.no_grad():
            for _ in range(3):
                compiled(torch.randn(4, 8))
    finally:
        hooks.uninstall()
    assert dynamo.utils.counters["frames"]["total"] == 1  # the forward, compiled once
    assert len(seen) >= 3 and all(s is None for s in seen), seen
    assert current() is None

"""Module ranges on a torch.compile'd model: switching collection on and off (the overhead probe,
capture windows) must not change what the compiled graph guards on, so it compiles once, as
it does untraced. Dynamo traces gpuscope's ``nn.Module.__call__`` wrapper as the compiled
module's own frame; any state read before the wrapper sees that it is being compiled would
become a guard."""

from __future__ import annotations

from typing import Any

import pytest

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
    names = {row[5] for row in hooks.r.take() if len(row) > 5}
    assert "Net" in names  # the compiled module's own call is still a range

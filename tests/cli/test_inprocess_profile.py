"""``with gpuscope.profile(...)`` in a script that gpuscope did not start (CPU), and the same block
under ``gpuscope profile`` (where it is a capture range)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import gpuscope

from .conftest import TIMEOUT_S, Gpuscope, base_env

pytest.importorskip("torch")

SCRIPT = """
import torch, gpuscope
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(16, 8), torch.randn(16, 2)
plain_call = torch.nn.Module.__call__

def train(steps):
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

assert gpuscope.start() is False and gpuscope.stop() is False  # no profiler: nothing happens
train(2)
with gpuscope.profile("first", trace="torch") as p:
    train(3)
assert torch.nn.Module.__call__ is plain_call, "the hooks are taken back"
train(2)
with gpuscope.profile("second", trace="torch", quiet=True) as q:
    train(1)
    assert gpuscope.stop() is False
    train(5)
    assert gpuscope.start() is True
    train(1)
print("reports", p.report.name, q.report.name)
"""


def _forward_calls(report: object) -> int:
    r = report.ranges()  # type: ignore[attr-defined]
    return int(((r["category"] == "forward") & (r["name"] == "Sequential")).sum())


def test_blocks_of_a_script(gs: Gpuscope) -> None:
    gs.script("nb.py", SCRIPT)
    res = subprocess.run([sys.executable, "nb.py"], cwd=gs.cwd, capture_output=True, text=True,
                         env=base_env(), timeout=TIMEOUT_S * 2)
    assert res.returncode == 0 and "reports first.gpuscope second.gpuscope" in res.stdout, res.stderr
    with gpuscope.load(str(gs.cwd / "first.gpuscope")) as first:
        assert first.meta["in_process"] is True and first.meta["status"] == "complete"
        assert _forward_calls(first) == 3  # the block's steps only
        assert first.count("nvtx_range WHERE kind = 'mark' AND category = 'step'") == 3
        assert first.count("capture_window") == 0
    with gpuscope.load(str(gs.cwd / "second.gpuscope")) as second:
        assert _forward_calls(second) == 2  # paused for 5 steps by gpuscope.stop()
        reasons = [r for (r,) in second.sql("SELECT reason FROM capture_window ORDER BY start_ns")]
        assert reasons == ["process start to gpuscope.stop()", "gpuscope.start() to process end"]
    # the first block printed its summary and closing line; the quiet one printed nothing
    assert res.stderr.count("Collection overhead:") == 1
    assert "gpuscope: wrote" in res.stderr and "first.gpuscope" in res.stderr
    assert "second.gpuscope" not in res.stderr


def test_a_block_under_gpuscope_profile_is_a_capture_range(gs: Gpuscope) -> None:
    gs.script("nb.py", """
        import gpuscope
        gpuscope.mark("before")
        with gpuscope.profile("ignored") as p:
            gpuscope.mark("inside")
        gpuscope.mark("after")
        print("ok", p.report.name)
        """)
    res = gs.profile("-t", "torch", "-o", "r", "--capture-range=api", "nb.py")
    assert res.returncode == 0 and "ok r.gpuscope" in res.stdout, res.describe()  # the run's report
    assert not (gs.cwd / "ignored.gpuscope").exists()
    with gpuscope.load(str(gs.cwd / "r.gpuscope")) as report:
        assert list(report.ranges()["name"]) == ["inside"]

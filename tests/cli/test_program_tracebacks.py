"""An uncaught exception of the profiled program prints its traceback without gpuscope's frames,
wherever it was raised (here inside the module wrapper gpuscope puts around every forward)."""

from __future__ import annotations

import re
import sys

import pytest

from .conftest import Gpuscope

pytest.importorskip("torch")

PROGRAM = """
import torch

class Fails(torch.nn.Module):
    def forward(self, x):
        raise ValueError("bad input shape")

def run():
    return torch.nn.Sequential(torch.nn.Linear(2, 2), Fails())(torch.ones(1, 2))

run()
"""


def test_the_programs_traceback_leaves_gpuscope_out(gs: Gpuscope) -> None:
    gs.script("fails.py", PROGRAM)
    res = gs.profile("-t", "torch", "-o", "r", "fails.py")
    assert res.returncode == 1, res.describe()
    err = res.stderr
    assert "ValueError: bad input shape" in err
    assert re.search(r'File "[^"]*fails\.py", line \d+, in run', err)  # the program's frames stay
    assert re.search(r'File "[^"]*fails\.py", line \d+, in forward', err)
    assert "torch/nn/modules/" in err  # library frames stay
    assert not re.search(r'File "[^"]*gpuscope/', err), err


def test_trimming_keeps_every_other_frame() -> None:
    from gpuscope.capture.process.tracebacks import without_own_frames

    def inner() -> None:
        raise KeyError("x")

    try:
        inner()
    except KeyError:
        tb = sys.exc_info()[2]
    names = []
    t = without_own_frames(tb)
    while t is not None:
        names.append(t.tb_frame.f_code.co_name)
        t = t.tb_next
    assert names == ["test_trimming_keeps_every_other_frame", "inner"]

"""What a new user sees at the end of ``gpuscope profile``: a page, shell-quoted paths, one-line errors."""

from __future__ import annotations

import shlex

from .conftest import Gpuscope

BUSY = """
def work(n):
    return sum(i * i for i in range(n))

for _ in range(20):
    work(200_000)
print("ok")
"""


def test_the_closing_line_and_the_program_line_are_quoted_for_the_shell(gs: Gpuscope) -> None:
    gs.script("a dir/my prog.py", BUSY)
    res = gs.profile("-t", "cpu", "-o", "out dir report", "a dir/my prog.py")
    assert res.returncode == 0 and "ok" in res.stdout, res.describe()
    last = res.stderr.rstrip("\n").splitlines()[-1]
    path = str(gs.cwd / "out dir report.gpuscope")
    assert last.startswith(f"gpuscope: wrote {path} (") and f"gpuscope analyze {shlex.quote(path)}," in last
    # what the line says to run runs as it is in a shell: the words come back whole
    assert shlex.split(last.split("next: ")[1].split(", ")[0]) == ["gpuscope", "analyze", path]
    program = next(line for line in res.stderr.splitlines() if line.startswith("Program: "))
    assert "'a dir/my prog.py'" in program, program
    page = res.stderr[res.stderr.index("Program: "):]
    assert len(page.splitlines()) <= 40 and "my prog.py:" in page, page


def test_a_directory_is_not_a_program(gs: Gpuscope) -> None:
    (gs.cwd / "adir").mkdir()
    res = gs.profile("adir")
    assert res.returncode == 2 and res.stderr.strip() == (
        "gpuscope: error: adir: is a directory; give a program, a .py script or -m module"), res.describe()


NO_STEPS = """
import torch
x = torch.randn(64, 16)
print("total", float(sum(float(b.sum()) for b in x.split(8))))
"""


def test_the_operator_cost_is_measured_when_no_operator_was_recorded(gs: Gpuscope) -> None:
    """No step, so no operator sample window opens: the recorder's cost is still measured at exit (its
    scratch dispatch mode must not import torch._dynamo then, after PyTorch removed its prims library)."""
    import pytest

    pytest.importorskip("torch")
    gs.script("nosteps.py", NO_STEPS)
    res = gs.profile("-t", "torch-shapes", "-o", "n", "nosteps.py")
    assert res.returncode == 0 and "total" in res.stdout, res.describe()
    assert not res.lines_mentioning("was not measured"), res.describe()
    overhead = res.lines_mentioning("Collection overhead:")
    assert len(overhead) == 1 and "PyTorch operators ~" in overhead[0], res.describe()

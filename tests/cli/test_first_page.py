"""What a new user sees at the end of ``gpuscope profile``: a page, shell-quoted paths, one-line errors."""

from __future__ import annotations

import shlex

from .conftest import Gpuscope, base_env

BUSY = """
def work(n):
    return sum(i * i for i in range(n))

for _ in range(20):
    work(200_000)
print("ok")
"""


def _paragraph(text: str, start: str) -> str:
    """The line starting with ``start`` and the indented lines that continue it, joined."""
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(start))
    out = [lines[i]]
    for line in lines[i + 1:]:
        if not line.startswith("  "):
            break
        out.append(line.strip())
    return " ".join(out)


def test_the_closing_line_and_the_program_line_are_quoted_for_the_shell(gs: Gpuscope) -> None:
    gs.script("a dir/my prog.py", BUSY)
    res = gs.profile("-t", "cpu", "-o", "out dir report", "a dir/my prog.py", env={**base_env(), "COLUMNS": "1000"})
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


def test_the_end_of_run_page_fits_columns(gs: Gpuscope) -> None:
    """At COLUMNS=80 the Program, Collection overhead and closing lines wrap; the closing line's
    commands each come whole on a line of their own, to be copied as they are."""
    gs.script("a dir/my prog.py", BUSY)
    res = gs.profile("-t", "cpu", "-o", "out dir report", "a dir/my prog.py", env={**base_env(), "COLUMNS": "80"})
    assert res.returncode == 0 and "ok" in res.stdout, res.describe()
    page = res.stderr[res.stderr.index("Program: "):]
    path = str(gs.cwd / "out dir report.gpuscope")
    # a path is never broken: only the lines that hold one whole may be longer
    too_long = [line for line in page.splitlines() if len(line) > 80 and path not in line]
    assert not too_long, page
    assert "'a dir/my prog.py'" in _paragraph(page, "Program: "), page
    assert _paragraph(page, "Collection overhead: ").count("Collection overhead") == 1
    tail = page.rstrip("\n").splitlines()[-4:]
    assert tail[0].startswith(f"gpuscope: wrote {path} (") and tail[0].endswith("; next:"), tail
    assert [shlex.split(line) for line in tail[1:]] == [["gpuscope", c, path] for c in ("analyze", "stats", "view")]


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
    assert len(overhead) == 1 and "PyTorch operators ~" in _paragraph(res.stderr, "Collection overhead: "), res.describe()

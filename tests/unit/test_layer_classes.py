"""A module's class beside its name: the PyTorch hooks record it (``module_class``, schema 8), layer
tables and the viewer show ``Sequential.2 (Linear)``, and ``gpuscope diff`` still matches layers by
name; a report of schema 7 reads as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
from report_builder import ReportBuilder

from gpuscope.analysis.ranges.layers import layer_sum, module_labels
from gpuscope.trace.report import Report

MS = 1_000_000


def test_the_hooks_say_each_modules_class_once() -> None:
    torch = pytest.importorskip("torch")
    from gpuscope.capture.python.ranges import RangeRecorder
    from gpuscope.capture.python.torch_hooks import TorchHooks

    hooks = TorchHooks(RangeRecorder(), lambda level, message: None)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(8, 2)))
    assert hooks.name_of(model) == "Sequential"  # the outermost call names its whole tree
    assert hooks.name_of(model[2][0]) == "Sequential.2.0"
    rows = hooks.take_rows()["module_class"]
    assert rows == [("Sequential", "Sequential"), ("Sequential.0", "Linear"), ("Sequential.1", "ReLU"),
                    ("Sequential.2", "Sequential"), ("Sequential.2.0", "Linear")]
    other = torch.nn.Sequential(torch.nn.Linear(4, 8))  # another model of the same root class
    hooks.name_of(other)
    assert hooks.take_rows() == {}  # its names and classes were said already
    hooks.name_of(torch.nn.Sequential(torch.nn.Conv1d(1, 1, 1)))
    assert hooks.take_rows() == {"module_class": [("Sequential.0", "Conv1d")]}


def _layers(path: Path, classes: list[tuple[str, str]]) -> Report:
    b = ReportBuilder(path)
    for k in range(3):
        t = 10 * MS * k
        b.range("Sequential", t, t + 5 * MS, 1, category="forward")
        b.range("Sequential.0", t + MS, t + 2 * MS, 1, category="forward")
        b.range("Sequential.2", t + 3 * MS, t + 4 * MS, 1, category="forward")
        b.range("SGD.step", t + 6 * MS, t + 7 * MS, 1, category="optimizer")
        b.mark("step", t + 8 * MS, 1)
    for name, cls in classes:
        b.writer.con.execute("INSERT INTO module_class VALUES (100, ?, ?)", [b.writer.intern(name), b.writer.intern(cls)])
    return b.open()


def test_layer_tables_and_the_viewer_show_the_class(tmp_path: Path) -> None:
    from gpuscope.analysis.timeline.details import details
    from gpuscope.analysis.timeline.tracks import build_index

    classes = [("Sequential", "Sequential"), ("Sequential.0", "Linear"), ("Sequential.2", "Linear"),
               ("Sequential.2", "Conv2d")]
    with _layers(tmp_path / "l.gpuscope", classes) as r:
        names = [row[0] for row in layer_sum(r).rows]
        assert module_labels(r) == {"Sequential.0": "Sequential.0 (Linear)", "Sequential.2": "Sequential.2 (Conv2d/Linear)"}
        index = build_index(r)
        lane = next(i for i, ln in enumerate(index.lanes) if index.tracks[ln.track].kind != "counter"
                    and any(index.names[int(n)] == "Sequential.0" for n in ln.name))
        at = next(i for i, n in enumerate(index.lanes[lane].name) if index.names[int(n)] == "Sequential.0")
        shown = details(r, index, lane, at)
    # the root ends in its class and the optimizer is no module: both by name alone
    assert set(names) == {"Sequential", "Sequential.0 (Linear)", "Sequential.2 (Conv2d/Linear)", "SGD.step"}
    assert shown is not None and shown["name"] == "Sequential.0 (Linear)"


def test_diff_matches_layers_by_name_whatever_their_label(tmp_path: Path) -> None:
    from gpuscope.analysis.diff.data import run_data

    with _layers(tmp_path / "a.gpuscope", [("Sequential.0", "Linear")]) as r:
        with_class = run_data(r, "a")
    with _layers(tmp_path / "b.gpuscope", []) as r:
        without = run_data(r, "b")
    assert set(with_class.families["layer"]) == set(without.families["layer"])
    assert not any("(" in str(k) for k in with_class.families["layer"])


def test_a_report_of_schema_7_reads_as_before(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("gpt_eager")) as r:
        assert r.meta["schema_version"] <= 7 and r.count("module_class") == 0
        assert module_labels(r) == {}
        names = [row[0] for row in layer_sum(r).rows]
    assert names and not any(n.endswith(")") and " (" in n for n in names)


SCRIPT = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(8):
    model(torch.randn(8, 16)).sum().backward()
    opt.step()
"""


def test_a_profiled_model_has_its_classes_in_the_report(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "m.py"
    script.write_text(SCRIPT)
    out = tmp_path / "m.gpuscope"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "COLUMNS": "120"}
    done = subprocess.run([sys.executable, "-m", "gpuscope", "profile", "-o", str(out), "-t", "torch",
                           "--no-overhead-probe", sys.executable, str(script)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with Report.open(out) as r:
        assert r.meta["schema_version"] >= 8
        labels = module_labels(r)
    assert labels == {"Sequential.0": "Sequential.0 (Linear)", "Sequential.1": "Sequential.1 (ReLU)",
                      "Sequential.2": "Sequential.2 (Linear)"}
    assert "Sequential.2 (Linear)" in done.stderr  # the end-of-run page's heaviest layers

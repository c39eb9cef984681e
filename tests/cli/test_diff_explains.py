"""``gpuscope diff`` on two CPU runs of one training loop, the DataLoader fix between them: the
DataLoader loads in the training process (``num_workers=0``), then in two worker processes.

Each sample costs 8 ms of sleep (a stand-in for reading a file: no core is used, so a loaded
machine changes little), a batch of four 32 ms; the step's own work, a module whose forward sleeps
20 ms, is longer than two workers take per batch (16 ms), so with the workers the loop no longer
waits. The comparison must name the data-loading wait, ~32 ms to ~0, as the main change, and show the
part, the module and the Dataset's line in its tables and JSON. On a loaded machine (2 cores, other
programs running) the other parts move by tens of ms between the runs; the bounds allow for it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Gpuscope

PROGRAM = """
import sys, time
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

WORKERS = int(sys.argv[1])


class Files(Dataset):
    def __len__(self):
        return 4 * 24

    def __getitem__(self, i):
        time.sleep(0.008)  # READ LINE
        return torch.full((16,), float(i)), i % 4


class Work(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        time.sleep(0.020)
        return self.fc(x)


model = Work()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
extra = dict(num_workers=WORKERS, persistent_workers=True) if WORKERS else {}
for x, y in DataLoader(Files(), batch_size=4, **extra):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained")
"""
READ_LINE = next(i for i, text in enumerate(PROGRAM.splitlines(), 1) if "READ LINE" in text)
MS = 1e6


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Gpuscope, Path, Path]:
    gs = Gpuscope(tmp_path_factory.mktemp("dataloader_fix"))
    gs.script("train.py", PROGRAM)
    for name, workers in (("before", "0"), ("after", "2")):
        res = gs.profile("-o", name, "train.py", workers)
        assert res.returncode == 0 and "trained" in res.stdout, res.describe()
    return gs, gs.cwd / "before.gpuscope", gs.cwd / "after.gpuscope"


def test_the_data_loading_wait_is_named_as_the_main_change(two_runs: tuple[Gpuscope, Path, Path]) -> None:
    gs, before, after = two_runs
    res = gs.run("diff", before.name, after.name, "-f", "json")
    assert res.returncode == 0, res.describe()
    doc = json.loads(res.stdout)
    seen = gs.run("diff", before.name, after.name).stdout  # for the messages below
    assert doc["step_time"]["verdict"] == "faster", seen
    parts = {p["name"]: p for p in doc["part"]}
    data = parts["Data loading (waiting for batches)"]
    # on an idle machine the wait after the fix is ~0; with the cores busy the workers lag at times
    assert 25 * MS < data["base"] < 400 * MS and data["new"] < data["base"] / 2 and data["significant"], seen
    # the step's other parts stay: the forward's 20 ms of work is in both runs
    forward = parts["Forward (modules)"]
    assert 19 * MS < forward["base"] and 19 * MS < forward["new"], seen
    assert abs(forward["new"] - forward["base"]) < abs(data["new"] - data["base"]) / 3, seen
    assert doc["attribution"][1].startswith("main change: Data loading (waiting for batches) "), seen
    assert data["share_of_step_change"] > 0.3, seen
    # the Dataset's line, where the main thread spent the wait before the fix, is gone after it
    lines = {p["name"].split(" ")[0].rsplit("/", 1)[-1]: p for p in doc["line"]}
    read = lines[f"train.py:{READ_LINE}"]
    assert read["base"] > 15 * MS and read["new"] == 0, seen
    layers = {p["name"]: p for p in doc["layer"]}
    assert 19 * MS < layers["Work"]["base"] and 19 * MS < layers["Work"]["new"], seen


def test_the_text_shows_the_parts_and_lines(two_runs: tuple[Gpuscope, Path, Path]) -> None:
    gs, before, after = two_runs
    res = gs.run("diff", before.name, after.name)
    assert res.returncode == 0, res.describe()
    attribution = next(line for line in res.stdout.splitlines() if line.startswith("Attribution: "))
    assert "main change: Data loading (waiting for batches) " in attribution and " -> " in attribution
    assert "Step parts (time per step)" in res.stdout and "Program lines" in res.stdout
    assert f"train.py:{READ_LINE} __getitem__" in res.stdout


def test_the_two_run_view_shows_the_same_parts(two_runs: tuple[Gpuscope, Path, Path]) -> None:
    from .html_pages import Gpuscope as PageGpuscope, View

    gs, before, after = two_runs
    doc = json.loads(gs.run("diff", before.name, after.name, "-f", "json").stdout)
    view = View(PageGpuscope(gs.cwd), before, after)
    try:
        c = view.get("/api/diff")
    finally:
        view.stop()
    assert c["attribution"] == doc["attribution"]
    tables = {t["name"]: t for t in c["tables"]}
    assert [r[0][0] for r in tables["diff_part"]["rows"]] == [p["name"] for p in doc["part"]]
    assert [r[0][0] for r in tables["diff_line"]["rows"]] == [p["name"] for p in doc["line"]]
    assert tables["diff_part"]["title"] == "Step parts (time per step)"

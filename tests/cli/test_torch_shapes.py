"""Operators in sample windows (``--trace torch-shapes``), from unmodified CPU scripts, through ``gpuscope profile``."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import gpuscope
from gpuscope.capture import collectors as traces

from .conftest import Gpuscope, base_env

pytest.importorskip("torch")

TRAIN = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
for _ in range(STEPS):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
print("trained")
"""

INFER = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
x = torch.randn(8, 16)
with torch.no_grad():
    for _ in range(300):
        model(x).softmax(-1)
print("trained")
"""

# A tokenizer-like loop: pure Python between operators, the model under torch.inference_mode (a guard that
# saves the thread's dispatch keys and restores them whole when it ends), and after it operators without
# tensor arguments (torch.zeros, torch.tensor of a list). Most operators run inside the guard, so the sample
# window closes there; the recorder must take its mode off the stack only outside the guard.
TOKENIZE = """
import json, torch
torch.manual_seed(0)
layers = []
for _ in range(12):
    layers += [torch.nn.Linear(16, 16), torch.nn.GELU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(16, 4))
CLASSIFY
words = [f"word{i}" for i in range(997)]

def tokenize(k):
    return [[sum(map(ord, words[(k * 31 + i * 16 + j) % 997])) % 251 for j in range(16)] for i in range(8)]

for k in range(300):
    x = torch.tensor(tokenize(k), dtype=torch.float32)
    with torch.inference_mode():
        probs = classify(x)
    labels = probs.numpy().argmax(1).tolist()
    torch.zeros(4)
    torch.arange(3).tolist()
print("trained", json.dumps(labels))
"""
EAGER = "classify = lambda x: model(x).softmax(-1)"
# torch.compile's wrapper of every compiled call restores the dispatch keys it found, like inference_mode;
# the graph break runs Python inside it.
COMPILED = """
@torch.compile(backend="eager")
def classify(x):
    y = model(x)
    torch._dynamo.graph_break()
    return y.softmax(-1)
"""


def _profile(gs: Gpuscope, body: str, trace: str, env: dict[str, str] | None = None, *options: str) -> Path:
    gs.script("train.py", body)
    res = gs.profile("-t", trace, *options, "-o", "r", "train.py", env=base_env(env), timeout=180)
    assert res.returncode == 0 and "trained" in res.stdout, res.describe()
    return gs.cwd / "r.gpuscope"


def _facts(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, list[int], dict[str, object]]:
    with gpuscope.load(str(path)) as report:
        ops = report.df("SELECT t.start_ns, t.end_ns, s.value AS name FROM torch_op t "
                        "JOIN string s ON s.id = t.name_id ORDER BY t.start_ns")
        windows = report.df("SELECT * FROM torch_op_window ORDER BY start_ns")
        marks = [t for (t,) in report.sql("SELECT start_ns FROM nvtx_range WHERE kind = 'mark' AND category = 'step' "
                                          "ORDER BY start_ns")]
        (detail,) = report.sql("SELECT detail FROM collector WHERE name = 'torch-shapes'")[0]
        return ops, windows, marks, {"meta": report.meta, "detail": detail}


def test_operators_are_recorded_in_two_steps_after_the_first_only(gs: Gpuscope) -> None:
    path = _profile(gs, TRAIN.replace("STEPS", "12"), "torch,torch-shapes")
    ops, windows, marks, facts = _facts(path)
    assert len(marks) == 12
    (w,) = windows.itertuples()
    assert w.reason == "end of step 1 to end of step 3" and w.operators == len(ops) > 0
    assert (w.start_ns, w.end_ns) == (marks[0], marks[2])  # opened and closed at the step marks
    assert ((ops["start_ns"] >= w.start_ns) & (ops["end_ns"] <= w.end_ns)).all()
    second = ops[ops["start_ns"] < marks[1]]
    third = ops[ops["start_ns"] > marks[1]]
    assert list(second["name"]) == list(third["name"])  # two whole steps, the same operators
    assert {"aten::addmm", "aten::mm", "aten::relu"} <= set(second["name"])
    assert "torch-shapes" in facts["meta"]["trace"]  # type: ignore[index]


def test_without_steps_the_window_ends_when_the_operators_repeat(gs: Gpuscope) -> None:
    path = _profile(gs, INFER, "torch-shapes", {"GPUSCOPE_TORCH_SHAPES": "skip_ops=100,min_ops=50"})
    ops, windows, marks, _ = _facts(path)
    assert marks == []
    (w,) = windows.itertuples()
    assert w.reason == "after 100 operators to operators repeating" and w.operators == len(ops) >= 50
    assert ((ops["start_ns"] >= w.start_ns) & (ops["end_ns"] <= w.end_ns)).all()
    assert {"aten::addmm", "aten::gelu", "aten::_softmax"} <= set(ops["name"])


@pytest.mark.parametrize("classify", [EAGER, COMPILED], ids=["inference_mode", "compiled"])
def test_the_mode_leaves_only_where_no_guard_would_restore_the_dispatch_keys(gs: Gpuscope, classify: str) -> None:
    # A mode that left inside a guard restoring the dispatch keys at its end, with nothing put back there, had
    # the guard's end put the Python dispatch key back with the stack empty, and the next torch.zeros or
    # torch.tensor(list) failed inside torch ("Hit Python dispatch key but no arguments had PyInterpreter").
    # torch.inference_mode is followed: the mode leaves inside it, is put back where it was when the guard
    # ends, and leaves again; inside torch.compile's wrapper it waits.
    if classify == COMPILED:
        from torch._dynamo.eval_frame import is_dynamo_supported  # noqa: PLC0415

        if not is_dynamo_supported():
            pytest.skip("torch.compile does not run on this Python")
    # without the overhead probe, which would cut the one window this looks at in two (the model's calls
    # count the loop's iterations for it)
    path = _profile(gs, TOKENIZE.replace("CLASSIFY", classify), "torch,torch-shapes",
                    {"GPUSCOPE_TORCH_SHAPES": "skip_ops=300,min_ops=104,later_s=0"}, "--no-overhead-probe")
    ops, windows, _, facts = _facts(path)
    (w,) = windows.itertuples()
    assert w.reason == "after 300 operators to operators repeating" and w.operators == len(ops) >= 104
    assert ((ops["start_ns"] >= w.start_ns) & (ops["end_ns"] <= w.end_ns)).all()
    detail = json.loads(str(facts["detail"]))
    # it left (inside the inference_mode guard), and left again after the guard's end had put it back
    assert detail["failed"] == 0 and detail["mode_moves"] == 2


def test_a_wrong_policy_is_said_in_one_line_and_the_default_used(gs: Gpuscope) -> None:
    gs.script("train.py", TRAIN.replace("STEPS", "4"))
    res = gs.profile("-t", "torch,torch-shapes", "-o", "r", "train.py",
                     env=base_env({"GPUSCOPE_TORCH_SHAPES": "skip_ops=many"}), timeout=180)
    assert res.returncode == 0, res.describe()
    assert res.lines_mentioning("GPUSCOPE_TORCH_SHAPES: skip_ops needs a number, not 'many'; the default")


def test_every_operator_wins_over_samples() -> None:
    assert traces.parse_trace("torch,torch-ops,torch-shapes") == ["torch", "torch-ops"]
    assert "torch-shapes" in traces.parse_trace(None)  # part of the GPU default
    assert "torch-shapes" in traces.cpu_only(traces.parse_trace(None))  # and without one

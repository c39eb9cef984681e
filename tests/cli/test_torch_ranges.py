"""PyTorch ranges from an unmodified CPU training script, through ``gpuscope profile``."""

from __future__ import annotations

from collections import Counter

import pytest

import gpuscope

from .conftest import Gpuscope, base_env

pytest.importorskip("torch")

TRAIN = """
import torch
torch.manual_seed(0)

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)
        self.act = torch.nn.ReLU(inplace=True)  # in-place on a module output: hooks must not break it

    def forward(self, x):
        return x + self.act(self.lin(x))

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(8, 16)
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.out = torch.nn.Linear(16, 2)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))

model = Net()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(48, 8), torch.randn(48, 2)), batch_size=16)
for x, y in data:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
with torch.no_grad():
    model(torch.randn(4, 8))  # inference: forward ranges, no backward
{extra}
print("trained")
"""

COMPILED = """
import torch._dynamo
from torch._dynamo.utils import counters
compiled = torch.compile(model, backend="eager")
for _ in range(2):
    compiled(torch.randn(4, 8)).sum().backward()
print("graph breaks:", sum(counters["graph_break"].values()))
"""


def _ranges(gs: Gpuscope, extra: str = "") -> tuple[object, str]:
    gs.script("train.py", TRAIN.replace("{extra}", extra))
    res = gs.profile("-t", "torch-backward", "-o", "r", "train.py")  # torch-backward implies torch
    assert res.returncode == 0 and "trained" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "r.gpuscope")) as report:
        return report.ranges(), res.stdout


def test_modules_optimizer_data_and_steps(gs: Gpuscope) -> None:
    r, _ = _ranges(gs)
    torch_r = r[r["source"] == "torch"]
    count = Counter(zip(torch_r["category"], torch_r["name"]))
    batches = 3
    for name in ("Net", "Net.inp", "Net.blocks", "Net.blocks.0", "Net.blocks.0.lin",
                 "Net.blocks.0.act", "Net.blocks.1.lin", "Net.out"):
        assert count[("forward", name)] == batches + 1, name  # + the no-grad inference call
        # parameterless leaves (the activations) have no backward range of their own
        assert count[("backward", name)] == (0 if name.endswith(".act") else batches), name
    assert count[("optimizer", "AdamW.step")] == batches
    assert count[("zero_grad", "AdamW.zero_grad")] == batches
    assert count[("autograd", "backward")] == batches
    assert count[("dataloader", "DataLoader.__next__")] == batches + 1  # + the StopIteration
    steps = torch_r[torch_r["category"] == "step"]
    assert len(steps) == batches and set(steps["kind"]) == {"mark"}
    assert r["end_ns"].notna().all()


def test_ranges_nest(gs: Gpuscope) -> None:
    r, _ = _ranges(gs)
    r = r[r["source"] == "torch"]

    def first(category: str, name: str) -> tuple[int, int]:
        row = r[(r["category"] == category) & (r["name"] == name)].iloc[0]
        return row["start_ns"], row["end_ns"]

    for category in ("forward", "backward"):
        block = first(category, "Net.blocks.0")
        lin = first(category, "Net.blocks.0.lin")
        assert block[0] <= lin[0] <= lin[1] <= block[1], category
    fwd, bwd = first("forward", "Net"), first("backward", "Net.out")
    call = first("autograd", "backward")
    assert fwd[1] <= call[0] <= bwd[0] <= bwd[1] <= call[1]  # module backward inside loss.backward()
    # backward runs last layer first
    assert first("backward", "Net.out")[0] < first("backward", "Net.blocks.1")[0] < first("backward", "Net.inp")[0]


def test_compiled_module_without_graph_breaks(gs: Gpuscope) -> None:
    r, out = _ranges(gs, COMPILED)
    assert "graph breaks: 0" in out
    fwd = r[(r["source"] == "torch") & (r["category"] == "forward")]
    # the compiled wrapper's call is one range, named after the original module; nothing inside it
    assert Counter(fwd["name"])["Net"] == 3 + 1 + 2
    assert Counter(fwd["name"])["Net.inp"] == 3 + 1


def test_a_container_and_its_last_child_start_backward_together(gs: Gpuscope) -> None:
    r, _ = _ranges(gs)
    bwd = r[(r["source"] == "torch") & (r["category"] == "backward")]
    # Net.out's output is Net's output; Net.blocks.1 (a Block) returns what Net.blocks returns
    for outer, inner in (("Net", "Net.out"), ("Net.blocks", "Net.blocks.1")):
        o = bwd[bwd["name"] == outer].reset_index(drop=True)
        i = bwd[bwd["name"] == inner].reset_index(drop=True)
        assert list(o["start_ns"]) == list(i["start_ns"]), (outer, inner)
        assert (i["end_ns"] <= o["end_ns"]).all()


EDGES = """
import torch, gpuscope

class Recursive(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, depth=2):
        x = self.lin(x)
        return self(x, depth - 1) if depth else x  # calls itself while running

seen = []
model = Recursive()
model.lin.register_forward_hook(lambda m, i, o: seen.append("user hook"))
model(torch.randn(2, 4)).sum().backward()
gpuscope.pop_range()  # nothing open
gpuscope.push_range("left open")
print(len(seen), "user hooks ran")
"""


def test_reentrant_modules_user_hooks_and_misuse_are_counted(gs: Gpuscope) -> None:
    gs.script("edges.py", EDGES)
    res = gs.profile("-t", "torch,torch-backward", "-o", "e", "edges.py")
    assert res.returncode == 0 and "3 user hooks ran" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "e.gpuscope")) as report:
        r = report.ranges()
        messages = " | ".join(report.diagnostics()["message"])
    fwd = r[(r["category"] == "forward") & (r["name"] == "Recursive")]
    assert len(fwd) == 3  # nested calls of the same module, each its own range
    assert "2 re-entrant calls of a module already running" in messages
    assert "1 modules that already had hooks" in messages
    assert "1 range pops without an open range" in messages
    assert "1 ranges still open when the process ended" in messages
    assert r.loc[r["name"] == "left open", "end_ns"].isna().all()


EMBEDDED = """
import torch
model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 1))
for _ in range(3):
    model(torch.randint(0, 50, (4,))).sum().backward()
print("trained")
"""


def test_a_backward_that_pytorch_never_ends_is_named(gs: Gpuscope) -> None:
    """Integer indices into the model: no gradient flows into its inputs, so PyTorch never ends the
    root module's backward; the run names the module and says what that means for layer_sum."""
    gs.script("emb.py", EMBEDDED)
    res = gs.profile("-t", "torch-backward", "-o", "e", "emb.py")
    assert res.returncode == 0 and "trained" in res.stdout, res.describe()
    said = [line for line in res.own_lines if "has no end from PyTorch" in line]
    assert said == ["gpuscope: the backward of Sequential (3 times) has no end from PyTorch: no gradient flows into "
                    "its inputs (integer indices, or tensors that need no gradient), so its backward ranges were "
                    "ended with the backward pass, and layer_sum's backward time for it runs to that end"], res.describe()
    with gpuscope.load(str(gs.cwd / "e.gpuscope")) as report:
        r = report.ranges()
    passes = r[(r["category"] == "autograd") & (r["name"] == "backward")].sort_values("start_ns")
    root = r[(r["category"] == "backward") & (r["name"] == "Sequential")].sort_values("start_ns")
    assert len(root) == 3 and len(passes) == 3
    # each ended as its backward pass returned: after the pass's range, before the next pass
    ends, next_starts = list(root["end_ns"]), [*list(passes["start_ns"])[1:], float("inf")]
    assert all(p <= e < n for p, e, n in zip(passes["end_ns"], ends, next_starts))


def test_the_nvtx_package_is_recorded_while_profiling(gs: Gpuscope) -> None:
    pytest.importorskip("nvtx")
    gs.script("pkg.py", """
import nvtx

@nvtx.annotate(color="red")
def work():
    return 1

with nvtx.annotate("default domain range"):
    work()
nvtx.push_range("named", domain="mine")
nvtx.pop_range(domain="mine")
""")
    res = gs.profile("-t", "nvtx", "-o", "p", "pkg.py")
    assert res.returncode == 0, res.describe()
    with gpuscope.load(str(gs.cwd / "p.gpuscope")) as report:
        r = report.ranges()
    got = {(n, d, s) for n, d, s in zip(r["name"], r["domain"], r["source"])}
    assert got == {("default domain range", "", "nvtx-python"), ("work", "", "nvtx-python"),
                   ("named", "mine", "nvtx-python")}


def test_forked_dataloader_workers_are_skipped_not_hung(gs: Gpuscope) -> None:
    gs.script("workers.py", """
import torch
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=8,
                                   num_workers=2, multiprocessing_context="fork")
print(sum(len(b[0]) for b in data), "rows")
""")
    res = gs.profile("-t", "torch,cpu", "-o", "w", "workers.py", timeout=120)
    assert res.returncode == 0 and "64 rows" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "w.gpuscope")) as report:
        assert report.count("process") == 1  # the forked workers are not traced
        r = report.ranges()
    assert (r["category"] == "dataloader").sum() == 8 + 1


def test_module_backward_ranges_only_when_asked(gs: Gpuscope) -> None:
    gs.script("train.py", TRAIN.replace("{extra}", ""))
    res = gs.profile("-t", "torch", "-o", "f", "train.py")
    assert res.returncode == 0 and "trained" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "f.gpuscope")) as report:
        r = report.ranges()
        hint = report.not_recorded().get("torch_backward", "")
    torch_r = r[r["source"] == "torch"]
    assert (torch_r["category"] == "forward").sum() > 0
    assert (torch_r["category"] == "backward").sum() == 0  # no per-module backward ranges
    assert (torch_r["category"] == "autograd").sum() == 3  # the backward() calls still are ranges
    assert "--trace torch-backward" in hint


INFER = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(8, 2)))
with torch.no_grad():
    for _ in range(12):  # an inference loop: each outermost call is an iteration
        model(torch.randn(4, 8))
print("done")
"""


def test_sampled_module_steps_keep_the_outermost_call_of_the_others(gs: Gpuscope) -> None:
    """With module ranges in some steps only (the first 3, then one in 4: iterations 0-3, 7 and 11),
    the other iterations keep the model's own call as a ``model`` range and nothing inside it (the
    overhead probe may take an iteration or two with collection off: those have no range at all)."""
    gs.script("infer.py", INFER)
    res = gs.profile("-t", "torch", "-o", "r", "infer.py", env=base_env({"GPUSCOPE_MODULE_STEPS": "first=3,every=4"}))
    assert res.returncode == 0 and "done" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "r.gpuscope")) as report:
        r = report.ranges()
    marks = sorted(r[(r["category"] == "iteration") & (r["kind"] == "mark")]["start_ns"])
    assert len(marks) == 12
    torch_r = r[(r["source"] == "torch") & (r["kind"] == "range")]
    by_iteration: dict[int, Counter[tuple[str, str]]] = {}
    for row in torch_r.itertuples():
        it = sum(1 for t in marks if t < row.start_ns)
        by_iteration.setdefault(it, Counter())[(row.category, row.name)] += 1
    recorded = {0, 1, 2, 3, 7, 11}
    for it, seen in by_iteration.items():
        if it in recorded:
            assert seen == Counter({("forward", n): 1 for n in ("Sequential", "Sequential.0", "Sequential.1",
                                                                  "Sequential.1.0", "Sequential.1.1")}), (it, seen)
        else:
            assert seen == Counter({("model", "Sequential"): 1}), (it, seen)
    assert len(set(by_iteration) & recorded) >= 4 and len(set(by_iteration) - recorded) >= 3, by_iteration

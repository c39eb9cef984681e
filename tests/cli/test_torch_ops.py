"""PyTorch operators with their shapes, from an unmodified CPU training script, through ``gpuscope profile``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import gpuscope
from gpuscope.analysis.ranges.operators import op_sum, torch_ops_table
from gpuscope.capture import collectors as traces

from .conftest import Gpuscope

pytest.importorskip("torch")

STEPS = 3
TRAIN = f"""
import threading
import torch
torch.manual_seed(0)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range({STEPS}):
    opt.zero_grad()
    x = torch.randn(2, 3, 8, 8)
    loss = torch.nn.functional.cross_entropy(model(x), torch.tensor([1, 2]))
    loss.backward()
    opt.step()

def worker():
    torch.cat([torch.ones(5, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)])

t = threading.Thread(target=worker, name="worker")
t.start()
t.join()
print("worker", t.native_id)
{{extra}}
print("trained")
"""

COMPILED = """
from torch._dynamo.utils import counters
compiled = torch.compile(model, backend="eager")
for _ in range(2):
    compiled(torch.randn(5, 3, 8, 8)).sum().backward()
print("graphs:", counters["stats"]["unique_graphs"])
"""


def _profile(gs: Gpuscope, extra: str = "", *trace: str) -> tuple[Path, str]:
    gs.script("train.py", TRAIN.replace("{extra}", extra))
    args = ("-t", ",".join(trace or ("torch", "torch-backward", "torch-ops")), "-o", "r") if trace != ("default",) \
        else ("-o", "r")
    res = gs.profile(*args, "train.py", timeout=180)
    assert res.returncode == 0 and "trained" in res.stdout, res.describe()
    return gs.cwd / "r.gpuscope", res.stdout


def _ops(path: Path) -> pd.DataFrame:
    with gpuscope.load(str(path)) as report:
        return report.df(f"SELECT * FROM {torch_ops_table(report)} ORDER BY torch_op_id")


def _one(ops: pd.DataFrame, name: str, nth: int = 0) -> dict[str, Any]:
    rows = ops[ops["name"] == name]
    assert len(rows) > nth, f"{name}: {sorted(set(ops['name']))}"
    row = rows.iloc[nth].to_dict()
    for col in ("shapes", "dtypes", "out_shapes", "scalars"):
        row[col] = json.loads(row[col])
    return row


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One profiled run of the training script, with torch ranges (module backward included) and operators."""
    return _profile(Gpuscope(tmp_path_factory.mktemp("ops")))


def test_forward_operators_with_shapes_dtypes_and_arguments(trained: tuple[Path, str]) -> None:
    ops = _ops(trained[0])
    conv = _one(ops, "aten::convolution")
    assert conv["shapes"][:3] == [[2, 3, 8, 8], [4, 3, 3, 3], [4]] and conv["shapes"][3:] == [None] * 6
    assert conv["dtypes"][:3] == ["float32"] * 3
    assert conv["out_shapes"] == [[2, 4, 4, 4]]
    assert conv["scalars"] == {"stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "transposed": False,
                               "output_padding": [0, 0], "groups": 1}
    addmm = _one(ops, "aten::addmm")  # Linear: bias, input, transposed weight
    assert addmm["shapes"] == [[10], [2, 64], [64, 10]] and addmm["out_shapes"] == [[2, 10]]
    nll = _one(ops, "aten::nll_loss_forward")
    assert nll["dtypes"][:2] == ["float32", "int64"]
    assert (ops.groupby("name").size()[["aten::convolution", "aten::addmm", "aten::relu"]] == STEPS).all()


def test_backward_operators_are_recorded_and_linked_to_their_forward(trained: tuple[Path, str]) -> None:
    ops = _ops(trained[0])
    conv_bwd = _one(ops, "aten::convolution_backward")
    assert conv_bwd["shapes"][:3] == [[2, 4, 4, 4], [2, 3, 8, 8], [4, 3, 3, 3]]
    assert conv_bwd["out_shapes"] == [None, [4, 3, 3, 3], [4]]  # the input needs no gradient
    assert (ops["name"] == "aten::convolution_backward").sum() == STEPS
    # Linear's backward: the gradients of its input and weight are two matrix products
    mm = ops[ops["name"] == "aten::mm"]
    shapes = sorted(json.loads(s)[0] + json.loads(s)[1] for s in mm["shapes"].iloc[:2])
    assert shapes == sorted([[2, 10, 10, 64], [10, 2, 2, 64]])
    # autograd's sequence number links each backward operator to the forward one of its node
    conv, addmm = ops[ops["name"] == "aten::convolution"], ops[ops["name"] == "aten::addmm"]
    assert conv["seq"].notna().all() and addmm["seq"].notna().all()
    assert list(ops.loc[ops["name"] == "aten::convolution_backward", "seq"]) == list(conv["seq"])
    assert set(mm["seq"]) == set(addmm["seq"])


def test_operators_nest_inside_the_module_ranges_of_their_thread(trained: tuple[Path, str]) -> None:
    ops = _ops(trained[0])
    with gpuscope.load(str(trained[0])) as report:
        ranges = report.ranges()
    ranges = ranges[ranges["source"] == "torch"]

    def inside(op: str, module: str, category: str) -> int:
        calls = ops[ops["name"] == op]
        spans = ranges[(ranges["name"] == module) & (ranges["category"] == category)]
        assert len(calls) == len(spans) == STEPS, (op, module, category)
        for (_, c), (_, s) in zip(calls.iterrows(), spans.sort_values("start_ns").iterrows()):
            assert c["tid"] == s["tid"] and s["start_ns"] <= c["start_ns"] <= c["end_ns"] <= s["end_ns"], (op, module)
        return len(calls)

    inside("aten::convolution", "Net.conv", "forward")
    inside("aten::addmm", "Net.fc", "forward")
    inside("aten::convolution_backward", "Net.conv", "backward")
    assert (ops["depth"] == 0).all() and ops["parent_id"].isna().all()  # the recorder sees no nesting


def test_threads_of_the_program_are_recorded(trained: tuple[Path, str]) -> None:
    path, out = trained
    worker_tid = int(out.split("worker ")[1].split()[0])
    ops = _ops(path)
    cat = _one(ops, "aten::cat")
    assert cat["tid"] == worker_tid and cat["shapes"] == [[[5], [3]]] and cat["dtypes"] == [["float64", "float64"]]
    assert set(ops.loc[ops["tid"] == worker_tid, "name"]) == {"aten::ones", "aten::zeros", "aten::cat"}


def test_op_sum_adds_up_to_the_recorded_calls(trained: tuple[Path, str]) -> None:
    ops = _ops(trained[0])
    with gpuscope.load(str(trained[0])) as report:
        table = op_sum(report)
        collector = report.df("SELECT * FROM collector WHERE name = 'torch-ops'")
    rows = table.records()
    assert sum(r["Calls"] for r in rows) == len(ops)
    assert sum(r["CPU Total"] for r in rows) == int((ops["end_ns"] - ops["start_ns"]).sum())
    conv = [r for r in rows if r["Name"] == "aten::convolution"]
    assert len(conv) == 1 and conv[0]["Calls"] == STEPS
    assert conv[0]["Input Shapes"] == "[[2,3,8,8],[4,3,3,3],[4]]"  # trailing non-tensor arguments left out
    assert conv[0]["Kernels"] is None and "No GPU activity in this report." in table.notes
    cpu = [r["CPU Total"] for r in rows]
    assert cpu == sorted(cpu, reverse=True)  # without GPU time, the costliest calls first
    assert collector["records"].iloc[0] == len(ops) and collector["failed_records"].iloc[0] == 0


def test_compiled_programs_stay_compiled(gs: Gpuscope) -> None:
    path, out = _profile(gs, COMPILED)
    assert "graphs: 1" in out  # the operator mode does not make torch.compile fall back to eager
    ops = _ops(path)
    # the eager backend runs the graph's operators, which are recorded with the compiled batch size
    assert ((ops["name"] == "aten::convolution") & ops["shapes"].str.startswith("[[5,3,8,8]")).sum() == 2
    assert not ops["shapes"].str.contains("s0|s1").any()  # no symbolic shapes from the tracing


def test_without_a_gpu_the_default_records_operators_in_a_sample_window(gs: Gpuscope) -> None:
    if traces.gpu_present():
        pytest.skip("this machine has an NVIDIA driver: the default is the GPU set")
    path, _ = _profile(gs, "", "default")
    with gpuscope.load(str(path)) as report:
        assert "torch-shapes" in report.meta["trace"] and "torch-ops" not in report.meta["trace"]
        # the window opens at the end of step 1 and closes at the end of step 3: steps 2 and 3 only
        ((reason, operators),) = report.sql("SELECT reason, operators FROM torch_op_window")
        assert reason == "end of step 1 to end of step 3"
        assert report.count("torch_op") == operators > 0
        names = {n for (n,) in report.sql("SELECT DISTINCT s.value FROM torch_op t JOIN string s ON s.id = t.name_id")}
        (costs,) = [json.loads(d) for (d,) in report.sql("SELECT detail FROM collector WHERE name = 'torch-shapes'")]
    assert {"aten::convolution", "aten::convolution_backward", "aten::addmm", "aten::mm"} <= names
    assert costs["ns_per_op_recorded"] > 0 and costs["ns_per_op_passed"] >= 0  # for the overhead line

"""A data-parallel job on the CPU (torchrun, gloo) profiled as a user runs it: every rank in one
report with its rank number, the straggler and its cause first, and a rank that dies or hangs."""

from __future__ import annotations

import json
import sys

import pytest

import gpuscope
from gpuscope.analysis.distributed.summaries import rank_steps

from .conftest import Gpuscope

pytest.importorskip("torch.distributed")

DDP = """
import datetime, os, sys, time
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ.get("TIMEOUT_S", "60"))))
rank = dist.get_rank()
torch.set_num_threads(1)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
SLOW = int(os.environ.get("SLOW_RANK", "-1"))
DIE, HANG = int(os.environ.get("DIE_AT", "-1")), int(os.environ.get("HANG_AT", "-1"))

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 10**6
    def __getitem__(self, i):
        if rank == SLOW:
            time.sleep(0.002)  # the planted straggler: a slower input pipeline
        return torch.randn(64), torch.randn(8)

def wait_for_a_lost_peer():
    time.sleep(30)  # HUNG HERE

loader = iter(torch.utils.data.DataLoader(Data(), batch_size=8))
for step in range(int(os.environ.get("STEPS", "12"))):
    if rank == 1 and step == DIE:
        sys.stdout.flush()
        os._exit(3)
    if rank == 1 and step == HANG:
        wait_for_a_lost_peer()
    x, y = next(loader)
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
pair = dist.new_group(list(range(dist.get_world_size())), group_desc="pair")  # a second process group
dist.all_reduce(torch.ones(16), group=pair)
dist.destroy_process_group()
print("rank", rank, "done")
"""


def _torchrun(gs: Gpuscope, out: str, env: dict[str, str], ranks: int = 2) -> object:
    from .conftest import base_env

    gs.script("ddp.py", DDP)
    # every step recorded: the script's last collective (on a second group) comes right after its
    # last step, which the overhead probe's third window would hold with 12 steps
    return gs.profile("-o", out, "--no-overhead-probe", sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks),
                      "--monitor_interval", "0.2", "ddp.py", env=base_env(env), timeout=120)


def test_every_rank_is_recorded_and_the_straggler_is_the_top_finding(gs: Gpuscope) -> None:
    res = _torchrun(gs, "job", {"SLOW_RANK": "1"})
    assert res.returncode == 0, res.describe()
    with gpuscope.load(str(gs.cwd / "job.gpuscope")) as report:
        ranks = report.df("SELECT pid, rank, world_size, backend, host FROM rank ORDER BY rank")
        agents = report.sql("SELECT count(*) FROM process WHERE pid NOT IN (SELECT pid FROM rank)")[0][0]
    assert ranks["rank"].tolist() == [0, 1] and set(ranks["world_size"]) == {2}
    assert set(ranks["backend"]) == {"gloo"} and agents == 1  # torchrun's own process has no rank
    doc = json.loads(gs.run("analyze", "job.gpuscope", "-f", "json").stdout)
    top = doc["findings"][0]
    assert top["rule"] == "straggler", [f["rule"] for f in doc["findings"]]
    assert top["data"]["straggler_rank"] == 1 and top["data"]["cause_part"] == "cpu_data"
    # 8 samples of 2 ms per batch: rank 0 waits about 16 ms per step for rank 1
    assert 8e6 < top["saving_ns"] < 40e6, top
    stats = gs.run("stats", "job.gpuscope", "-r", "rank_sum", "-f", "json")
    rows = json.loads(stats.stdout)["rank_sum"]["rows"]
    by_rank = {r["Rank"]: r for r in rows}
    assert by_rank[1]["Arrived Last (%)"] > 80 and by_rank[0]["Wait/Step (ns)"] > 8e6, rows
    # each collective with its process group: DDP's on the default group, the last all-reduce on the second one
    kinds = json.loads(gs.run("stats", "job.gpuscope", "-r", "collective_sum", "-f", "json").stdout)
    groups = {(r["Kind"], r["Group"], r["Group Size"]) for r in kinds["collective_sum"]["rows"]}
    assert ("all_reduce", "default_pg (0)", 2) in groups and ("all_reduce", "pair (1)", 2) in groups, groups
    pair = [r for r in kinds["collective_sum"]["rows"] if r["Group"] == "pair (1)"]
    assert [(r["Calls"], r["Bytes (B)"]) for r in pair] == [(1, 64.0), (1, 64.0)], pair


def test_a_rank_that_dies_leaves_its_data_and_the_others(gs: Gpuscope) -> None:
    # rank 1 dies without its exit handlers (os._exit) after about 1.5 s of steps: what its agent
    # flushed until then (every 0.5 s) stays, and rank 0, whose collective fails, ends normally
    res = _torchrun(gs, "died", {"DIE_AT": "80", "STEPS": "100", "SLOW_RANK": "1", "TIMEOUT_S": "5"})
    assert res.returncode != 0, res.describe()
    with gpuscope.load(str(gs.cwd / "died.gpuscope")) as report:
        assert sorted(r for (r,) in report.sql("SELECT rank FROM rank")) == [0, 1]
        per = rank_steps(report)
        analyze = gs.run("analyze", "died.gpuscope")
    steps = per.groupby("rank")["step"].max().to_dict()
    assert steps[0] >= 79 and 20 <= steps[1] <= 80, steps
    assert analyze.returncode == 0 and "Traceback" not in analyze.stderr


def test_a_rank_that_never_reaches_a_collective_is_named_with_its_last_stack(gs: Gpuscope) -> None:
    # rank 1 stops before step 7's collectives; rank 0's all-reduce times out after 3 s, torchrun ends rank 1
    res = _torchrun(gs, "hung", {"HANG_AT": "6", "TIMEOUT_S": "3"})
    assert res.returncode != 0, res.describe()
    doc = json.loads(gs.run("analyze", "hung.gpuscope", "-f", "json").stdout)
    top = doc["findings"][0]
    assert top["rule"] == "hung_rank", [f["rule"] for f in doc["findings"]]
    assert top["data"]["hung_rank"] == 1 and top["data"]["kind"] == "all_reduce"
    assert "wait_for_a_lost_peer" in (top["data"]["stack"] or ""), top
    assert top["data"]["waited_ns"] > 2e9  # rank 0 waited until its timeout

"""A multi-node run as a user profiles and reads it: one report per node (``-o node%q{NODE}``), given
together to ``stats``, ``analyze`` and ``view``, which read them as one run with aligned clocks."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from rank_reports import MS, nccl_nodes

from .conftest import Gpuscope, base_env
from .test_ranks import DDP

OFFSET = 7_654_321_987


@pytest.fixture
def nodes(tmp_path: Path) -> list[Path]:
    """Two nodes of 2 ranks each, node 1's clock 7.65 s ahead; rank 3 (node 1) loads slowest."""
    return nccl_nodes(tmp_path, offsets_ns=(0, OFFSET))


def test_stats_and_analyze_read_the_nodes_of_one_run_as_one(gs: Gpuscope, nodes: list[Path]) -> None:
    stats = gs.run("stats", *map(str, nodes), "-f", "json")
    assert stats.returncode == 0, stats.describe()
    assert "nodes of one run" in stats.stderr and "-7,654.32" in stats.stderr and "collective ends" in stats.stderr
    doc = json.loads(stats.stdout)
    assert set(doc) == {"fleet_kern_sum", "fleet_rank_sum", "rank_sum", "collective_sum", "rank_layer_sum"}
    ranks = {r["Rank"]: r for r in doc["rank_sum"]["rows"]}
    assert sorted(ranks) == [0, 1, 2, 3] and ranks[3]["Arrived Last (%)"] == 100.0
    assert ranks[0]["Wait/Step (ns)"] == pytest.approx(3.4 * MS, abs=10_000)
    assert doc["rank_layer_sum"]["rows"][0]["Max Rank"] == 3
    one = gs.run("stats", *map(str, nodes), "-r", "step_sum", "-f", "csv")  # any report of one report file
    assert one.returncode == 0 and one.stdout.startswith("PID,Step,") and "10000101,6," in one.stdout, one.describe()
    analyze = gs.run("analyze", *map(str, nodes), "-f", "json")
    assert analyze.returncode == 0, analyze.describe()
    straggler = next(f for f in json.loads(analyze.stdout)["findings"] if f["rule"] == "straggler")
    assert straggler["data"]["straggler_rank"] == 3 and straggler["data"]["cause_part"] == "idle_data"


def test_the_same_node_given_twice_counts_once(gs: Gpuscope, nodes: list[Path]) -> None:
    res = gs.run("stats", *map(str, nodes), str(nodes[1]), "-r", "rank_sum", "-f", "json")
    assert res.returncode == 0, res.describe()
    assert "counted once" in res.stderr and len(json.loads(res.stdout)["rank_sum"]["rows"]) == 4


def test_view_shows_the_nodes_on_one_timeline(gs: Gpuscope, nodes: list[Path], tmp_path: Path) -> None:
    proc = gs.start("view", *map(str, nodes), "--no-browser")
    try:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(120)
        assert line and line[0].startswith("http://127.0.0.1:"), line
        with urllib.request.urlopen(line[0].strip(), timeout=60) as r:
            page = r.read().decode()
    finally:
        proc.terminate()
        proc.wait(30)
    from .html_pages import page_data

    tl = page_data(page)["timeline"]
    assert tl["end_ns"] - tl["start_ns"] < 100 * MS  # one timeline of 60 ms, not two 7.65 s apart
    groups = " ".join(t["group"] for t in tl["tracks"])
    assert "10000101" in groups and "101" in groups
    (tmp_path / "x").mkdir()
    other = nccl_nodes(tmp_path / "x", offsets_ns=(0,))  # a one-node run of its own: ranks 0 and 1 again
    bad = gs.run("view", str(nodes[0]), str(nodes[1]), str(other[0]), "--no-browser")  # two compare; three do not
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "one run" in bad.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_nodes_of_a_torchrun_job_profiled_one_report_each(gs: Gpuscope) -> None:
    pytest.importorskip("torch.distributed")
    gs.script("ddp.py", DDP)
    port = str(_free_port())
    procs = []
    for node in (0, 1):
        env = base_env({"NODE": str(node), "SLOW_RANK": "1", "STEPS": "10"})
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "gpuscope", "profile", "-o", "node%q{NODE}", "--no-overhead-probe", sys.executable, "-m",
             "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", "1",
             "--master_addr", "127.0.0.1", "--master_port", port, "--monitor_interval", "0.2", "ddp.py"],
            cwd=gs.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
    reports = [str(gs.cwd / "node0.gpuscope"), str(gs.cwd / "node1.gpuscope")]
    stats = gs.run("stats", *reports, "-r", "rank_sum", "-r", "collective_sum", "-f", "json")
    assert stats.returncode == 0, stats.describe()
    assert "nodes of one run" in stats.stderr and "same host" in stats.stderr
    doc = json.loads(stats.stdout)
    assert sorted(r["Rank"] for r in doc["rank_sum"]["rows"]) == [0, 1]
    groups = {r["Group"] for r in doc["collective_sum"]["rows"]}
    assert {"default_pg (0)", "pair (1)"} <= groups, groups
    analyze = gs.run("analyze", *reports, "-f", "json")
    top = json.loads(analyze.stdout)["findings"][0]
    assert top["rule"] == "straggler" and top["data"]["straggler_rank"] == 1, top
    assert top["data"]["cause_part"] == "cpu_data"

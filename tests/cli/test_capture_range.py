"""Capture ranges through ``gpuscope profile`` as a user runs it (CPU): --steps, --delay/--duration,
--capture-range=nvtx and api, the messages when the range is never reached, and bad options."""

from __future__ import annotations

import json
from collections import Counter

import pytest

import gpuscope

from .conftest import Gpuscope

pytest.importorskip("torch")

TRAIN = """
import sys, torch, gpuscope
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(16, 8), torch.randn(16, 2)
for epoch in range(int(sys.argv[1])):
    with gpuscope.annotate(f"epoch{epoch}", domain="train"):
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
print("trained")
"""
MODULES = ["Sequential", "Sequential.0", "Sequential.1", "Sequential.2"]


def _run(gs: Gpuscope, *options: str, epochs: int = 4, trace: str = "torch") -> tuple[gpuscope.trace.report.Report, str]:
    gs.script("train.py", TRAIN)
    res = gs.profile("-t", trace, "-o", "r", "--force-overwrite", *options, "train.py", str(epochs))
    assert res.returncode == 0 and "trained" in res.stdout, res.describe()
    return gpuscope.load(str(gs.cwd / "r.gpuscope")), res.stderr


def _steps(report: gpuscope.trace.report.Report) -> list[str]:
    from gpuscope.analysis.steps.table import step_sum

    return [r["Step"] for r in step_sum(report).records() if r["Step"].isdigit()]


def _ranges(report: gpuscope.trace.report.Report) -> Counter[tuple[str, str]]:
    r = report.ranges()
    r = r[r["kind"] == "range"]
    return Counter(zip(r["category"], r["name"]))


def test_steps_record_exactly_those_steps(gs: Gpuscope) -> None:
    report, err = _run(gs, "--steps", "3-5")
    with report:
        assert _steps(report) == ["3", "4", "5"]  # numbered as in the whole run of 8 steps
        counts = _ranges(report)
        assert all(counts[("forward", m)] == 3 for m in MODULES), counts
        assert counts[("optimizer", "SGD.step")] == 3
        # collection was off outside the window (not filtered afterwards): the recorder kept only these
        recorded = json.loads(report.sql("SELECT detail FROM collector WHERE name = 'ranges'")[0][0])["ranges"]
        assert recorded == sum(counts.values())
        assert "nvtx_range" not in report.meta.get("capture_trimmed", {})
        assert report.count("nvtx_range WHERE kind = 'mark' AND category = 'step'") == 8  # every step mark, for the numbering
        (reason,) = report.sql("SELECT reason FROM capture_window")[0]
        assert reason == "step 3 to step 5"
        assert report.meta["capture_range"]["description"] == "steps 3 to 5"
    assert "Capture range: steps 3 to 5 (1 window," in err
    assert "Collection overhead:" in err and "PyTorch hooks ~" in err


def test_steps_beyond_the_end_still_write_a_report_and_say_why(gs: Gpuscope) -> None:
    # (the messages of the other capture ranges are tested on hand-made reports: test_overhead_line.py)
    report, err = _run(gs, "--steps", "12-20", epochs=3)
    with report:
        assert _steps(report) == [] and report.count("capture_window") == 0
        assert sum(_ranges(report).values()) == 0
    assert "Warning: no step 12 was reached: the program made 6 steps; nothing was captured" in err
    report, err = _run(gs, "--steps", "5-20", epochs=3)
    with report:
        assert _steps(report) == ["5", "6"]
    assert "no step 20 was reached: the program made 6 steps; the report holds steps 5-6" in err
    res = gs.run("stats", "-r", "step_sum", "r.gpuscope")
    assert "gpuscope: note: r.gpuscope holds part of the run (capture range: steps 5 to 20)" in res.stderr


def test_nvtx_range_by_name_and_domain(gs: Gpuscope) -> None:
    report, err = _run(gs, "--capture-range=nvtx", "--nvtx-capture", "epoch1@train")
    with report:
        assert _steps(report) == ["4"]  # epoch 1 holds steps 3 and 4; step 3 began before the range
        counts = _ranges(report)
        assert counts[("", "epoch1")] == 1 and counts[("", "epoch0")] == 0 and counts[("", "epoch2")] == 0
        assert all(counts[("forward", m)] == 2 for m in MODULES)
    assert "Capture range: while NVTX range 'epoch1@train' is open (1 window," in err


def test_nvtx_package_ranges_start_collection(gs: Gpuscope) -> None:
    pytest.importorskip("nvtx")
    gs.script("pkg.py", """
        import nvtx, gpuscope
        for i in range(3):
            with nvtx.annotate(f"phase{i}", domain="app"):
                gpuscope.mark(f"inside {i}")
        print("ok")
        """)
    res = gs.profile("-t", "nvtx", "-o", "p", "--capture-range=nvtx", "--nvtx-capture", "phase1", "pkg.py")
    assert res.returncode == 0 and "ok" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "p.gpuscope")) as report:
        r = report.ranges()
        assert sorted(r["name"]) == ["inside 1", "phase1"]
    res = gs.profile("-t", "nvtx", "-o", "p", "--force-overwrite", "--capture-range=nvtx", "--nvtx-capture",
                     "phase1@other", "pkg.py")
    assert res.returncode == 0 and (gs.cwd / "p.gpuscope").exists(), res.describe()
    assert ("Warning: no NVTX range named 'phase1@other' was opened (ranges seen: phase0, phase1, phase2): "
            "nothing was captured") in res.stderr


def test_delay_and_duration(gs: Gpuscope) -> None:
    gs.script("ticks.py", """
        import time, gpuscope
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            with gpuscope.annotate("tick"):
                time.sleep(0.01)
        print("ok")
        """)
    res = gs.profile("-t", "torch", "-o", "t", "--delay", "1", "--duration", "0.5", "ticks.py")
    assert res.returncode == 0 and "ok" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "t.gpuscope")) as report:
        ((start, end, reason),) = report.sql("SELECT start_ns, end_ns, reason FROM capture_window")
        assert reason == "--delay 1 s to --duration 0.5 s"
        assert 0.45e9 <= end - start <= 0.8e9
        ticks = report.ranges()
        assert 20 <= len(ticks) <= 50, len(ticks)
        assert ticks["start_ns"].min() >= start and ticks["start_ns"].max() <= end
        assert "nvtx_range" not in report.meta.get("capture_trimmed", {})


def test_api_windows(gs: Gpuscope) -> None:
    gs.script("api.py", """
        import gpuscope
        for i in range(6):
            if i in (1, 4):
                assert gpuscope.start() is True
            with gpuscope.annotate(f"work{i}"):
                pass
            if i in (2, 4):
                assert gpuscope.stop() is False
        print("ok")
        """)
    res = gs.profile("-t", "torch", "-o", "a", "--capture-range=api", "api.py")
    assert res.returncode == 0 and "ok" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "a.gpuscope")) as report:
        assert sorted(report.ranges()["name"]) == ["work1", "work2", "work4"]
        assert [r for (r,) in report.sql("SELECT reason FROM capture_window ORDER BY start_ns")] == [
            "gpuscope.start() to gpuscope.stop()", "gpuscope.start() to gpuscope.stop()"]
    assert "Capture range: between gpuscope.start() and gpuscope.stop() (2 windows," in res.stderr


OPS = """
import json, sys, threading, torch, gpuscope
from torch.utils._python_dispatch import _get_current_dispatch_mode as current
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(16, 8), torch.randn(16, 2)
seen = []
def step():
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
if sys.argv[1] == "steps":
    for _ in range(8):
        step()
        seen.append(current() is not None)  # after each step's mark
else:  # started and stopped by another thread, as the --delay and --duration timers do
    def elsewhere(call):
        t = threading.Thread(target=call); t.start(); t.join()
    seen.append(current() is not None)
    for call in (gpuscope.start, gpuscope.stop):
        elsewhere(call)
        step()
        seen.append(current() is not None)
print(json.dumps(seen))
"""


@pytest.mark.parametrize(("options", "seen"), [
    (["--steps", "3-5"], [False, True, True, True, False, False, False, False]),
    (["--capture-range=api"], [False, True, False]),
], ids=["steps", "api-from-another-thread"])
def test_operators_outside_the_window_do_not_reach_the_recorder(gs: Gpuscope, options: list[str],
                                                                seen: list[bool]) -> None:
    gs.script("ops.py", OPS)
    res = gs.profile("-t", "torch,torch-ops", "-o", "o", *options, "ops.py", "steps" if "--steps" in options
                     else "api")
    assert res.returncode == 0, res.describe()
    # the recorder's dispatch mode is on the main thread's stack inside the window only
    assert json.loads(res.stdout.strip().splitlines()[-1]) == seen
    with gpuscope.load(str(gs.cwd / "o.gpuscope")) as report:
        ops = report.count("torch_op")
        ((detail,),) = report.sql("SELECT detail FROM collector WHERE name = 'torch-ops'")
        assert ops > 0 and json.loads(detail)["ops"] == ops  # built inside the window only: nothing trimmed
        assert "torch_op" not in report.meta.get("capture_trimmed", {})


@pytest.mark.parametrize(("options", "message"), [
    (["--steps", "20-10"], "gpuscope: error: --steps 20-10: the first step comes after the last"),
    (["--steps", "x"], "gpuscope: error: --steps x: give steps as FIRST-LAST (10-20), FIRST- (to the end) or N"),
    (["--delay", "-1"], "gpuscope: error: --delay takes a number of seconds >= 0, not '-1'"),
    (["--capture-range=foo"], "gpuscope: error: unknown --capture-range 'foo'; choose from none, "
                              "cudaProfilerApi, nvtx, api"),
    (["--nvtx-capture", "x"], "gpuscope: error: --nvtx-capture needs --capture-range=nvtx"),
    (["--capture-range", "nvtx"], "gpuscope: error: --capture-range=nvtx needs --nvtx-capture NAME[@DOMAIN]"),
])
def test_bad_options_stop_before_the_program_starts(gs: Gpuscope, options: list[str], message: str) -> None:
    gs.script("marker.py", "open('ran', 'w').close()\n")
    res = gs.profile(*options, "marker.py")
    assert res.returncode == 2, res.describe()
    assert res.own_lines == [message + (res.own_lines[0][len(message):] if res.own_lines else "")]
    assert res.own_lines[0].startswith(message)
    assert not (gs.cwd / "ran").exists() and not list(gs.cwd.glob("*.gpuscope"))


def test_profiler_api_range_without_cupti_says_so(gs: Gpuscope) -> None:
    gs.script("plain.py", "import gpuscope\ngpuscope.mark('m')\nprint('ok')\n")
    res = gs.profile("-t", "cuda", "-o", "c", "--capture-range=cudaProfilerApi", "plain.py")
    assert res.returncode == 0 and "ok" in res.stdout, res.describe()
    assert (gs.cwd / "c.gpuscope").exists()
    if "GPU activity is not recorded" not in res.stderr:
        pytest.skip("CUPTI works here: the GPU check covers this range")
    assert any("--capture-range=cudaProfilerApi needs CUPTI's callback API" in line for line in res.own_lines)
    assert ("Warning: cudaProfilerStart and cudaProfilerStop could not be watched (no CUPTI callback API here): "
            "nothing was captured") in res.stderr
    with gpuscope.load(str(gs.cwd / "c.gpuscope")) as report:
        assert report.count("nvtx_range") == 0

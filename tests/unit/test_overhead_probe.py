"""The overhead probe: collection switched off for a few steps, those steps timed, and the diagnosis
scaled to the step without the profiler."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.diagnosis.context import Context
from gpuscope.analysis.steps.probe import ProbeTiming, _split, probe_timings, split_steps, step_ranges
from gpuscope.capture.capture_range import CaptureSpec
from gpuscope.capture.process.window import PROBE_EVERY, PROBE_FIRST, PROBE_STEPS, CaptureWindow
from gpuscope.trace.report import Report


NOW = [0]  # the time the marks below are made at; the clock reads a little later


def _window(spec: CaptureSpec, gap_ns: int = 0, min_off_ns: int = 0) -> tuple[CaptureWindow, list[bool], list[tuple[int, int | None, str]]]:
    ticks = itertools.count(1)
    switches: list[bool] = []
    rows: list[tuple[int, int | None, str]] = []
    w = CaptureWindow(spec, lambda: NOW[0] + next(ticks), switches.append, lambda a, b, r: rows.append((a, b, r)))
    w.probe_gap_ns = gap_ns
    w.probe_min_off_ns = min_off_ns
    w.begin()
    return w, switches, rows


def test_the_window_switches_collection_off_for_the_probe_steps() -> None:
    w, switches, rows = _window(CaptureSpec())
    states = []
    for n in range(1, PROBE_FIRST + PROBE_EVERY + PROBE_STEPS + 2):
        NOW[0] = 10_000_000 * n
        w.step_mark("torch", NOW[0])
        states.append(w.on)
    assert switches == [True, False, True, False, True]
    # off from the end of step 10 to the end of step 13, and again from step 35 to 38
    off = [n for n, on in enumerate(states, 1) if not on]
    first, second = PROBE_FIRST, PROBE_FIRST + PROBE_EVERY
    assert off == list(range(first, first + PROBE_STEPS)) + list(range(second, second + PROBE_STEPS))
    closed = [r for r in rows if r[1] is not None]
    assert [r[2] for r in closed] == [f"process start to overhead probe at step {first}",
                                      f"end of overhead probe at step {first + PROBE_STEPS} to overhead probe at step {second}"]
    # the window after a probe opens once the collectors are back on, after the mark that ended it
    assert closed[1][0] > 10_000_000 * (first + PROBE_STEPS)
    assert w.finish()["probes"] == 2


def test_a_probe_ends_when_the_steps_stop() -> None:
    import time

    w, switches, rows = _window(CaptureSpec())
    for n in range(1, PROBE_FIRST + 2):  # the loop ends one step into the probe
        NOW[0] = 1_000_000 * n  # 1 ms steps
        w.step_mark("torch", NOW[0])
    assert not w.on and w.probing
    deadline = time.monotonic() + 5
    while w.probing and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.on and not w.probing  # collection is back on for what the program does after its loop
    assert switches[-1] is True
    w.finish()
    assert rows[-1][2].startswith(f"end of overhead probe after step {PROBE_FIRST + 1}")


def test_one_watcher_thread_serves_every_probe() -> None:
    """Starting a thread at each probe cost the step it started in; one thread, asleep between probes, ends them all."""
    import threading
    import time

    def watchers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "gpuscope-capture"}

    before = watchers()
    w, switches, rows = _window(CaptureSpec())
    probes = 3
    for n in range(1, PROBE_FIRST + PROBE_EVERY * (probes - 1) + 2):  # the loop ends one step into the third
        NOW[0] = 1_000_000 * n
        w.step_mark("torch", NOW[0])
    assert w.probes == probes and w.probing and len(watchers() - before) == 1
    deadline = time.monotonic() + 5
    while w.probing and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.on and switches == [True, False, True, False, True, False, True]
    assert len(watchers() - before) == 1  # still there, asleep, for the next probe
    w.finish()


@pytest.mark.parametrize("spec", [CaptureSpec(probe=False), CaptureSpec(first_step=2), CaptureSpec(range="api")])
def test_no_probe_when_switched_off_or_when_a_capture_range_decides(spec: CaptureSpec) -> None:
    w, _, rows = _window(spec)
    for n in range(1, 60):
        w.step_mark("torch", 10_000_000 * n)
    assert not any("overhead probe" in r[2] for r in rows)
    assert w.finish()["probes"] == 0


def test_the_report_side_reads_the_reasons_the_window_writes() -> None:
    from gpuscope.capture.process import window
    from gpuscope.trace.trim import PROBE_CLOSES

    assert f"{window.PROBE_CLOSES} at step 10".endswith(f"{PROBE_CLOSES} 10")


def test_split_times_the_probe_steps_but_the_first_and_the_recorded_steps_alike() -> None:
    # recorded steps take 2 ms, steps with collection off 1 ms; the step after each switch 5 ms
    t, marks, windows = 0, [], []
    opened = 0
    for n in range(1, 41):
        off = 11 <= n <= 13 or 36 <= n <= 38
        t += 5_000_000 if n in (11, 14, 36) else (1_000_000 if off else 2_000_000)
        marks.append(t)
        if n == 10 or n == 35:
            windows.append((opened, t, f"x to overhead probe at step {n}"))
        if n == 13 or n == 38:
            opened = t + 100  # once the collectors are back on
    windows.append((opened, 10**18, "end of overhead probe at step 38 to process end"))
    off, on = _split(np.array(marks, np.int64), windows)
    assert off == [1_000_000] * 4  # steps 12, 13, 37, 38
    # every recorded step but step 1 (no mark starts it): no step is longer than 1.5x the median, so none is warm-up
    assert sorted(set(on)) == [2_000_000] and len(on) == 40 - 1 - 2 * 4
    split = split_steps(np.array(marks, np.int64), windows)
    assert split.probe == (11, 12, 13, 14, 36, 37, 38, 39)  # the steps step_sum does not list as recorded
    assert split.timed_off == (12, 13, 37, 38) and split.warmup == ()
    assert set(split.recorded) == set(range(2, 41)) - set(split.probe)
    # warm-up as step_sum flags it is left out of the recorded steps timed
    assert split_steps(np.array(marks, np.int64), windows, {1, 2, 3}).warmup == (1, 2, 3)
    timing = ProbeTiming(1, 2, tuple(off), tuple(on), off_steps=split.timed_off, probe_steps=split.probe,
                         warmup_steps=split.warmup)
    assert timing.ratio == pytest.approx(2.0) and timing.cost_share == pytest.approx(0.5)
    assert "collection made a step 100% longer (±0%)" in timing.describe()
    assert "(steps 12-13, 37-38; 2 probes)" in timing.describe() and "31 recorded steps after step 1" in timing.describe()
    assert ProbeTiming(1, 1, (1_000_000,), tuple(on)).cost_share == 0.0  # one timed step: no verdict
    assert ProbeTiming(1, 2, (1_000_000, 1_000_000), (1_010_000,) * 5).cost_share == 0.0  # within the noise


def test_a_negative_slowdown_is_no_measurable_slowdown_within_the_noise() -> None:
    """Steps with collection off that ran slower than the recorded ones (a busy machine): never '-50% longer'."""
    timing = ProbeTiming(1, 3, (4_000_000, 4_200_000), (2_000_000, 2_100_000, 1_900_000, 2_050_000))
    assert timing.slowdown < -0.4 and not timing.significant and timing.cost_share == 0.0
    assert timing.verdict() == "no measurable slowdown (within the noise: ±51%)"
    assert "-" not in timing.verdict() and "longer" not in timing.describe()


def test_a_slowdown_whose_interval_reaches_zero_is_noise() -> None:
    rng = np.random.default_rng(1)
    on = tuple(int(x) for x in rng.normal(10_000_000, 3_000_000, 40))
    off = (9_000_000, 13_000_000, 8_000_000)  # a median 10% below the recorded one, but three wide steps
    timing = ProbeTiming(1, 1, off, on)
    lo, hi = timing.interval
    assert lo < 0 < hi and not timing.significant
    assert timing.verdict().startswith("no measurable slowdown (within the noise: ±")
    wide = ProbeTiming(1, 1, (5_000_000, 5_100_000, 4_900_000), on)  # half the step: a cost, with its spread
    assert wide.significant and wide.interval[0] > 0.5
    assert wide.verdict().startswith(f"collection made a step {round(100 * wide.slowdown)}% longer (±")


def test_step_ranges_join_runs_of_numbers() -> None:
    assert step_ranges((11, 12, 13, 14, 36, 37, 39)) == "11-14, 36-37, 39"
    assert step_ranges([5]) == "5" and step_ranges(()) == ""


def _findings(path: Path, probes: Callable[[Context], dict]) -> tuple[dict, list[str]]:  # type: ignore[type-arg]
    original = Context.probes
    Context.probes = property(probes)  # type: ignore[assignment,method-assign]
    try:
        with Report.open(path) as report:
            diag = diagnose(report)
    finally:
        Context.probes = original  # type: ignore[method-assign]
    return {f.rule: f for f in diag.findings}, diag.notes


def test_launch_bound_is_scaled_to_the_step_without_the_profiler(recorded: Callable[[str], Path]) -> None:
    # conv_train_bf16, recorded with the probe: a whole-step CUDA graph measured 8% untraced
    path = recorded("program_conv_train_bf16")
    without, _ = _findings(path, lambda self: {})
    assert without["launch_bound"].share > 0.25  # recorded, the launch gaps look like a third of the step
    measured, notes = _findings(path, lambda self: probe_timings(self.report))
    launch = measured["launch_bound"]
    assert 0.05 < launch.share < 0.15
    assert any("overhead probe measured" in e for e in launch.evidence)
    assert any("profiling's own cost, measured" in n and "without the profiler" in n for n in notes)
    # a probe that saw no cost leaves the estimate as recorded
    same = ProbeTiming(0, 3, (12_000_000,) * 6, (12_100_000,) * 40)
    unchanged, _ = _findings(path, lambda self: {p.pid: same for p in self.timelines.processes})
    assert unchanged["launch_bound"].share == pytest.approx(without["launch_bound"].share)


def test_the_step_without_the_profiler_is_at_most_the_probes_median(recorded: Callable[[str], Path]) -> None:
    """The recorded mean step (12.8 ms) holds collection's long steps, which the medians (12.1 ms recorded,
    8.95 ms off) leave out: the base is the probe's median, not the mean scaled by the medians' ratio."""
    from gpuscope.analysis.diagnosis.context import Context as Ctx

    with Report.open(recorded("program_conv_train_bf16")) as report:
        p = Ctx(report).processes[0]
        probe = p.probe
        assert probe is not None and p.step_ns > probe.on_median * 1.03  # a tail of long recorded steps
        scaled = p.step_ns * (1 - probe.cost_share)
        assert p.base_ns == pytest.approx(probe.off_median) and p.base_ns < scaled
        # without that tail, the medians' ratio decides as before
        flat = ProbeTiming(probe.pid, probe.probes, probe.off_ns, (int(p.step_ns),) * len(probe.on_ns))
        p2 = Ctx(report).processes[0]
        p2.probe = flat
        assert p2.base_ns == pytest.approx(p2.step_ns * (1 - flat.cost_share))


WORKLOAD = textwrap.dedent("""
    import sys, torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()) for _ in range(8)])
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.randn(4, 16)
    for i in range(int(sys.argv[1])):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
""")


def _profile(tmp_path: Path, name: str, *options: str) -> Path:
    steps = "80"
    if "--args-steps" in options:  # the program's step count, not an option of gpuscope
        i = options.index("--args-steps")
        steps, options = options[i + 1], options[:i] + options[i + 2:]
    script = tmp_path / "train.py"
    script.write_text(WORKLOAD)
    out = tmp_path / f"{name}.gpuscope"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "GPUSCOPE_PROBE_GAP_S": "0",
           "GPUSCOPE_PROBE_MIN_OFF_MS": "0"}  # probes of 3 steps every 25 steps
    done = subprocess.run([sys.executable, "-m", "gpuscope", "profile", "-o", str(out), "-t", "torch,torch-ops",
                           *options, sys.executable, str(script), steps],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_a_cpu_run_measures_what_recording_every_operator_costs(tmp_path: Path) -> None:
    with Report.open(_profile(tmp_path, "probe")) as report:
        (timing,) = probe_timings(report).values()
        steps = [int(s) for (s,) in report.sql(
            "SELECT DISTINCT step FROM (SELECT row_number() OVER (ORDER BY start_ns) AS step, start_ns FROM nvtx_range "
            "WHERE kind = 'mark' AND category = 'step' AND source = 'torch')")]
        from gpuscope.analysis.steps.table import step_sum

        listed = {int(r[1]) for r in step_sum(report).rows if str(r[1]).isdigit()}
    assert timing.probes == 3 and len(timing.off_ns) == 6 and timing.measured
    # every operator recorded costs ~15 us against a few us of work each: far more than the noise
    assert timing.ratio > 1.3, timing.describe()
    assert len(steps) == 80
    assert not listed & {11, 12, 13, 14, 36, 37, 38, 39, 61, 62, 63, 64}  # the probes' steps, and the steps that switched back
    assert {10, 15, 35, 40, 60, 65, 80} <= listed


def test_memory_of_a_run_with_probes_is_not_cut_into_windows(tmp_path: Path) -> None:
    from gpuscope.analysis.memory.summaries import memory_sum

    with Report.open(_profile(tmp_path, "memory", "-t", "torch,memory")) as report:
        assert report.count("capture_window") >= 2  # the probes' windows
        sections = {str(r[0]) for r in memory_sum(report).rows}
    assert "peak allocated" in sections
    assert not any(s.startswith("window") for s in sections)


def test_no_overhead_probe_records_every_step(tmp_path: Path) -> None:
    with Report.open(_profile(tmp_path, "whole", "--no-overhead-probe")) as report:
        assert report.count("capture_window") == 0
        assert probe_timings(report) == {}
        from gpuscope.analysis.steps.table import step_sum

        listed = {int(r[1]) for r in step_sum(report).rows if str(r[1]).isdigit()}
    assert listed == set(range(1, 81))


def test_a_probe_at_the_last_steps_leaves_step_sum_readable(tmp_path: Path) -> None:
    """11 steps: the probe starts after step 10, and the loop ends inside it, so no step with
    collection off is timed; the step summary says so instead of failing."""
    from gpuscope.analysis.steps.table import step_sum

    with Report.open(_profile(tmp_path, "short", "-t", "torch", "--args-steps", "11")) as report:
        (timing,) = probe_timings(report).values()
        table = step_sum(report)
    assert timing.off_ns == () and not timing.measured and timing.cost_share == 0.0
    listed = {int(r[1]) for r in table.rows if str(r[1]).isdigit()}
    assert {1, 5, 10} <= listed
    assert any("no measurement" in n for n in table.notes), table.notes


def test_outermost_module_calls_count_steps_until_a_better_mark_comes() -> None:
    """An inference loop marks no steps: its outermost module calls are counted, so the probe runs; the
    first optimizer step starts the count again from it, and a running probe ends there."""
    w, switches, rows = _window(CaptureSpec())
    for n in range(1, PROBE_FIRST + 2):
        NOW[0] = 1_000_000 * n
        w.step_mark("module", NOW[0])
    assert w.step_source == "module" and w.probing and w.probes == 1
    w.step_mark("torch", NOW[0] + 1_000_000)
    assert w.step_source == "torch" and w.steps == 1 and not w.probing and w.on
    w.step_mark("module", NOW[0] + 2_000_000)  # module calls no longer count
    assert w.steps == 1
    w.step_mark("gpuscope", NOW[0] + 3_000_000)
    assert (w.step_source, w.steps) == ("gpuscope", 1)
    w.finish()


def test_steps_capture_range_does_not_count_module_calls() -> None:
    w, _, _ = _window(CaptureSpec(first_step=2, last_step=3))
    for n in range(1, 6):
        w.step_mark("module", 1_000_000 * n)
    assert w.steps == 0 and not w.on


INFERENCE_LOOP = """
import time, torch
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
x = torch.randn(16, 64)
with torch.inference_mode():
    for i in range(60):
        y = model(x)
        pred = y.argmax(-1)
        time.sleep(0.004)
"""


def test_the_probe_times_an_inference_loop_by_its_model_calls(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")  # noqa: F841
    prog = tmp_path / "infer.py"
    prog.write_text(INFERENCE_LOOP)
    out = tmp_path / "infer"
    proc = subprocess.run([sys.executable, "-m", "gpuscope", "profile", "-o", str(out), str(prog)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "GPUSCOPE_PROBE_GAP_S": "0"})  # two probes in the short loop
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Report.open(str(out) + ".gpuscope") as report:
        timings = probe_timings(report)
        marks = report.sql("SELECT count(*) FROM nvtx_range WHERE kind = 'mark' AND category = 'iteration' "
                           "AND source = 'module'")[0][0]
    assert marks == 60  # one per model call, recorded or not
    (timing,) = timings.values()
    assert timing.source == "module" and timing.probes >= 2 and timing.measured
    assert timing.off_median > 4_000_000  # each iteration sleeps 4 ms
    assert "iterations (outermost module calls" in timing.describe()


def test_probes_of_short_steps_wait_for_the_gap() -> None:
    """Switching collection costs time of its own: with 1 ms steps a probe every 25 steps would switch
    every few tens of ms, so the next probe also waits until the gap since the last one has passed."""
    from gpuscope.capture.process.window import PROBE_MIN_GAP_NS

    w, switches, _ = _window(CaptureSpec(), gap_ns=PROBE_MIN_GAP_NS)
    steps = 3000
    for n in range(1, steps + 1):
        NOW[0] = 1_000_000 * n  # 1 ms steps: 3 s in all
        w.step_mark("module", NOW[0])
    # the first at step 10 (ends at 13), the next 2 s after that, none more in 3 s
    assert w.probes == 2 and len(switches) == 5
    w.finish()


def test_probes_of_short_steps_time_more_of_them() -> None:
    from gpuscope.capture.process.window import PROBE_MIN_OFF_NS

    w, switches, rows = _window(CaptureSpec(), min_off_ns=PROBE_MIN_OFF_NS)
    for n in range(1, 60):
        NOW[0] = 4_000_000 * n  # 4 ms steps: 20 ms is 5 timed steps, and the one that pays for the switch
        w.step_mark("module", NOW[0])
    off = [r for r in rows if r[2].startswith("end of overhead probe") and r[1] is not None]
    assert off and off[0][2] == f"end of overhead probe at step {PROBE_FIRST + 6} to overhead probe at step {PROBE_FIRST + PROBE_EVERY}"
    w.finish()


def test_steps_shorter_than_their_gpu_work_were_only_queued() -> None:
    """A loop that never waits for the GPU marks its steps as fast as it queues them while the queue
    has room: with collection off they look 4x faster than recorded, which is not a cost."""
    t = ProbeTiming(1, 1, (170_000, 175_000, 180_000), (760_000, 770_000, 780_000), "module", gpu_ns=770_000.0)
    assert t.queued and not t.measured and not t.significant and t.cost_share == 0.0
    assert "no measurement" in t.describe() and "queued the work" in t.describe()
    host_bound = ProbeTiming(1, 1, (5_200_000, 5_300_000), (6_700_000, 6_800_000), "module", gpu_ns=320_000.0)
    assert not host_bound.queued and host_bound.measured and host_bound.significant
    no_gpu = ProbeTiming(1, 1, (1_000, 1_100), (2_000, 2_100), "torch")
    assert not no_gpu.queued and no_gpu.measured


def test_a_step_without_collection_is_at_least_the_gpu_work_of_a_recorded_one() -> None:
    """A float32 transformer LM on an H200 (GPU about as busy as its host, untraced 20.8 ms a step,
    traced 21.1 ms by its own timer): its 3 steps with collection off took 16.6-17.8 ms while a
    recorded step held 21.4 ms of GPU work, so the host ran ahead, filling the launch queue. Set
    against the off steps alone that read as an 18% slowdown; the GPU's work is the floor."""
    rng = np.random.default_rng(1)
    on = tuple(int(x) for x in rng.normal(20.62e6, 0.5e6, 286))
    off = (16_600_000, 17_520_000, 17_800_000)
    t = ProbeTiming(1, 3, off, on, "torch", (13, 111, 112), gpu_ns=21.41e6)
    assert not t.queued and t.measured  # off steps above QUEUED of the GPU work: measured, not only queued
    assert t.gpu_floored and t.base_median == 21.41e6
    assert t.ratio < 1.0 and not t.significant and t.cost_share == 0.0 and t.added_ns() == 0.0
    assert "21.4 ms of GPU work" in t.describe() and "no measurable slowdown" in t.describe()
    unfloored = ProbeTiming(1, 3, off, on, "torch", (13, 111, 112))
    assert unfloored.significant and unfloored.slowdown == pytest.approx(0.18, abs=0.01)
    # a host-bound step (off steps above the GPU work) is set against the off steps as before
    host = ProbeTiming(1, 3, off, on, "torch", (13, 111, 112), gpu_ns=12e6)
    assert not host.gpu_floored and host.ratio == pytest.approx(unfloored.ratio)
    # partly floored: GPU work between the off and on medians leaves the part above it
    part = ProbeTiming(1, 3, off, on, "torch", (13, 111, 112), gpu_ns=19e6)
    assert part.gpu_floored and part.slowdown == pytest.approx(20.62 / 19 - 1, abs=0.01)
    assert part.added_ns() == pytest.approx((part.on_median - 19e6) * len(on))


def test_the_hosts_own_pace_is_the_off_steps_even_where_the_gpu_floors_the_slowdown() -> None:
    """The same LM run: no slowdown of the step (the GPU's work is its floor), but the host itself
    marked 17.5 ms steps with collection off against 20.6 ms with it on, the pace a replay of its
    launches takes (diagnosis/host_pace.py)."""
    rng = np.random.default_rng(1)
    on = tuple(int(x) for x in rng.normal(20.62e6, 0.5e6, 286))
    off = (16_600_000, 17_520_000, 17_800_000)
    t = ProbeTiming(1, 3, off, on, "torch", (13, 111, 112), gpu_ns=21.41e6)
    assert not t.significant and t.host_pace == pytest.approx(17.52 / 20.62, abs=0.01)
    # within the noise, timed by module calls (not the report's steps), or only queued: no pace
    noisy = ProbeTiming(1, 3, (14_700_000, 19_900_000, 26_700_000), on, "torch", gpu_ns=19.6e6)
    assert noisy.host_pace == 1.0
    assert ProbeTiming(1, 3, off, on, "module", gpu_ns=21.41e6).host_pace == 1.0
    assert ProbeTiming(1, 3, (1_000_000, 1_100_000), on, "torch", gpu_ns=21.41e6).host_pace == 1.0
    assert ProbeTiming(1, 3, (21_000_000, 21_100_000), on, "torch", gpu_ns=12e6).host_pace == 1.0  # slower off


def test_the_recorded_sdpa_loop_queued_its_probe_iterations(recorded: Callable[[str], Path]) -> None:
    """SDPA inference that never syncs (an H100 recording): 24 iterations with collection off took
    174 µs each, against 770 µs of GPU work per recorded iteration, the breakdown's busy time."""
    with Report.open(recorded("client_sdpa_explicit_mask")) as report:
        (timing,) = probe_timings(report).values()
        (p,) = Context(report, 0.01).processes
        parts = p.breakdown.mean_parts()
    busy = sum(v for k, v in parts.items() if k.startswith("busy_"))
    assert timing.queued and not timing.measured
    assert timing.off_median < 0.3 * timing.gpu_ns
    assert timing.gpu_ns == pytest.approx(busy, rel=0.1)  # the union of kernels against the breakdown's busy time

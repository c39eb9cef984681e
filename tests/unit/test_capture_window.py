"""Capture ranges inside the process: option parsing, the window state machine driven by fake step,
range, profiler-API and time events, and what it turns off (recorder, CUPTI kinds, torch.cuda.nvtx)."""

from __future__ import annotations

import time
import types
from typing import Any

import pytest

from gpuscope.capture.process.control import PROFILER_APIS, CaptureControl
from gpuscope.capture.capture_range import CaptureSpec, parse_capture, parse_steps
from gpuscope.capture.cupti.activity import CuptiCollector
from gpuscope.capture.python.ranges import RangeRecorder
from gpuscope.capture.process.window import CaptureWindow
from gpuscope.errors import GpuscopeError

# -- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "steps"), [("10-20", (10, 20)), ("7", (7, 7)), ("3-", (3, None)),
                                             (" 1-1 ", (1, 1))])
def test_steps(text: str, steps: tuple[int, int | None]) -> None:
    assert parse_steps(text) == steps


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"steps": "20-10"}, "--steps 20-10: the first step comes after the last"),
    ({"steps": "x"}, "--steps x: give steps as FIRST-LAST"),
    ({"steps": "0-3"}, "steps count from 1"),
    ({"steps": "-4"}, "give steps as FIRST-LAST"),
    ({"delay": "-1"}, "--delay takes a number of seconds >= 0, not '-1'"),
    ({"delay": "nan"}, "--delay takes a number of seconds"),
    ({"duration": "0"}, "--duration takes a number of seconds > 0"),
    ({"capture_range": "foo"}, "unknown --capture-range 'foo'; choose from none, cudaProfilerApi, nvtx, api"),
    ({"nvtx_capture": "x"}, "--nvtx-capture needs --capture-range=nvtx"),
    ({"capture_range": "nvtx"}, "--capture-range=nvtx needs --nvtx-capture NAME[@DOMAIN]"),
    ({"capture_range": "nvtx", "nvtx_capture": "x@"}, "give NAME or NAME@DOMAIN"),
    ({"capture_range": "nvtx", "nvtx_capture": "@d"}, "give NAME or NAME@DOMAIN"),
    ({"steps": "3", "capture_range": "api"}, "--steps and --capture-range cannot be combined"),
    ({"steps": "3", "delay": "1"}, "--steps and --delay cannot be combined"),
])
def test_bad_options_are_one_line_errors(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(GpuscopeError) as err:
        parse_capture(**kwargs)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_good_options_and_their_round_trip() -> None:
    assert not parse_capture().limited
    spec = parse_capture("NVTX", "train@my.domain@x", delay="1.5", duration="2")
    assert (spec.range, spec.nvtx_name, spec.nvtx_domain) == ("nvtx", "train@my.domain", "x")
    assert (spec.delay_ns, spec.duration_ns) == (1_500_000_000, 2_000_000_000)
    assert spec.describe() == ("while NVTX range 'train@my.domain@x' is open, after a delay of 1.5 s, "
                               "for at most 2 s each time")
    assert CaptureSpec.from_env(spec.to_env()) == spec
    assert CaptureSpec.from_env("not json") == CaptureSpec()
    assert parse_capture(steps="10-20").describe() == "steps 10 to 20"
    assert parse_capture(steps="4-").describe() == "steps 4 to the end of the run"
    assert parse_capture("cudaprofilerapi").range == "cudaProfilerApi"


# -- the state machine ------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000

    def __call__(self) -> int:
        return self.t


def _window(spec: CaptureSpec) -> tuple[CaptureWindow, list[bool], list[tuple[int, int | None, str]], Clock]:
    clock, switched, rows = Clock(), [], []
    w = CaptureWindow(spec, clock, switched.append, lambda s, e, r: rows.append((s, e, r)))
    w.begin()
    return w, switched, rows, clock


def test_steps_open_at_the_mark_before_the_first_and_close_at_the_last() -> None:
    w, switched, rows, _ = _window(parse_capture(steps="3-4"))
    assert not w.on and switched == []
    for n, t in enumerate([100, 200, 300, 400, 500], start=1):
        w.step_mark("torch", t)
        assert w.on == (n in (2, 3)), n
    assert switched == [True, False]
    assert rows == [(200, None, "step 3"), (200, 400, "step 3 to step 4")]
    assert w.finish()["steps"] == 5 and w.windows == 1


def test_first_step_one_is_on_from_the_start_and_gpuscope_marks_take_over() -> None:
    w, switched, rows, clock = _window(parse_capture(steps="1-2"))
    assert w.on and rows == [(1000, None, "step 1")]
    w.step_mark("torch", 1100)          # an optimizer step: step 1 by torch's count
    w.step_mark("gpuscope", 1200)       # the program marks its own steps: they count from here
    assert w.steps == 1 and w.on
    w.step_mark("torch", 1300)          # no longer counted
    w.step_mark("gpuscope", 1400)
    assert not w.on and rows[-1] == (1000, 1400, "step 1 to step 2")


def test_an_unreached_step_leaves_the_window_open_until_the_process_ends() -> None:
    w, _, rows, clock = _window(parse_capture(steps="2-9"))
    w.step_mark("torch", 50)
    clock.t = 7000
    info = w.finish()
    assert rows[-1] == (50, 7000, "step 2 to process end")
    assert info["steps"] == 1 and info["windows"] == 1


def test_nvtx_range_by_name_and_domain_with_nesting() -> None:
    w, switched, rows, clock = _window(parse_capture("nvtx", "train@d"))
    w.range_opened("train", "other")     # another domain
    w.range_opened("warmup", "d")
    w.range_opened("Net.layer", "", "torch")  # module ranges are no hint
    assert not w.on
    clock.t = 2000
    w.range_opened("train", "d")
    w.range_opened("train", "d")         # nested: one window
    w.range_closed("train", "d")
    assert w.on
    clock.t = 3000
    w.range_closed("train", "d")
    assert not w.on and rows[-1] == (2000, 3000, "NVTX range 'train@d' to end of NVTX range 'train@d'")
    info = w.finish()
    assert info["nvtx_opened"] == 2 and info["names_seen"] == ["train", "warmup"]


def test_profiler_api_windows_repeat() -> None:
    w, switched, rows, clock = _window(parse_capture("cudaProfilerApi"))
    for t in (10, 30):
        clock.t = t
        w.profiler_api("cudaProfilerStart")
        clock.t = t + 5
        w.profiler_api("cuProfilerStop")
    assert [r for r in rows if r[1] is not None] == [
        (10, 15, "cudaProfilerStart to cuProfilerStop"), (30, 35, "cudaProfilerStart to cuProfilerStop")]
    assert w.finish()["profiler_starts"] == 2


def test_gpuscope_stop_pauses_a_whole_run_and_is_recorded_from_then_on() -> None:
    w, switched, rows, clock = _window(CaptureSpec())
    assert w.on and rows == []
    clock.t = 2000
    assert w.api(False) is False
    clock.t = 2500
    assert w.api(True) is True
    clock.t = 3000
    w.finish()
    assert rows == [(1000, 2000, "process start to gpuscope.stop()"), (2500, None, "gpuscope.start()"),
                    (2500, 3000, "gpuscope.start() to process end")]


def test_api_calls_are_ignored_under_another_capture_range() -> None:
    w, switched, rows, _ = _window(parse_capture(steps="5"))
    assert w.api(True) is False and not w.on
    assert w.finish()["ignored_api_calls"] == 1


def test_delay_arms_the_trigger_and_duration_caps_each_window() -> None:
    spec = CaptureSpec(range="api", delay_ns=60_000_000, duration_ns=50_000_000, origin_ns=time.monotonic_ns())
    w, switched, rows, clock = _window(spec)
    w.api(True)
    assert not w.on  # the delay has not passed
    deadline = time.monotonic() + 5
    while not w.on and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.on and rows[0][2] == "--delay 0.06 s"
    while w.on and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not w.on and rows[-1][2] == "--delay 0.06 s to --duration 0.05 s"
    w.api(True)  # the trigger still holds: the cap stays until it lets go
    assert not w.on
    w.api(False)
    w.api(True)
    assert w.on
    w.finish()


def test_a_delay_that_has_already_passed_opens_at_once() -> None:
    spec = CaptureSpec(delay_ns=1, origin_ns=time.monotonic_ns() - 10**9)
    w, switched, rows, _ = _window(spec)
    assert w.on and rows == [(1000, None, "process start")]


# -- the range recorder outside windows ---------------------------------------------------------


def test_recorder_keeps_pairs_and_step_marks_and_calls_its_hooks() -> None:
    r = RangeRecorder()
    seen: list[tuple[str, Any]] = []

    class Watch:
        def range_opened(self, name: str, domain: str, source: str) -> None:
            seen.append(("open", name))
            if name == "go":
                r.on = True

        def range_closed(self, name: str, domain: str) -> None:
            seen.append(("close", name))

    r.watch = Watch()
    r.on_step = lambda source, t: seen.append(("step", source))
    r.on = False
    r.push("outer")          # starts while off: never recorded
    r.push("go")             # turns collection on before its own start is taken
    r.mark("m")
    r.pop()
    r.pop()
    rid = r.start("cross")
    r.end(rid)
    r.on = False
    r.mark("ignored")
    r.mark("step", source="gpuscope", category="step")
    hidden = r.start("while off")
    assert r.end(hidden)     # known, so not counted as misuse
    r.push("open at exit")
    names = [(row[5], row[6]) for row in r.take()]
    assert names == [("m", "mark"), ("go", "range"), ("cross", "range"), ("step", "mark")]
    assert r.close_open() == []
    assert r.counts["unknown_ends"] == 0 and r.counts["ranges"] == 2
    assert ("step", "gpuscope") in seen and ("close", "outer") in seen


# -- what the switch turns off ----------------------------------------------------------------


class FakeHub:
    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def on_api(self, names: list[str], enter: Any = None, exit: Any = None) -> list[str]:
        for n in names:
            self.handlers[n] = enter
        return []


class FakeHooks:
    """A collector (capture/collectors.py) that only keeps its state."""

    def __init__(self) -> None:
        self.collecting = True

    def set_collecting(self, on: bool) -> None:
        self.collecting = on

    def take_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        return {}


class FakeAgent:
    def __init__(self, hub: Any = None) -> None:
        self.ranges = RangeRecorder()
        self.torch_hooks = FakeHooks()
        self.collectors = [self.ranges, self.torch_hooks]
        self.by_name: dict[str, Any] = {"ranges": self.ranges, "torch": self.torch_hooks, "cuda-callbacks": hub}
        self.rows: list[tuple[str, tuple[Any, ...]]] = []
        self.diags: list[str] = []
        self.t = 0

    def collector(self, name: str) -> Any:
        return self.by_name.get(name)

    def now_ns(self) -> int:
        self.t += 10
        return self.t

    def diag(self, level: str, message: str) -> None:
        self.diags.append(message)

    def _add_row(self, table: str, row: tuple[Any, ...]) -> None:
        self.rows.append((table, row))


def test_profiler_api_through_the_callback_hub_switches_the_collectors() -> None:
    hub = FakeHub()
    agent = FakeAgent(hub)
    control = CaptureControl(agent, parse_capture("cudaProfilerApi"))  # type: ignore[arg-type]
    control.start()
    assert sorted(hub.handlers) == sorted(PROFILER_APIS) and control.window.profiler_watched
    assert not agent.ranges.on and agent.torch_hooks.collecting is False
    hub.handlers["cudaProfilerStart"]("cudaProfilerStart", 41)
    assert agent.ranges.on and agent.torch_hooks.collecting is True
    hub.handlers["cudaProfilerStop"]("cudaProfilerStop", 42)
    assert not agent.ranges.on and control.flush_soon.is_set()
    control.finish()
    tables = [t for t, _ in agent.rows]
    assert tables.count("capture_window") == 2 and tables[-1] == "collector"


def test_profiler_api_without_cupti_says_nothing_is_recorded() -> None:
    agent = FakeAgent(hub=None)
    CaptureControl(agent, parse_capture("cudaProfilerApi")).start()  # type: ignore[arg-type]
    assert agent.diags and "needs CUPTI's callback API" in agent.diags[0]
    assert not agent.ranges.on


def test_torch_cuda_nvtx_ranges_drive_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    nvtx = types.SimpleNamespace()

    def range_push(msg: str) -> int:
        calls.append(f"push {msg} on={agent.ranges.on}")
        return 0

    def range_pop() -> int:
        calls.append(f"pop on={agent.ranges.on}")
        return 0

    def range_start(msg: str) -> int:
        return 77

    def range_end(handle: int) -> None:
        calls.append(f"end {handle} on={agent.ranges.on}")

    for f in (range_push, range_pop, range_start, range_end):
        setattr(nvtx, f.__name__, f)
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(nvtx=nvtx))
    agent = FakeAgent()
    control = CaptureControl(agent, parse_capture("nvtx", "train"))  # type: ignore[arg-type]
    control.start()
    control._watch_torch_nvtx(torch)
    nvtx.range_push("data")
    nvtx.range_push("train")
    nvtx.range_pop()
    nvtx.range_pop()
    handle = nvtx.range_start("train")
    assert agent.ranges.on
    nvtx.range_end(handle)
    # collection is on before the watched push reaches NVTX, and until after its pop has
    assert calls == ["push data on=False", "push train on=True", "pop on=True", "pop on=False",
                     "end 77 on=True"]
    assert not agent.ranges.on and nvtx.range_push.__wrapped__ is range_push


def test_cupti_kinds_go_off_and_on_except_device_context_and_overhead() -> None:
    switched: list[tuple[str, Any]] = []
    fake = types.SimpleNamespace(activity_enable=lambda k: switched.append(("on", k)),
                                 activity_disable=lambda k: switched.append(("off", k)))
    c = CuptiCollector(None, {"cuda"}, lambda level, message: None)  # type: ignore[arg-type]
    c._cupti = fake
    c.enabled = ["kernel", "device", "context", "memcpy", "overhead", "nvtx"]
    c._enabled_kinds = [10, 8, 9, 1, 22, 19]
    c.set_collecting(False)
    c.set_collecting(True)
    assert switched == [("off", 10), ("off", 1), ("off", 19), ("on", 10), ("on", 1), ("on", 19)]

"""The agent's end of a process, driven by the registry alone: when each collector stops (by its
``stops`` phase, then the reverse of the order they started), what happens to one that fails, and
the collectors' own threads stopping at once when the launcher is gone."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from gpuscope.capture import collectors
from gpuscope.capture.collectors import STOP_CUPTI, STOP_LAST, STOP_PYTHON, STOP_THREAD, Recorder
from gpuscope.capture.process.agent import Agent
from gpuscope.spool import Chunk, ready_chunks


class Fake:
    def __init__(self, name: str, calls: list[str], fail: str = "") -> None:
        self.name, self.calls, self.fail = name, calls, fail

    def set_collecting(self, on: bool) -> None:
        self.calls.append(f"{self.name}.set_collecting({on})")

    def take_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        return {}

    def ending(self) -> None:
        self.calls.append(f"{self.name}.ending")

    def shutdown(self, ctx: collectors.Context) -> None:
        self.calls.append(f"{self.name}.shutdown")
        if self.fail == "shutdown":
            raise RuntimeError("no")
        ctx.add_row("collector", (self.name, 0, 0, 0, 0, ""))


def _agent(tmp_path: Path, calls: list[str], entries: list[tuple[str, int, str]]) -> Agent:
    def starter(name: str, fail: str) -> collectors.StartFn:
        def start(ctx: collectors.Context, module: Any) -> Fake:
            if fail == "start":
                raise ValueError("cannot")
            calls.append(f"{name}.start")
            return Fake(name, calls, fail)
        return start

    recorders = [Recorder(name, starter(name, fail), stops=stops) for name, stops, fail in entries]
    agent = Agent(str(tmp_path), set(), recorders=recorders)
    agent._launcher = None
    agent._start_recorders()
    return agent


def _rows(tmp_path: Path, table: str) -> list[Any]:
    out: list[Any] = []
    for _, _, path in sorted(ready_chunks(str(tmp_path))):
        out += Chunk.from_bytes(Path(path).read_bytes()).rows.get(table, [])
    return out


def test_collectors_stop_by_phase_then_in_reverse_start_order(tmp_path: Path) -> None:
    calls: list[str] = []
    agent = _agent(tmp_path, calls, [("cupti", STOP_CUPTI, ""), ("hub", STOP_CUPTI, ""), ("ranges", STOP_LAST, ""),
                                     ("ops", STOP_PYTHON, ""), ("memory", STOP_PYTHON, ""),
                                     ("sampler", STOP_THREAD, "")])
    agent._deliver()
    ends = [c for c in calls if c.endswith(".shutdown")]
    assert ends == ["sampler.shutdown", "hub.shutdown", "cupti.shutdown", "memory.shutdown", "ops.shutdown",
                    "ranges.shutdown"]
    # every collector's ending comes before the capture window's last close, and before any shutdown
    first_end = calls.index("sampler.shutdown")
    assert all(calls.index(f"{n}.ending") < first_end for n in ("cupti", "hub", "ranges", "ops", "memory"))
    names = [row[0] for row in _rows(tmp_path, "collector")]
    assert names == ["sampler", "hub", "cupti", "memory", "ops", "ranges"]
    assert _rows(tmp_path, "process_end")


def test_a_collector_that_fails_is_said_and_the_others_go_on(tmp_path: Path) -> None:
    calls: list[str] = []
    agent = _agent(tmp_path, calls, [("broken", STOP_PYTHON, "start"), ("a", STOP_PYTHON, "shutdown"),
                                     ("b", STOP_PYTHON, "")])
    assert agent.collector("broken") is None and agent.collector("a") is not None
    agent._deliver()
    assert [c for c in calls if c.endswith(".shutdown")] == ["b.shutdown", "a.shutdown"]
    messages = [row[2] for row in _rows(tmp_path, "diagnostic")]
    assert messages == ["the broken collector did not start: ValueError: cannot",
                        "the a collector failed to stop: RuntimeError: no"]


def test_a_gone_launcher_stops_the_collectors_threads_at_once_and_once(tmp_path: Path) -> None:
    calls: list[str] = []
    agent = _agent(tmp_path, calls, [("sampler", STOP_THREAD, ""), ("ranges", STOP_LAST, "")])
    agent._orphaned()
    assert [c for c in calls if c.endswith(".shutdown")] == ["sampler.shutdown"]
    assert not Path(tmp_path).exists()  # nobody reads the spool: it is removed
    agent._deliver()
    assert [c for c in calls if c.endswith(".shutdown")] == ["sampler.shutdown", "ranges.shutdown"]


def test_the_registry_names_each_recorder_once_with_a_start_function() -> None:
    names = [r.name for r in collectors.RECORDERS]
    assert len(names) == len(set(names))
    for recorder in collectors.RECORDERS:
        assert callable(recorder.start_function()), recorder.name
        assert all(t in collectors.BY_NAME for t in recorder.traces), recorder.name
    # the PyTorch and nvtx recorders wait for their module; the rest start with the process
    assert [(r.name, r.when) for r in collectors.RECORDERS if r.when] == [
        ("nvtx-python", "nvtx"), ("torch", "torch"), ("torch-ops", "torch"), ("memory", "torch")]
    with pytest.raises(ModuleNotFoundError):
        Recorder("missing", "python.no_such_module").start_function()


class SignalsItself(Fake):
    """A collector whose stop takes long enough for a second SIGTERM to come meanwhile."""

    def shutdown(self, ctx: collectors.Context) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        super().shutdown(ctx)


@pytest.mark.parametrize("at_exit", [False, True])
def test_the_programs_own_sigterm_handler_waits_for_the_delivery(tmp_path: Path, at_exit: bool) -> None:
    """A SIGTERM that comes while the agent delivers, to a program that handles SIGTERM itself (a
    supervisor's second one): the handler runs once delivery is done; what it raises comes from
    ``stop``, and at exit it is not said (the program is ending already)."""
    calls: list[str] = []
    agent = Agent(str(tmp_path), set(), recorders=[
        Recorder("first", lambda ctx, module: Fake("first", calls), stops=STOP_LAST),
        Recorder("signals", lambda ctx, module: SignalsItself("signals", calls), stops=STOP_PYTHON)])
    agent._launcher = None
    agent._start_recorders()

    def handler(signum: int, frame: Any) -> None:
        calls.append("handler")
        raise SystemExit(0)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        if at_exit:
            agent.stop_at_exit()
        else:
            with pytest.raises(SystemExit):
                agent.stop()
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert calls[-3:] == ["signals.shutdown", "first.shutdown", "handler"]
    assert [row[0] for row in _rows(tmp_path, "collector")] == ["signals", "first"]
    assert _rows(tmp_path, "process_end")

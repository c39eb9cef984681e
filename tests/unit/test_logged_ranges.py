"""Logged ranges (the cheap path of PyTorch module calls): the range recorder pairs each thread's
logged starts and ends into rows; the module wrapper logs a call where nothing else is asked of
its range (making a launch anchor before each clock read where anchors are on), and takes push/pop
where backward ranges or a watching capture window are on."""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

import pytest

from gpuscope.capture.python import hook_cost
from gpuscope.capture.python.ranges import RangeRecorder


def _names(rows: list[tuple[Any, ...]]) -> list[str]:
    return [row[5] for row in rows]


def test_kinds_are_interned() -> None:
    r = RangeRecorder()
    a = r.kind("Net.fc", "", "torch", "forward")
    assert r.kind("Net.fc", "", "torch", "forward") == a
    assert r.kind("Net.fc", "", "torch", "backward") != a
    assert r.kind("Net.out", "", "torch", "forward") not in (a,)


def test_logged_starts_and_ends_pair_in_nesting_order() -> None:
    r = RangeRecorder(clock_offset_ns=1_000)
    outer, inner = r.kind("Net", "", "torch", "forward"), r.kind("Net.fc", "", "torch", "forward")
    log = r.thread_log()
    assert r.thread_log() is log  # one log per thread
    log += [(10, outer), (20, inner), 30, (40, inner), 50, 60]
    rows = r.take()
    # rows come as the ranges end: the inner ones first, each with the session clock's offset
    assert [(row[5], row[0], row[1]) for row in rows] == [("Net.fc", 1_020, 1_030), ("Net.fc", 1_040, 1_050),
                                                          ("Net", 1_010, 1_060)]
    assert all(row[2] == threading.get_native_id() and row[6:10] == ("range", "torch", "forward", None)
               and row[4] == "" for row in rows)
    assert len({row[3] for row in rows}) == 3  # ids unique
    assert r.counts["ranges"] == 3 and r.counts["reentrant_calls"] == 0
    assert r.take() == [] and log == []


def test_a_range_open_at_a_take_waits_for_its_end() -> None:
    r = RangeRecorder()
    k = r.kind("Net", "", "torch", "forward")
    log = r.thread_log()
    log.append((5, k))
    assert r.take() == []
    log.append(9)
    assert [(row[0], row[1]) for row in r.take()] == [(5, 9)]


def test_reentrant_calls_and_stray_ends_are_counted() -> None:
    r = RangeRecorder()
    a, b = r.kind("Recursive", "", "torch", "forward"), r.kind("Other", "", "torch", "forward")
    log = r.thread_log()
    log += [(1, a), (2, b), (3, a), (4, a), 5, 6, 7, 8, 99]  # a inside b inside a: two re-entries; one end too many
    rows = r.take()
    assert _names(rows) == ["Recursive", "Recursive", "Other", "Recursive"]
    assert r.counts["reentrant_calls"] == 2 and r.counts["unbalanced_pops"] == 1


def test_each_thread_pairs_its_own_log() -> None:
    r = RangeRecorder()
    k = r.kind("Net", "", "torch", "forward")
    main = r.thread_log()
    main.append((100, k))  # open on the main thread while another thread logs a whole range
    tids: list[int] = []

    def other() -> None:
        tids.append(threading.get_native_id())
        r.thread_log().extend([(110, k), 120])

    t = threading.Thread(target=other)
    t.start()
    t.join()
    main.append(130)
    rows = sorted(r.take())
    assert [(row[0], row[1], row[2]) for row in rows] == [(100, 130, threading.get_native_id()),
                                                          (110, 120, tids[0])]
    assert r.counts["reentrant_calls"] == 0  # the same kind open on two threads is no re-entry


def test_logged_ranges_open_at_exit_are_kept_without_end() -> None:
    r = RangeRecorder()
    outer, inner = r.kind("Net", "", "torch", "forward"), r.kind("Net.fc", "", "torch", "forward")
    r.thread_log().extend([(1, outer), (2, inner), 3, (4, inner)])
    still_open = r.close_open()
    assert sorted((row[5], row[0], row[1]) for row in still_open) == [("Net", 1, None), ("Net.fc", 4, None)]
    assert [(row[5], row[1]) for row in r.take()] == [("Net.fc", 3)]  # the ended one, paired first
    assert r.counts["open_at_exit"] == 2
    assert r.close_open() == []


torch = pytest.importorskip("torch")
from gpuscope.capture.python.torch_hooks import TorchHooks  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.act = torch.nn.ReLU()

    def forward(self, x: Any) -> Any:
        return self.act(self.fc(x))


class Fails(torch.nn.Module):
    def forward(self, x: Any) -> Any:
        raise ValueError("bad input")


def _hooked(monkeypatch: pytest.MonkeyPatch, backward: bool = False) -> TorchHooks:
    """Hooks on a fresh recorder, with nn.Module.__call__ wrapped for the test only."""
    hooks = TorchHooks(RangeRecorder(), lambda level, message: None, backward=backward)
    hooks._torch = torch
    hooks.r.step_marked = True  # as in a program that marks its steps: no iteration marks among the ranges
    plain = torch.nn.Module.__call__
    monkeypatch.setattr(torch.nn.Module, "__call__", hooks._module_call(plain))
    return hooks


def test_module_calls_are_logged_with_their_qualified_names(monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = _hooked(monkeypatch)
    assert hooks.fast
    model = torch.nn.Sequential(Block(), Block())
    model(torch.ones(2, 4)).sum().backward()
    assert hooks.r._logs and hooks.r._stacks[0][1] == []  # logged, nothing pushed
    rows = hooks.r.take()
    spans = {row[5]: (row[0], row[1]) for row in rows}
    assert sorted(spans) == ["Sequential", "Sequential.0", "Sequential.0.act", "Sequential.0.fc", "Sequential.1",
                             "Sequential.1.act", "Sequential.1.fc"]
    root, first, fc = spans["Sequential"], spans["Sequential.0"], spans["Sequential.0.fc"]
    assert root[0] <= first[0] <= fc[0] <= fc[1] <= first[1] <= spans["Sequential.1"][0] <= root[1]
    assert {(row[7], row[8]) for row in rows} == {("torch", "forward")}


def test_a_call_that_raises_still_ends_its_range(monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = _hooked(monkeypatch)
    model = torch.nn.Sequential(Fails())
    with pytest.raises(ValueError, match="bad input"):
        model(torch.ones(1))
    rows = hooks.r.take()
    assert sorted(_names(rows)) == ["Sequential", "Sequential.0"] and all(row[1] is not None for row in rows)
    assert hooks.counts["hook_errors"] == 0


def test_a_dead_modules_kind_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its id may be given to the next module, which must get a kind (and a name) of its own."""
    hooks = _hooked(monkeypatch)
    layer = torch.nn.Linear(2, 2)
    layer(torch.ones(2))
    key = id(layer)
    assert key in hooks._kinds
    del layer
    gc.collect()
    assert key not in hooks._kinds and key not in hooks._alive


def test_launch_anchors_come_right_before_each_logged_clock_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """With anchors on, module calls stay on the logged path, and each range's start and end have an
    anchor right before them: work launched inside a module lies between the anchors of its range."""
    hooks = _hooked(monkeypatch)
    events: list[tuple[str, int]] = []
    hooks.r.anchor = lambda: events.append(("anchor", time.monotonic_ns()))

    class Launches(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            events.append(("launch", time.monotonic_ns()))
            return x * 2

    model = torch.nn.Sequential(Launches(), Launches())
    hooks.set_collecting(True)
    assert hooks.fast
    model(torch.ones(2))
    rows = sorted((row for row in hooks.r.take() if row[8] == "forward"), key=lambda row: row[0])
    assert hooks.r._logs and not hooks.r._stacks[0][1]  # logged, nothing pushed
    assert [kind for kind, _ in events] == ["anchor", "anchor", "launch", "anchor", "anchor", "launch",
                                           "anchor", "anchor"]
    t = [at for _, at in events]
    outer, first, second = rows
    assert _names(rows) == ["Sequential", "Sequential.0", "Sequential.1"]
    # anchor, clock read, anchor, clock read, launch, anchor, clock read, ...
    assert t[0] <= outer[0] <= t[1] <= first[0] <= t[2] <= t[3] <= first[1]
    assert first[1] <= t[4] <= second[0] <= t[5] <= t[6] <= second[1] <= t[7] <= outer[1]


@pytest.mark.parametrize("why", ["backward", "watch", "off"])
def test_the_full_path_where_a_range_needs_more_than_a_log(monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    hooks = _hooked(monkeypatch, backward=why == "backward")
    anchors: list[int] = []
    hooks.r.anchor = lambda: anchors.append(1)
    if why == "watch":
        hooks.r.watch = type("Watch", (), {"range_opened": lambda *a: None, "range_closed": lambda *a: None})()
    hooks.set_collecting(why != "off")
    assert not hooks.fast
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model(torch.ones(2)).sum().backward()
    rows = hooks.r.take()
    assert not hooks.r._logs  # nothing went through a log
    if why == "off":
        assert rows == []
        return
    assert sorted(_names(r for r in rows if r[8] == "forward")) == ["Sequential", "Sequential.0"]
    assert len(anchors) == (4 if why == "watch" else 7)  # both ends of both ranges (and of the backward ones)
    if why == "backward":
        assert "backward" in {row[8] for row in rows}
    hooks.set_collecting(True)
    assert hooks.fast is (why == "off")


@pytest.mark.parametrize("how", ["logged", "anchored", "pushed", "off", "switched on", "switched off"])
def test_an_optimizer_step_is_a_range_and_a_step_mark(how: str) -> None:
    """Collecting: a range (logged where nothing needs push/pop, with anchors where they are on, pushed
    where a capture window watches range names); off: only the mark; collection switched between the
    step's start and end: the end matches what the start did."""
    hooks = TorchHooks(RangeRecorder(), lambda level, message: None)
    hooks._torch = torch
    anchors: list[int] = []
    if how == "anchored":
        hooks.r.anchor = lambda: anchors.append(1)
    if how == "pushed":
        hooks.r.watch = type("Watch", (), {"range_opened": lambda *a: None, "range_closed": lambda *a: None})()
    hooks.set_collecting(how not in ("off", "switched on"))
    pre, post = hooks._step_hooks()
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    pre(opt, (), {})
    if how.startswith("switched"):
        hooks.set_collecting(how == "switched on")
    post(opt, (), {})
    rows = hooks.r.take()
    ranges = [row for row in rows if row[6] == "range"]
    marks = [row for row in rows if row[6] == "mark"]
    assert [(m[5], m[8]) for m in marks] == [("step", "step")]
    if how in ("off", "switched on"):
        assert ranges == []
    else:
        assert [(r[5], r[8]) for r in ranges] == [("SGD.step", "optimizer")] and ranges[0][0] <= ranges[0][1]
        assert bool(hooks.r._logs) is (how != "pushed")
    assert len(anchors) == (3 if how == "anchored" else 0)  # the range's two ends, and the step mark
    assert hooks.r.counts["unbalanced_pops"] == 0 and hooks.r.close_open() == []
    assert hooks.counts["hook_errors"] == 0


def test_the_cost_is_measured_on_the_path_the_process_took(monkeypatch: pytest.MonkeyPatch) -> None:
    """hook_cost's scratch hooks take the logged path where the process's hooks log, push/pop where they
    can not, and record backward ranges where the process does."""
    seen: list[tuple[bool, bool]] = []

    def measure(torch_: Any, scratch: TorchHooks) -> tuple[int, int]:
        seen.append((scratch.fast, scratch.backward))
        return 1, 2

    monkeypatch.setattr(hook_cost, "module_call_costs_ns", measure)
    logged = TorchHooks(RangeRecorder(), lambda level, message: None, backward=False)
    anchored = TorchHooks(RangeRecorder(), lambda level, message: None, backward=False)
    anchored.r.anchor = lambda: None
    both = TorchHooks(RangeRecorder(), lambda level, message: None, backward=True)
    for hooks in (logged, anchored, both):
        hooks._torch = torch
        hooks.set_collecting(False)  # the process's end has closed the capture window
        costs = hook_cost.costs(RangeRecorder, hooks, lambda level, message: None)
        assert costs["ns_per_module_call"] == 1 and costs["ns_per_module_call_with_backward"] == 2
    assert seen == [(True, False), (True, False), (False, True)]


def test_module_call_costs_are_measured_on_both_paths() -> None:
    hooks = TorchHooks(RangeRecorder(), lambda level, message: None, backward=False)
    fwd, both = hook_cost.module_call_costs_ns(torch, hooks)
    assert fwd >= 0 and both >= 0 and hooks.backward  # the second measurement had backward ranges on
    assert hooks.r.take() == [] and not any(log for _, log, _, _ in hooks.r._logs)  # all paired, then taken


def test_a_forked_child_passes_calls_through() -> None:
    """A forked child (a DataLoader worker) is not recorded and has no flush thread to empty its log."""
    import os

    hooks = TorchHooks(RangeRecorder(), lambda level, message: None, backward=False)
    hooks.install(torch)
    try:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: call a module, say whether anything was logged
            try:
                torch.nn.Linear(2, 2)(torch.ones(2))
                logged = sum(len(log) for _, log, _, _ in hooks.r._logs)
                os.write(write, f"{hooks.fast} {logged}".encode())
            finally:
                os._exit(0)
        os.close(write)
        said = os.read(read, 100).decode()
        os.waitpid(pid, 0)
        torch.nn.Linear(2, 2)(torch.ones(2))  # the parent still records
        rows = hooks.r.take()
        assert said == "False 0" and hooks.fast and [row[5] for row in rows if row[6] == "range"] == ["Linear"]
    finally:
        hooks.uninstall()


def test_outermost_calls_are_marked_until_the_program_marks_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = TorchHooks(RangeRecorder(), lambda level, message: None)
    hooks.install(torch)
    try:
        counting = torch.nn.Module.__call__
        model = torch.nn.Sequential(Block(), Block())
        for _ in range(3):
            model(torch.ones(2, 4))
        marks = [row for row in hooks.r.take() if row[6] == "mark"]
        assert [(row[5], row[7], row[8]) for row in marks] == [("iteration", "module", "iteration")] * 3
        hooks.r.mark("step", "", "gpuscope", "step")  # gpuscope.step(): the program counts its own steps
        assert torch.nn.Module.__call__ is counting  # kept: a compiled graph's guards hold its closure
        model(torch.ones(2, 4))
        assert not [row for row in hooks.r.take() if row[6] == "mark" and row[5] == "iteration"]
    finally:
        hooks.uninstall()
    assert torch.nn.Module.__call__ is counting.__wrapped__


class _Waits(torch.utils.data.Dataset):  # type: ignore[misc]
    """Each sample waits (a file read) or computes for about 10 ms."""

    def __init__(self, compute: bool) -> None:
        self.compute = compute

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.compute:
            end = time.thread_time() + 0.01
            while time.thread_time() < end:
                pass
        else:
            time.sleep(0.01)
        return torch.zeros(1)


@pytest.mark.parametrize("compute", [False, True])
def test_dataloader_calls_count_their_cpu_time_against_their_wall_time(compute: bool) -> None:
    """What the CPU diagnosis needs to tell loading that waits (workers hide it without taking a
    core) from loading that computes (workers take turns with the loop for the cores)."""
    hooks = TorchHooks(RangeRecorder(), lambda level, message: None, backward=False)
    hooks.install(torch)
    try:
        for _ in torch.utils.data.DataLoader(_Waits(compute), batch_size=2):
            pass
    finally:
        hooks.uninstall()
    wall, cpu = hooks.counts["dataloader_wall_ns"], hooks.counts["dataloader_cpu_ns"]
    assert wall >= 8 * 10_000_000  # eight samples of 10 ms
    assert (cpu / wall > 0.4) if compute else (cpu / wall < 0.2)  # wide: a busy machine stretches the wall
    assert sum(r[8] == "dataloader" for r in hooks.r.take()) == 5  # four batches and the last, empty call

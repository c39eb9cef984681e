"""Logged ranges (the cheap path of PyTorch module calls): the range recorder hands each thread's
logged starts and ends over as they are, and the launcher pairs them into rows (trace/range_log.py);
the module wrapper logs a call where nothing else is asked of its range (making a launch anchor
before each clock read where anchors are on), and takes push/pop where backward ranges or a
watching capture window are on."""

from __future__ import annotations

import gc
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuscope.capture.python import hook_cost
from gpuscope.capture.python.ranges import RangeRecorder
from gpuscope.trace.range_log import pair

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from range_rows import pair_counts, recorded_rows, still_open  # noqa: E402


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
    log += [10, ~outer, 20, ~inner, 30, 40, ~inner, 50, 60]
    rows = recorded_rows(r)
    # rows come as the ranges end: the inner ones first, each with the session clock's offset
    assert [(row[5], row[0], row[1]) for row in rows] == [("Net.fc", 1_020, 1_030), ("Net.fc", 1_040, 1_050),
                                                          ("Net", 1_010, 1_060)]
    assert all(row[2] == threading.get_native_id() and row[6:10] == ("range", "torch", "forward", None)
               and row[4] == "" for row in rows)
    assert len({row[3] for row in rows}) == 3  # ids unique
    assert pair_counts(r) == {"ranges": 3, "reentrant_calls": 0, "unbalanced_pops": 0}
    assert r.counts["logged_entries"] == 9
    assert recorded_rows(r) == [] and log == []


def test_the_flush_hands_over_bytes_and_names_each_kind_once() -> None:
    r = RangeRecorder()
    k = r.kind("Net", "", "torch", "forward")
    r.thread_log().extend([5, ~k, 9])
    taken = r.take_rows()
    assert taken["range_kind"] == [(k, "Net", "", "torch", "forward")]
    (tid, offset, blob), = taken["range_log"]
    assert tid == threading.get_native_id() and offset == 0
    assert np.frombuffer(blob, dtype=np.int64).tolist() == [5, ~k, 9]
    r.thread_log().extend([11, ~k, 12])
    assert "range_kind" not in r.take_rows()  # sent once


def test_a_range_open_at_a_take_waits_for_its_end() -> None:
    r = RangeRecorder()
    k = r.kind("Net", "", "torch", "forward")
    log = r.thread_log()
    log.extend((5, ~k))
    assert recorded_rows(r) == []
    log.append(9)
    assert [(row[0], row[1]) for row in recorded_rows(r)] == [(5, 9)]


def test_reentrant_calls_and_stray_ends_are_counted() -> None:
    r = RangeRecorder()
    a, b = r.kind("Recursive", "", "torch", "forward"), r.kind("Other", "", "torch", "forward")
    log = r.thread_log()
    log += [1, ~a, 2, ~b, 3, ~a, 4, ~a, 5, 6, 7, 8, 99]  # a inside b inside a: two re-entries; one end too many
    rows = recorded_rows(r)
    assert _names(rows) == ["Recursive", "Recursive", "Other", "Recursive"]
    assert pair_counts(r) == {"ranges": 4, "reentrant_calls": 2, "unbalanced_pops": 1}


def test_each_thread_pairs_its_own_log() -> None:
    r = RangeRecorder()
    k = r.kind("Net", "", "torch", "forward")
    main = r.thread_log()
    main.extend((100, ~k))  # open on the main thread while another thread logs a whole range
    tids: list[int] = []

    def other() -> None:
        tids.append(threading.get_native_id())
        r.thread_log().extend([110, ~k, 120])

    t = threading.Thread(target=other)
    t.start()
    t.join()
    main.append(130)
    rows = sorted(recorded_rows(r))
    assert [(row[0], row[1], row[2]) for row in rows] == [(100, 130, threading.get_native_id()),
                                                          (110, 120, tids[0])]
    assert pair_counts(r)["reentrant_calls"] == 0  # the same kind open on two threads is no re-entry


def test_logged_ranges_open_at_the_end_are_kept_without_end() -> None:
    r = RangeRecorder()
    outer, inner = r.kind("Net", "", "torch", "forward"), r.kind("Net.fc", "", "torch", "forward")
    r.thread_log().extend([1, ~outer, 2, ~inner, 3, 4, ~inner])
    assert [(row[5], row[1]) for row in recorded_rows(r)] == [("Net.fc", 3)]
    assert r.close_open() == []  # the process has none of its own: the launcher closes logged ranges
    assert sorted((row[5], row[0], row[1]) for row in still_open(r)) == [("Net", 1, None), ("Net.fc", 4, None)]
    assert still_open(r) == []


def _loop(events: list[tuple[int, int]]) -> tuple[list[tuple[int, int, int]], int, int, list[int]]:
    """Pair (time, kind or -1 for an end) one at a time: what :func:`pair` must give."""
    stack: list[tuple[int, int]] = []
    out, reentrant, stray = [], 0, 0
    for t, k in events:
        if k >= 0:
            reentrant += any(k == open_k for _, open_k in stack)
            stack.append((t, k))
        elif stack:
            s, sk = stack.pop()
            out.append((s, t, sk))
        else:
            stray += 1
    return out, reentrant, stray, [t for t, _ in stack]


@pytest.mark.parametrize("seed", range(40))
def test_pairing_in_one_pass_matches_pairing_one_event_at_a_time(seed: int) -> None:
    """Random nestings (with stray ends in some), cut into rows at random points: the same ranges,
    re-entries and stray ends as pairing event by event, and the same starts left open."""
    rng = np.random.default_rng(seed)
    events: list[tuple[int, int]] = []
    depth, t = 0, 1
    for _ in range(int(rng.integers(1, 300))):
        t += int(rng.integers(1, 5))
        if depth and rng.random() < 0.5 or (seed % 4 == 0 and rng.random() < 0.03):
            events.append((t, -1))
            depth = max(depth - 1, 0)
        else:
            events.append((t, int(rng.integers(0, 4))))
            depth += 1
    flat: list[int] = []
    bounds = [0]
    for t_, k in events:
        flat += [t_, ~k] if k >= 0 else [t_]
        bounds.append(len(flat))
    cuts = sorted({int(c) for c in rng.choice(bounds, size=min(3, len(bounds)), replace=False)} | {0, len(flat)})
    open_t: list[int] = []
    open_k: list[int] = []
    got, reentrant, stray = [], 0, 0
    for a, b in zip(cuts, cuts[1:]):
        s, e, k, re_, st = pair(np.asarray(flat[a:b], dtype=np.int64), open_t, open_k)
        got += list(zip(s.tolist(), e.tolist(), k.tolist()))
        reentrant += re_
        stray += st
    want, want_re, want_stray, want_open = _loop(events)
    assert sorted(got) == sorted(want)
    assert (reentrant, stray) == (want_re, want_stray)
    assert open_t == want_open


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
    rows = recorded_rows(hooks.r)
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
    rows = recorded_rows(hooks.r)
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
    rows = sorted((row for row in recorded_rows(hooks.r) if row[8] == "forward"), key=lambda row: row[0])
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
    rows = recorded_rows(hooks.r)
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
    rows = recorded_rows(hooks.r)
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
    assert recorded_rows(hooks.r) == [] and not any(log for _, log in hooks.r._logs)  # all paired, then taken


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
                logged = sum(len(log) for _, log in hooks.r._logs)
                os.write(write, f"{hooks.fast} {logged}".encode())
            finally:
                os._exit(0)
        os.close(write)
        said = os.read(read, 100).decode()
        os.waitpid(pid, 0)
        torch.nn.Linear(2, 2)(torch.ones(2))  # the parent still records
        rows = recorded_rows(hooks.r)
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
        marks = [row for row in recorded_rows(hooks.r) if row[6] == "mark"]
        assert [(row[5], row[7], row[8]) for row in marks] == [("iteration", "module", "iteration")] * 3
        hooks.r.mark("step", "", "gpuscope", "step")  # gpuscope.step(): the program counts its own steps
        assert torch.nn.Module.__call__ is counting  # kept: a compiled graph's guards hold its closure
        model(torch.ones(2, 4))
        assert not [row for row in recorded_rows(hooks.r) if row[6] == "mark" and row[5] == "iteration"]
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
    assert sum(r[8] == "dataloader" for r in recorded_rows(hooks.r)) == 5  # four batches and the last, empty call


def test_module_call_costs_hold_no_iteration_marks() -> None:
    """The scratch layer's every call is an outermost one: in a program that marks no steps that would
    make an iteration mark per call, which the programs make once per iteration (counted as ranges)."""
    hooks = TorchHooks(RangeRecorder(), lambda level, message: None, backward=False)
    marks: list[tuple[Any, ...]] = []
    hooks.r.mark = lambda *args, **kwargs: marks.append(args)  # type: ignore[method-assign]
    hook_cost.module_call_costs_ns(torch, hooks)
    assert marks == []

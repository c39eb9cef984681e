"""The operator recorder inside a process: threads, pausing, autograd sequence numbers, failures, fork.

The sections run in order in one fresh interpreter (the recorder pushes a dispatch mode and hooks
thread starts for the rest of its process, which must not leak into the test process); each test
looks at what its section returned.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("torch")

PRELUDE = """
import json, os, sys, threading
import torch
from gpuscope.capture.python import torch_ops
said = []
rec = torch_ops.TorchOps(1000, lambda level, msg: said.append((level, msg)))
rec.install(torch)

def keys():  # the mode on the stack, and the Python key among the thread's keys: alike where consistent
    from torch.utils._python_dispatch import _get_current_dispatch_mode as current
    return [current() is rec.mode, torch._C._dispatch_tls_is_dispatch_key_included(torch._C.DispatchKey.Python)]

def counting_mode():
    from torch.utils._python_dispatch import TorchDispatchMode
    class Mine(TorchDispatchMode):  # a mode of the program's own, counting what it sees
        seen = 0
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Mine.seen += 1
            return func(*args, **(kwargs or {}))
    return Mine

def rows():
    return [dict(zip(("start", "end", "tid", "name", "seq", "shapes", "dtypes", "out_shapes", "scalars"), r))
            for r in rec.take()]
"""


SECTIONS = '''
def rows_hold_names_shapes_outputs_and_the_session_clock():
    import time
    a = torch.ones(2, 3)
    rows()
    t0 = time.monotonic_ns()
    parts = torch.split(torch.cat([a, a]), 2)
    t1 = time.monotonic_ns()
    return {"rows": rows(), "t0": t0, "t1": t1, "tid": threading.get_native_id()}

def higher_order_operators():
    x = torch.ones(3)
    rows()
    torch.cond(x.sum() > 0, lambda a: a.sin(), lambda a: a.cos(), (x,))
    return [r for r in rows() if r["name"].startswith("hop::")]

def threads_started_later_and_a_paused_recorder():
    out = {}
    def work():
        out["tid"] = threading.get_native_id()
        torch.zeros(3).add_(1)
    threads = rec.counts["threads"]
    rec.recording = False
    t = threading.Thread(target=work); t.start(); t.join()  # started while paused: recorded later
    torch.ones(1)
    paused = rows()
    rec.recording = True
    t = threading.Thread(target=work); t.start(); t.join()
    return {"paused": paused, "rows": rows(), "tid": out["tid"], "main": threading.get_native_id(),
                      "threads": rec.counts["threads"] - threads}

def collection_off_takes_the_mode_off_the_main_thread():
    from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode as current
    out = {}
    go, done = threading.Event(), threading.Event()
    def worker():  # a thread that lives across the pause: it keeps the mode, passing calls through
        out["tid"] = threading.get_native_id()
        for phase in ("off", "on"):
            go.wait(); go.clear()
            torch.zeros(2).add_(1)
            out[phase] = current() is rec.mode
            done.set()
    def switch_elsewhere(on):  # as the --delay and --duration timers do
        s = threading.Thread(target=lambda: setattr(rec, "recording", on)); s.start(); s.join()
    rows()
    rec.recording = False
    t = threading.Thread(target=worker); t.start()
    off = []
    for _ in range(3):
        torch.ones(2).relu()
        off.append(current())
    go.set(); done.wait(); done.clear()
    off_rows = rows()
    rec.recording = True
    on_main = current() is rec.mode
    torch.ones(3)
    go.set(); done.wait(); t.join()
    on_rows = rows()
    switch_elsewhere(False)
    for _ in range(3):
        torch.ones(4)
    off_elsewhere = current()
    switch_elsewhere(True)
    for _ in range(3):  # the main thread's next bytecodes
        pass
    on_elsewhere = current() is rec.mode
    torch.ones(5)
    elsewhere_rows = rows()
    # found on the stack while off (as autograd's engine restores a stack): it leaves after the call
    rec.recording = False
    torch._C._push_on_torch_dispatch_stack(rec.mode)
    torch.ones(6)
    left = current()
    # a mode the program entered while collection was off stays above the recorder's
    class Mine(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    with Mine() as mine:
        rec.recording = True
        stack = [torch._C._get_dispatch_stack_at(i) for i in range(torch._C._len_torch_dispatch_stack())]
        torch.ones(7)
        rec.recording = False
        under_mine = current() is mine and torch._C._len_torch_dispatch_stack() == 1
    inside_mine = [r["name"] for r in rows()]
    # switched on inside a backward pass (autograd restores the thread's stack after each node): after it
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: setattr(rec, "recording", True))
    y.sum().backward()
    after_backward = current() is rec.mode
    torch.ones(8)
    return {"off": [m is None for m in off], "off_rows": off_rows, "on_main": on_main, "on_rows": on_rows,
            "worker": out, "main": threading.get_native_id(), "off_elsewhere": off_elsewhere is None,
            "on_elsewhere": on_elsewhere, "elsewhere_rows": [r["name"] for r in elsewhere_rows],
            "left": left is None, "stack": [m is rec.mode for m in stack], "under_mine": under_mine,
            "inside_mine": inside_mine, "after_backward": after_backward,
            "after_backward_rows": [r["name"] for r in rows()],
            "failed": rec.counts["failed"]}

def a_switch_inside_a_guard_waits_for_its_end():
    Mine = counting_mode()
    rows()
    out = {}
    rec.recording = False
    guard = torch._C._InferenceMode(True)  # entered below torch's Python class: not followed
    rec.recording = True
    out["on_inside"] = keys()
    del guard  # saved the thread's dispatch keys, and restores them whole here
    out["on_after"] = keys()
    with Mine():  # a mode the program enters afterwards
        torch.ones(2)
    out["mine_seen"] = Mine.seen
    guard = torch._C._InferenceMode(True)
    rec.recording = False
    out["off_inside"] = keys()
    del guard
    out["off_after"] = keys()
    torch.zeros(3)  # no tensor arguments
    out["tensor"] = torch.tensor([1, 2]).tolist()
    rec.recording = True
    out["rows"] = [r["name"] for r in rows()]
    out["failed"] = rec.counts["failed"]
    return out

def a_switch_inside_inference_mode_happens_at_once():
    Mine = counting_mode()
    rows()
    out = {}
    rec.recording = True
    with torch.inference_mode():  # a whole loop inside one guard: collection goes off in it, then on
        torch.ones(1)
        rec.recording = False
        out["off_inside"] = keys()
        torch.ones(2)  # passes by the recorder: PyTorch's Python dispatch is off
        with torch.inference_mode():  # nested: back on inside, off again before its end
            rec.recording = True
            out["on_nested"] = keys()
            torch.ones(3)
            rec.recording = False
        out["off_after_nested"] = keys()
        torch.ones(4)
    out["off_after"] = keys()
    torch.zeros(3)  # no tensor arguments: the Python key came back with the mode, and left with it
    with Mine():
        torch.ones(5)
    out["mine_seen"] = Mine.seen
    rec.recording = False
    with torch.inference_mode():  # off at its entry, on inside: at its end stack and keys agree again
        rec.recording = True
        out["on_inside"] = keys()
        torch.ones(6)
    out["on_after"] = keys()
    with Mine():
        torch.ones(7)
    out["mine_seen_on"] = Mine.seen
    out["tensor"] = torch.tensor([1, 2]).tolist()
    out["rows"] = [r["name"] for r in rows()]
    out["failed"] = rec.counts["failed"]
    out["said"] = said[:]
    return out

def sequence_numbers_link_backward_calls_to_forward_ones():
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    z = torch.zeros(3)  # no node: no number
    rec.recording = False
    w = y * 3  # autograd numbers a node while nothing is recorded
    rec.recording = True
    u = torch.ones(3)  # after the pause: its thread's counter moved, so it can not tell
    v = (w * y).sum()
    forward = rows()
    v.backward()
    return {"forward": forward, "backward": rows(), "y": y.grad_fn._sequence_nr(),
                      "v": v.grad_fn._sequence_nr(), "vmul": v.grad_fn.next_functions[0][0]._sequence_nr()}

def a_failing_recorder_never_breaks_the_program():
    class Broken:
        name = "x"
        @property
        def kinds(self):
            raise RuntimeError("boom")
    rec._plans[id(torch.ops.aten.add.Tensor)] = Broken()
    a = torch.ones(2)
    r1 = torch.add(a, a).tolist()
    r2 = torch.add(a, 1).tolist()
    names = [r["name"] for r in rows()]
    encode = rec._encode
    rec._encode = lambda signature: 1 / 0  # turning rows into report rows fails for one signature
    torch.ones(9)
    lost = rows()
    rec._encode = encode
    torch.ones(9)
    torch.ones(10)
    after = [json.loads(r["out_shapes"]) for r in rows()]
    return {"r": [r1, r2], "names": names, "failed": rec.counts["failed"], "said": said, "lost": lost,
            "after": after}

def signatures_past_the_limit_travel_with_their_rows():
    before = dict(rec.counts)
    torch_ops._MAX_SIGNATURES = 1
    for n in (5, 6, 7):
        torch.zeros(n)
    return {"rows": rows(), "new": {k: rec.counts[k] - before[k] for k in ("signatures", "uninterned")}}

def a_forked_child_stops_recording():
    torch.ones(1)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        torch.ones(2)
        os.write(w, json.dumps([rec.recording, len(rec._raw), torch._C._len_torch_dispatch_stack()]).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = json.loads(os.read(r, 1000))
    return {"child": child, "parent": len(rows()), "stack": torch._C._len_torch_dispatch_stack()}
'''


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    """What each section returned, by section name."""
    names = [line[4:line.index("(")] for line in SECTIONS.splitlines() if line.startswith("def ")]
    script = PRELUDE + SECTIONS + f"\nprint(json.dumps({{n: globals()[n]() for n in {names!r}}}))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_rows_hold_names_shapes_outputs_and_the_session_clock(results: dict[str, Any]) -> None:
    got = results["rows_hold_names_shapes_outputs_and_the_session_clock"]
    cat, split = got["rows"]
    assert cat["name"] == "aten::cat" and json.loads(cat["shapes"]) == [[[2, 3], [2, 3]]]
    assert json.loads(cat["dtypes"]) == [["float32", "float32"]] and json.loads(cat["out_shapes"]) == [[4, 3]]
    assert split["name"] == "aten::split" and json.loads(split["out_shapes"]) == [[2, 3], [2, 3]]
    assert json.loads(split["scalars"]) == {"split_size": 2}
    assert got["t0"] + 1000 <= cat["start"] <= cat["end"] <= split["start"] <= split["end"] <= got["t1"] + 1000
    assert cat["tid"] == split["tid"] == got["tid"]


def test_higher_order_operators_are_one_call_with_their_operands(results: dict[str, Any]) -> None:
    (cond,) = results["higher_order_operators"]  # the branch's own operators run inside it, unseen
    assert cond["name"] == "hop::cond"
    assert json.loads(cond["shapes"]) == [[], None, None, [[3]]] and json.loads(cond["out_shapes"]) == [[3]]


def test_threads_started_later_and_a_paused_recorder(results: dict[str, Any]) -> None:
    got = results["threads_started_later_and_a_paused_recorder"]
    assert got["paused"] == []
    assert [(r["name"], r["tid"]) for r in got["rows"]] == [("aten::zeros", got["tid"]), ("aten::add_", got["tid"])]
    assert got["tid"] != got["main"] and got["threads"] == 2


def test_collection_off_takes_the_mode_off_the_main_thread(results: dict[str, Any]) -> None:
    got = results["collection_off_takes_the_mode_off_the_main_thread"]
    # off: operators of the main thread no longer reach the recorder; a thread that lives on passes them through
    assert got["off"] == [True, True, True] and got["off_rows"] == []
    assert got["worker"]["off"] is True
    # on again: the mode is back, and both threads are recorded
    assert got["on_main"] is True and got["worker"]["on"] is True
    assert [(r["name"], r["tid"]) for r in got["on_rows"]] == [
        ("aten::ones", got["main"]), ("aten::zeros", got["worker"]["tid"]), ("aten::add_", got["worker"]["tid"])]
    # switched from another thread: the main thread follows at its next bytecode
    assert got["off_elsewhere"] is True and got["on_elsewhere"] is True and got["elsewhere_rows"] == ["aten::ones"]
    assert got["left"] is True
    # put back beneath the program's own mode, taken off from under it; its operators recorded meanwhile
    assert got["stack"] == [True, False] and got["under_mine"] is True
    assert got["inside_mine"] == ["aten::ones"]
    # switched on inside a backward pass: the mode is back once the pass is over
    assert got["after_backward"] is True and got["after_backward_rows"] == ["aten::ones"] and got["failed"] == 0


def test_a_switch_inside_a_guard_waits_for_its_end(results: dict[str, Any]) -> None:
    got = results["a_switch_inside_a_guard_waits_for_its_end"]
    # put back inside a guard that restores the thread's keys at its end, the mode would lose the Python
    # key there and be skipped (with every mode entered after it); taken off inside, the key would come
    # back with no mode, and torch.zeros fail inside torch. Either move waits for the guard's end.
    assert got["on_inside"] == [False, False] and got["on_after"] == [True, True]
    assert got["mine_seen"] == 1 and got["rows"] == ["aten::ones"]
    assert got["off_inside"] == [True, True] and got["off_after"] == [False, False]
    assert got["tensor"] == [1, 2] and got["failed"] == 0


def test_a_switch_inside_inference_mode_happens_at_once(results: dict[str, Any]) -> None:
    """torch.inference_mode entered through its Python class is followed: the mode moves inside it, and
    at its end it is put back where it was at the entry, so stack and keys agree, then moved as wanted."""
    got = results["a_switch_inside_inference_mode_happens_at_once"]
    assert got["off_inside"] == [False, False]  # off at once, inside the guard
    assert got["on_nested"] == [True, True] and got["off_after_nested"] == [False, False]
    assert got["off_after"] == [False, False]
    assert got["on_inside"] == [True, True] and got["on_after"] == [True, True]
    assert got["mine_seen"] == 1 and got["mine_seen_on"] == 2  # the program's own modes still see its operators
    # recorded: ones(1), ones(3) in the nested guard, ones(6) and ones(7) after the last switch, and tensor()
    assert got["rows"] == ["aten::ones"] * 4 + ["aten::lift_fresh"]
    assert got["tensor"] == [1, 2] and got["failed"] == 0 and got["said"] == []


def test_sequence_numbers_link_backward_calls_to_forward_ones(results: dict[str, Any]) -> None:
    got = results["sequence_numbers_link_backward_calls_to_forward_ones"]
    fwd = [(r["name"], r["seq"]) for r in got["forward"]]
    assert fwd[:4] == [("aten::ones", None), ("aten::mul", got["y"]), ("aten::zeros", None), ("aten::ones", None)]
    assert fwd[4:] == [("aten::mul", got["vmul"]), ("aten::sum", got["v"])]
    bwd = {(r["name"], r["seq"]) for r in got["backward"]}
    assert ("aten::expand", got["v"]) in bwd  # SumBackward0 runs as expand
    assert {s for n, s in bwd if n == "aten::mul"} >= {got["vmul"], got["y"]}


def test_a_failing_recorder_never_breaks_the_program(results: dict[str, Any]) -> None:
    got = results["a_failing_recorder_never_breaks_the_program"]
    assert got["r"] == [[2.0, 2.0], [2.0, 2.0]]
    assert "aten::add" not in got["names"] and "aten::ones" in got["names"]
    assert len(got["said"]) == 1 and "boom" in got["said"][0][1]  # said once
    # the rows of a signature that could not be encoded are counted as failed, the others delivered
    assert got["lost"] == [] and got["after"] == [[[10]]] and got["failed"] == 2 + 2


def test_signatures_past_the_limit_travel_with_their_rows(results: dict[str, Any]) -> None:
    got = results["signatures_past_the_limit_travel_with_their_rows"]
    assert [json.loads(r["out_shapes"]) for r in got["rows"]] == [[[5]], [[6]], [[7]]]
    assert got["new"] == {"signatures": 0, "uninterned": 3}


def test_a_forked_child_stops_recording(results: dict[str, Any]) -> None:
    got = results["a_forked_child_stops_recording"]
    assert got["child"] == [False, 0, 0]  # not recording, nothing kept, the mode taken off
    assert got["parent"] == 1 and got["stack"] == 1

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
from gpuscope.capture import torch_ops
said = []
rec = torch_ops.TorchOps(1000, lambda level, msg: said.append((level, msg)))
rec.install(torch)

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

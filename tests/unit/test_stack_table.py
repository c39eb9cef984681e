"""The process's table of interned Python frames and stacks (capture/python/stacks.py)."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

from gpuscope.capture.python.cuda_memory import _Code  # the stand-in the allocator's stacks use
from gpuscope.capture.python.stacks import StackTable

SOURCE = "def here():\n    import sys\n    return sys._getframe(0)\n"


def _frame_from(filename: str) -> FrameType:
    scope: dict[str, Any] = {}
    exec(compile(SOURCE, filename, "exec"), scope)  # noqa: S102  (the test's own source)
    frame: FrameType = scope["here"]()
    return frame


def test_the_same_function_in_two_files_is_two_frames() -> None:
    """Code objects of the same source compare equal whatever their file; each keeps its own file."""
    a, b = _frame_from("first.py"), _frame_from("second.py")
    assert a.f_code == b.f_code and a.f_code is not b.f_code  # what made them one frame before
    table = StackTable()
    fa, fb = table.frame(a.f_code, a.f_lineno), table.frame(b.f_code, b.f_lineno)
    assert fa != fb
    rows = {fid: (filename, line, name) for fid, filename, line, name in table.take()["cpu_frame"]}
    assert rows == {fa: ("first.py", 3, "here"), fb: ("second.py", 3, "here")}


def test_a_frame_is_interned_once_per_code_and_line() -> None:
    table = StackTable()
    frame = sys._getframe(0)
    first = table.frame(frame.f_code, 10)
    assert table.frame(frame.f_code, 10) == first and table.frame(frame.f_code, 11) != first
    assert len(table.take()["cpu_frame"]) == 2


def test_stand_ins_are_interned_by_what_they_name_and_not_kept_per_call() -> None:
    table = StackTable()
    ids = {table.frame(_Code("train.py", "step"), 7) for _ in range(1000)}
    assert len(ids) == 1 and len(table._codes) == 1
    assert table.frame(_Code("train.py", "other"), 7) not in ids


def test_a_stack_is_its_frames_from_the_outermost() -> None:
    table = StackTable()

    def inner() -> FrameType:
        return sys._getframe(0)

    frame = inner()
    nodes = [table.stack_of(frame) for _ in range(2)]  # from the same line: the same stack
    node = nodes[0]
    assert nodes[1] == node
    rows = table.take()
    names = {fid: name for fid, _, _, name in rows["cpu_frame"]}
    parents = {n: (parent, fid) for n, parent, fid in rows["cpu_stack"]}
    chain = []
    while node:
        node, fid = parents[node]
        chain.append(names[fid])
    assert chain[:2] == ["inner", "test_a_stack_is_its_frames_from_the_outermost"]

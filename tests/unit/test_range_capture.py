"""gpuscope's own ranges inside a process: the recorder, the annotation API, the nvtx package."""

from __future__ import annotations

import threading
import types

import pytest

from gpuscope import annotation
from gpuscope.capture.python import nvtx_python
from gpuscope.capture.python.ranges import RangeRecorder


@pytest.fixture
def recorder():
    r = RangeRecorder(clock_offset_ns=1_000)
    saved = annotation._backend
    annotation.use_recorder(r)
    yield r
    annotation._backend = saved


def _by_name(rows):
    return {row[5]: row for row in rows}


def test_nesting_threads_and_misuse(recorder: RangeRecorder) -> None:
    with annotation.annotate("outer", color="red", domain="d", category="c"):
        annotation.push_range("inner")
        annotation.pop_range()
    annotation.pop_range()  # nothing open: counted, ignored
    rid = annotation.start_range("async")
    t = threading.Thread(target=annotation.end_range, args=(rid,))
    t.start()
    t.join()
    annotation.end_range(12345)  # unknown id: counted, ignored
    annotation.mark("here")
    rows = _by_name(recorder.take())
    outer, inner = rows["outer"], rows["inner"]
    assert outer[0] <= inner[0] <= inner[1] <= outer[1]
    assert (outer[4], outer[7], outer[8], outer[9]) == ("d", "gpuscope", "c", "red")
    assert outer[2] == threading.get_native_id() and outer[6] == "range"
    assert rows["here"][6] == "mark" and rows["here"][0] == rows["here"][1]
    assert rows["async"][2] == threading.get_native_id()  # the thread that started it
    assert recorder.counts["unbalanced_pops"] == 1 and recorder.counts["unknown_ends"] == 1
    assert recorder.counts["ended_on_other_thread"] == 1
    assert recorder.take() == []


def test_ranges_open_at_exit_are_kept_without_end(recorder: RangeRecorder) -> None:
    annotation.push_range("never popped")
    annotation.start_range("never ended")
    rows = recorder.close_open()
    assert sorted(r[5] for r in rows) == ["never ended", "never popped"]
    assert all(r[1] is None and r[2] == threading.get_native_id() for r in rows)
    assert recorder.counts["open_at_exit"] == 2


def test_decorator_uses_the_function_name(recorder: RangeRecorder) -> None:
    @annotation.annotate(color="blue")
    def train_step(x: int) -> int:
        return x + 1

    assert train_step(1) == 2 and train_step.__name__ == "train_step"
    (row,) = recorder.take()
    assert row[5] == "train_step" and row[9] == "blue"


def test_times_are_on_the_session_clock(recorder: RangeRecorder) -> None:
    import time

    before = time.monotonic_ns() + 1_000
    annotation.mark("t")
    after = time.monotonic_ns() + 1_000
    (row,) = recorder.take()
    assert before <= row[0] <= after


def test_nvtx_package_calls_go_to_the_recorder(recorder: RangeRecorder) -> None:
    fake = types.ModuleType("nvtx")
    for name in ("annotate", "push_range", "pop_range", "start_range", "end_range", "mark"):
        setattr(fake, name, None)
    nvtx_python.install(fake, recorder)
    with fake.annotate("pkg"):
        fake.push_range("p", domain="dom")
        fake.pop_range(domain="dom")
    handle = fake.start_range("se")
    fake.end_range(handle)
    rows = _by_name(recorder.take())
    assert set(rows) == {"pkg", "p", "se"}
    assert {r[7] for r in rows.values()} == {"nvtx-python"} and rows["p"][4] == "dom"


def test_without_a_tool_annotations_cost_only_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    monkeypatch.setattr(annotation, "_backend", None)
    with annotation.annotate("x"):
        pass
    assert type(annotation._backend) is annotation._Backend and not annotation._backend.active


def test_anchors_come_right_before_both_ends_of_a_range() -> None:
    import time

    from gpuscope.capture.python.ranges import RangeRecorder

    rec = RangeRecorder()
    anchors: list[int] = []
    rec.anchor = lambda: anchors.append(time.monotonic_ns())
    rec.push("fwd")
    rec.pop()
    rid = rec.start("bwd")
    rec.end(rid)
    rec.on = False
    rec.push("off")  # no anchors while collection is off
    rec.pop()
    rows = rec.take()
    assert len(anchors) == 4 and len(rows) == 2
    for (start, end, *_), (a, b) in zip(rows, [anchors[:2], anchors[2:]]):
        assert a <= start <= b <= end  # each anchor right before the time it marks
    rec.mark("step", category="step")  # step marks are anchored even with collection off
    assert len(anchors) == 5

"""The Python sampler keeps no frame from one sample to the next: a frame holds its locals, so a
frame kept after its function returned would keep them alive (torch.compile's CUDA-graph trees
failed their memory-pool check on a GPU that way, and tensors were freed late). Stacks are still
carried over from sample to sample where they did not change."""

from __future__ import annotations

import gc
import sys
import threading
import weakref

from gpuscope.capture.python.sampler import Sampler


class Payload:
    pass


def test_a_returned_functions_locals_are_freed_without_waiting_for_the_next_sample() -> None:
    s = Sampler(1.0, 0)  # sampled by hand below
    inside, release = threading.Event(), threading.Event()
    refs: list[weakref.ref[Payload]] = []

    def holds() -> None:
        payload = Payload()
        refs.append(weakref.ref(payload))
        inside.set()
        release.wait(5)

    def worker() -> None:
        holds()
        done.wait(5)  # stays alive, in another frame, after holds() returned

    done = threading.Event()
    t = threading.Thread(target=worker)
    t.start()
    assert inside.wait(5)
    s._sample(threading.get_ident())  # the worker's stack, with holds() and its payload, is sampled
    release.set()
    while refs[0]() is not None and t.is_alive():
        gc.collect()
        if not any(f.f_code is holds.__code__ for f in _stack_of(t)):
            break
    gc.collect()
    try:
        assert refs[0]() is None  # freed when holds() returned, though no sample came since
    finally:
        done.set()
        t.join()


def _stack_of(t: threading.Thread) -> list[object]:
    frame = sys._current_frames().get(t.ident or 0)
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


def test_unchanged_callers_keep_their_stack_node_between_samples() -> None:
    s = Sampler(1.0, 0)
    inside, release = threading.Event(), threading.Event()

    def leaf() -> None:
        inside.set()
        release.wait(5)

    t = threading.Thread(target=leaf)
    t.start()
    assert inside.wait(5)
    me = threading.get_ident()
    s._sample(me)
    s._sample(me)
    release.set()
    t.join()
    rows = s.take()["cpu_sample"]
    nodes = [row[2] for row in rows if row[1] == t.native_id]
    assert len(nodes) == 2 and nodes[0] == nodes[1] and nodes[0] != 0

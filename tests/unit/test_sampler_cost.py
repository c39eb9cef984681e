"""What the Python sampler and the operator recorder report of their own cost, for the overhead line:
the sampler's wall time holding the GIL, and the per-operator costs measured in the process."""

from __future__ import annotations

import threading
import time

from gpuscope.capture.python import hook_cost
from gpuscope.capture.python.sampler import Sampler
from gpuscope.capture.python.torch_ops import TorchOps


def test_sampler_counts_the_time_it_held_the_gil() -> None:
    stop = threading.Event()

    def busy() -> None:  # Python that needs the GIL, so every sample takes it from this thread
        x = 0
        while not stop.is_set():
            x += 1

    t = threading.Thread(target=busy)
    t.start()
    s = Sampler(0.002, 0)
    s.start()
    time.sleep(0.3)
    s.stop()
    stop.set()
    t.join()
    assert s.samples > 10
    assert 0 < s.held_ns < 300_000_000  # held for part of the run, not all of it
    assert s.busy_ns > 0  # its CPU time, as before
    assert s.take()["cpu_sample"]


def test_sampler_paused_holds_nothing() -> None:
    s = Sampler(0.002, 0)
    s.set_collecting(False)
    s.start()
    time.sleep(0.05)
    s.stop()
    assert s.samples == 0 and s.held_ns == 0


def test_operator_costs_are_measured() -> None:
    import torch

    recorded, passed = hook_cost.operator_costs_ns(torch, TorchOps, ops=40)
    # recording reads shapes, dtypes and two clocks on top of entering Python: never cheaper than passing
    assert recorded > 0 and passed >= 0
    assert recorded + 2_000 >= passed  # within the noise of a shared machine

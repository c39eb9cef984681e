"""The overhead probe of a program whose steps nothing marks, paced by its CUDA graph launches.

The step probe (window.py) needs step marks: PyTorch's optimizer, ``gpuscope.step()``, or the
outermost module calls. A JAX program has none of them, but XLA launches its work as CUDA graphs,
and gpuscope's C subscriber counts every graph launch whether collection is on or not
(capture/cupti/graph_launches.py). The pace of those launches is the program's pace: where it
holds steady, collection is switched off for a stretch and on again, and the counter is read every
:data:`POLL_NS` throughout, so that the report compares the time per launch with collection off
against the stretches just before and after it (analysis/steps/probe.py).

A cycle starts once the launches of the last stretch are at least :data:`MIN_LAUNCHES` and its two
halves kept the same pace (within :data:`STEADY`), at least the probe gap after the last cycle
ended, and only while no step mark has come (a program with steps gets the step probe instead).
Each cycle is kept as its polls, ``[time_ns, launches]``, with the indices of the polls taken where
collection went off and came back on; the process's ``capture`` row carries them.

Opt-in (``GPUSCOPE_PACE_PROBE=1``): on a JAX loop of 0.3-0.5 s timed, the runs with it were slower
than the same code without it in most rounds, a cost not yet explained (bench/results/real_clients.md).

Runs inside the profiled process: standard library only. One thread polls, asleep in between; the
switch runs on it, under the capture window's lock.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .window import CaptureWindow

PACE_ENV = "GPUSCOPE_PACE_PROBE"  # "1": the probe paced by graph launches runs; "poll": polls only (for measuring)
POLL_NS = 10_000_000  # the launch counter read this often
STRETCH_POLLS = 6  # polls in each stretch: before the probe, with collection off, after it
MIN_LAUNCHES = 24  # launches the stretch before a probe needs (a steady stream, not a few stray graphs)
STEADY = 0.3  # its halves' launch counts agree within this share
IDLE_POLLS = 10  # until the first graph launch, one poll in this many


def steady(polls: list[tuple[int, int]]) -> bool:
    """Whether ``polls`` (``STRETCH_POLLS + 1`` readings, oldest first) show a steady stream of
    launches: :data:`MIN_LAUNCHES` at least, the two halves within :data:`STEADY` of each other."""
    if len(polls) < STRETCH_POLLS + 1:
        return False
    mid = len(polls) // 2
    first, second = polls[mid][1] - polls[0][1], polls[-1][1] - polls[mid][1]
    if first + second < MIN_LAUNCHES or min(first, second) <= 0:
        return False
    return abs(first - second) <= STEADY * max(first, second)


class PaceProbe:
    """Watches the launch counter ``count`` and runs probe cycles through ``window``."""

    def __init__(self, window: CaptureWindow, count: Callable[[], int | None]) -> None:
        self.window = window
        self.count = count
        self.cycles: list[dict[str, Any]] = []  # each: {"polls": [[t, n], ...], "off": i, "on": j} (taken())
        self.poll_only = os.environ.get(PACE_ENV) == "poll"  # the counter read, collection never switched (for measuring)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the polling thread (named as gpuscope's, so the sampler leaves it out)."""
        self._thread = threading.Thread(target=self._run, name="gpuscope-capture", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _poll(self) -> tuple[int, int] | None:
        n = self.count()
        return None if n is None else (self.window.now_ns(), int(n))

    def _sleep(self, polls: int = 1) -> bool:
        """Sleep ``polls`` polls; False once stopped or once the program marks steps (the step probe's turn)."""
        return not self._stop.wait(polls * POLL_NS / 1e9) and self.window.steps == 0

    def _run(self) -> None:
        try:
            self._watch()
        except Exception:  # noqa: BLE001  (a probe that fails measures nothing; the program runs on)
            self.window.pace_switch(True, -1)  # collection back on if it was off

    def _watch(self) -> None:
        polls: list[tuple[int, int]] = []
        next_ns = 0
        idle = IDLE_POLLS  # before the first graph launch, the counter is read less often
        while self._sleep(idle):
            got = self._poll()
            if got is None:
                return
            if got[1] == 0:
                continue
            idle = 1
            polls = [*polls[-STRETCH_POLLS:], got]
            if got[0] >= next_ns and steady(polls) and self.window.on and not self.poll_only:
                cycle = self._cycle(polls)
                if cycle is not None:
                    next_ns = cycle["polls"][-1][0] + self.window.probe_gap_ns
                polls = []

    def _cycle(self, before: list[tuple[int, int]]) -> dict[str, Any] | None:
        """Collection off for a stretch, then on, polling throughout; None if it could not go off."""
        window = self.window
        got = self._poll()
        if got is None or not window.pace_switch(False, got[1]):
            return None
        polls = [*before, got]
        off = len(polls) - 1
        cycle: dict[str, Any] = {"polls": polls, "off": off, "on": len(polls) + STRETCH_POLLS}
        self.cycles.append(cycle)  # kept if the process ends in it (the stretches then shorter)
        self._stretch(polls)
        got = self._poll()
        window.pace_switch(True, got[1] if got is not None else polls[-1][1])
        if got is not None:
            polls.append(got)
        cycle["on"] = len(polls) - 1
        self._stretch(polls)
        return cycle

    def _stretch(self, polls: list[tuple[int, int]]) -> None:
        """Poll for one stretch (:data:`STRETCH_POLLS` polls), appending to ``polls``; less once stopped."""
        for _ in range(STRETCH_POLLS):
            if self._stop.wait(POLL_NS / 1e9):
                return
            got = self._poll()
            if got is not None:
                polls.append(got)

    def taken(self) -> list[dict[str, Any]]:
        """The cycles so far, copied (one may still be filling in): ``{"polls": [[t, n], ...], "off": i,
        "on": j}``, ``on`` past the last poll where the process ended with collection off."""
        return [{"polls": [list(p) for p in list(c["polls"])], "off": c["off"], "on": c["on"]} for c in list(self.cycles)]

"""When ``--trace torch-shapes`` records PyTorch operators: a few sample windows, not the whole run.

Recording every operator costs about 15 µs per operator on a slow CPU (bench/RESULTS.md), too much
to be on by default. The work of the kernels that carry most GPU time (GEMMs, convolutions,
attention) follows from the shapes of the operators that launched them, and a training or
inference loop launches the same kernels with the same shapes iteration after iteration. So the
recorder records operators for a short window of steady iterations, and the analysis carries their
work to every other launch of the same kernel configuration (analysis/roofline/work/carried.py).

The window, as a small state machine (:class:`OpSample`):

- *waiting*: the recorder's dispatch mode is on the threads' stacks and passes operators through,
  counting them. A window opens at the end of step ``skip_steps`` (step marks as ``step_sum`` counts
  them: ``gpuscope.step()``, else optimizer steps), the first steps being warm-up; or, while no step
  mark has been seen, once ``skip_ops`` operators have passed (the program's set-up: building the
  model, loading the data), or at the first operator ``skip_s`` seconds after torch was imported
  (a program of few, long operators).
- *recording*: every operator is recorded. With step marks the window closes at the end of
  ``steps`` whole steps. Without them it closes once the operators repeat: at least ``min_ops``
  operators, and twice as many as it took to see the last new signature (operator, shapes, dtypes,
  arguments), so that the loop's last new operator was followed by as many operators again, all
  seen before. A window never records more than ``max_ops`` operators.
- *resting*: the mode leaves the main thread's stack, and every other thread takes it off its own
  stack at its next Python event (only a thread can change its own stack): operators cost what
  they cost without gpuscope. Threads started from now on do not get the mode.

Two more windows may follow, on the main thread only (where the mode can be put back; autograd's
threads follow it): where the first window closed before any step mark and step marks appear later
(the window saw the set-up, not the loop), a window opens at the next step mark; and ``later_s``
seconds after the first window, a second sample opens (at the next step mark, or at once without
steps) to see kernels that appear later. At most ``windows`` windows in all.

Where launch anchors are on (``--trace cuda`` without ``cuda-api``), the recorder makes one right
before each time it reads for a sampled operator and for a window's ends, so that the GPU work an
operator launched is placed inside it even when the GPU ran it much later (trace/launch.py): about
3 µs each on a GPU host, two per sampled operator, nothing outside the windows.

Windows follow the capture range: nothing is counted or recorded outside a capture window, and a
window that the capture range closes ends there (one that recorded too little waits for the next
capture window). Each window becomes a ``torch_op_window`` row (sent with no end when it opens, so
that a killed process still has it). Standard library only; nothing here raises into the program.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, fields
from typing import Callable

WAITING, RECORDING, RESTING, FINISHED = "waiting", "recording", "resting", "finished"
POLICY_ENV = "GPUSCOPE_TORCH_SHAPES"  # overrides of the policy: "skip_ops=100,later_s=0"
NEVER = 1 << 62  # an operator count never reached

Emit = Callable[[int, "int | None", int, str], None]  # a torch_op_window row: start, end, operators, reason


@dataclass(frozen=True)
class SamplePolicy:
    """Where the sample windows lie (see the module docstring)."""

    skip_ops: int = 2_000  # operators passed through before a window opens, while no step mark was seen
    skip_s: float = 10.0  # ... or seconds since the recorder was installed (programs of few, long operators)
    skip_steps: int = 1  # the first window opens at the end of this step
    steps: int = 2  # whole steps a window records, where steps are marked
    min_ops: int = 1_000  # without step marks: the least a window records
    max_ops: int = 50_000  # the most any window records
    later_s: float = 60.0  # the later sample opens this long after the first window closed (0: none)
    windows: int = 3  # windows in all

    @classmethod
    def parse(cls, text: str | None) -> SamplePolicy:
        """Return the default policy with the overrides of ``text`` (``skip_ops=100,later_s=0``); raise
        ValueError with what is wrong."""
        known = {f.name: f.type for f in fields(cls)}
        values: dict[str, float | int] = {}
        for item in (text or "").split(","):
            if not item.strip():
                continue
            key, _, value = item.partition("=")
            key = key.strip()
            if key not in known:
                raise ValueError(f"{POLICY_ENV}: unknown setting {key!r}; choose from {', '.join(known)}")
            try:
                number = float(value) if known[key] == "float" else int(value)
            except ValueError:
                raise ValueError(f"{POLICY_ENV}: {key} needs a number, not {value.strip()!r}") from None
            if number < 0:
                raise ValueError(f"{POLICY_ENV}: {key} can not be negative")
            values[key] = number
        return cls(**values)  # type: ignore[arg-type]


def policy_from_env(diag: Callable[[str, str], None]) -> SamplePolicy:
    """Return the policy that ``GPUSCOPE_TORCH_SHAPES`` sets (the default where it is unset); a wrong value
    is said through ``diag`` and the default used."""
    try:
        return SamplePolicy.parse(os.environ.get(POLICY_ENV))
    except ValueError as exc:
        diag("warning", f"{exc}; the default sample windows are used")
        return SamplePolicy()


class OpSample:
    """The sample windows of one process's operator recorder.

    The recorder calls :meth:`waited_op` for each operator it passes through while *waiting*, and
    :meth:`at_limit` when its count of recorded operators reaches :attr:`limit`; the capture range
    calls :meth:`set_capture` and :meth:`step_mark`. ``on_change`` is called (outside the lock) after
    every change of :attr:`state`, for the recorder to move its dispatch mode.
    """

    def __init__(self, policy: SamplePolicy, now_ns: Callable[[], int], ops_now: Callable[[], int],
                 emit: Emit) -> None:
        self.policy = policy
        self.now_ns = now_ns
        self.ops_now = ops_now  # operators recorded so far (the recorder's count)
        self.emit = emit
        self.on_change: Callable[[], None] = lambda: None
        self.state = WAITING
        self.capture = True  # inside a capture window
        self.waited = 0  # operators passed through while waiting (counted without the lock)
        self.open_at = policy.skip_ops  # the waited count that opens a window without step marks
        self.open_time = time.monotonic_ns() + int(policy.skip_s * 1e9)  # ... or the time that does
        self.limit = NEVER  # the recorded count at which :meth:`at_limit` decides
        self.steps_seen = 0  # step marks seen inside capture windows
        self.windows: list[tuple[int, int, int, str]] = []  # closed windows: start, end, operators, reason
        self.timer: threading.Timer | None = None
        self._counted = 0  # windows that count towards ``policy.windows`` (not those cut short)
        self._window_steps = 0
        self._last_new = 0  # the window's operator index of its last new signature
        self._step_windows = 0  # windows that saw a step mark
        self._ops_at_open = 0
        self._opened_at = 0
        self._open_reason = ""
        self._later_planned = False
        self._lock = threading.RLock()

    # -- events --------------------------------------------------------------------------------
    def waited_op(self) -> bool:
        """An operator passed through while waiting; return whether a window opened for it."""
        self.waited += 1
        if self.waited < self.open_at and time.monotonic_ns() < self.open_time:
            return False
        with self._lock:
            n = self.waited
            by_count = n >= self.open_at
            if self.state != WAITING or not self.capture or not (by_count or time.monotonic_ns() >= self.open_time):
                return False
            reason = f"after {n:,} operator{'s' * (n != 1)}" if by_count else f"after {self.policy.skip_s:g} s"
            self._open(self.now_ns(), "later sample" if self._counted else reason)
        self.on_change()
        return True

    def step_mark(self, t: int) -> None:
        """A step ended at ``t`` (one that ``step_sum`` counts)."""
        with self._lock:
            if not self.capture or self.state == FINISHED:
                return
            self.steps_seen += 1
            self.open_at = self.open_time = NEVER  # from now on windows open at step marks
            before = self.state
            if self.state == WAITING and (self._counted or self.steps_seen >= self.policy.skip_steps):
                self._open(t, f"end of step {self.steps_seen}")
            elif self.state == RECORDING:
                self._window_steps += 1
                if self._window_steps >= self.policy.steps:
                    self._close(t, f"end of step {self.steps_seen}")
                else:
                    self._set_limit()
            elif self.state == RESTING and self._step_windows == 0 and self._counted < self.policy.windows:
                self._open(t, f"end of step {self.steps_seen} (steps began after the first sample)")
            changed = self.state != before
        if changed:
            self.on_change()

    def new_signature(self) -> None:
        """The operator being recorded has a signature not seen before."""
        with self._lock:
            if self.state == RECORDING:
                self._last_new = self.ops_now() - self._ops_at_open
                self._set_limit()

    def at_limit(self) -> None:
        """The recorded count reached :attr:`limit`: close the window if its budget is spent or the
        operators repeat."""
        with self._lock:
            if self.state != RECORDING or self.ops_now() < self.limit:
                return
            n = self.ops_now() - self._ops_at_open
            self._close(self.now_ns(), f"the budget of {self.policy.max_ops:,} operators" if n >= self.policy.max_ops
                        else "operators repeating")
        self.on_change()

    def set_capture(self, on: bool) -> None:
        """The capture range turned collection on or off."""
        with self._lock:
            self.capture = on
            if on or self.state != RECORDING:
                return
            enough = self._window_steps > 0 or self.ops_now() - self._ops_at_open >= self.policy.min_ops
            self._close(self.now_ns(), "end of the capture window", again=not enough)
        self.on_change()

    def later(self) -> None:
        """The later sample is due: wait for its window (the next step mark, or the next operator)."""
        with self._lock:
            if self.state != RESTING or self._counted >= self.policy.windows:
                return
            self.state = WAITING
            self.open_at = self.waited + 1 if self.steps_seen == 0 else NEVER
        self.on_change()

    def finish(self) -> None:
        """The process ends: close an open window and plan nothing more."""
        with self._lock:
            if self.state == RECORDING:
                self._close(self.now_ns(), "process end")
            self.state = FINISHED
            if self.timer is not None:
                self.timer.cancel()

    def summary(self) -> dict[str, object]:
        """What the sampler did, for the recorder's ``collector`` row."""
        return {"state": self.state, "windows": len(self.windows), "waited_ops": self.waited,
                "steps_seen": self.steps_seen, "window_ops": [w[2] for w in self.windows]}

    # -- transitions (under the lock) ----------------------------------------------------------
    def _open(self, t: int, reason: str) -> None:
        self.state = RECORDING
        self._ops_at_open = self.ops_now()
        self._opened_at, self._open_reason = t, reason
        self._window_steps = 0
        self._last_new = 0
        self._set_limit()
        self.emit(t, None, 0, reason)

    def _set_limit(self) -> None:
        p = self.policy
        budget = p.max_ops
        if self.steps_seen == 0:  # no steps: until the operators repeat
            budget = min(budget, max(p.min_ops, 2 * (self._last_new + 1)))
        self.limit = self._ops_at_open + max(budget, 1)

    def _close(self, t: int, why: str, again: bool = False) -> None:
        ops = self.ops_now() - self._ops_at_open
        reason = f"{self._open_reason} to {why}"
        self.emit(self._opened_at, t, ops, reason)
        self.windows.append((self._opened_at, t, ops, reason))
        self._step_windows += self._window_steps > 0
        self.limit = NEVER
        if again:  # the capture window cut it short: the next capture window has another
            self.state = WAITING
            self.open_at = self.waited + 1 if self.steps_seen == 0 else NEVER
            return
        self._counted += 1
        self.state = RESTING if self._counted < self.policy.windows else FINISHED
        if self.state == RESTING and not self._later_planned and self.policy.later_s > 0:
            self._later_planned = True
            timer = threading.Timer(self.policy.later_s, self.later)
            timer.name = "gpuscope-ops"
            timer.daemon = True
            timer.start()
            self.timer = timer

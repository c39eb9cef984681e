"""When collection is on inside a profiled process: the capture range as a small state machine.

Collection is on when the capture range *wants* it (its trigger: a step count, an open NVTX range,
cudaProfilerStart, gpuscope.start()), the ``--delay`` has passed (*armed*), and ``--duration`` has
not cut the current stretch short (*capped*; reset when the trigger lets go). Each stretch of
collection becomes a row of the report's ``capture_window`` table: sent with no end when it opens
(so a killed process still has it) and again with its end when it closes. The reason names what
opened and what closed it (``step 10 to step 20``).

The *overhead probe*: in a run recorded whole, with steps, collection is switched off for
:data:`PROBE_STEPS` steps at the end of step :data:`PROBE_FIRST` and every :data:`PROBE_EVERY` steps
after it, at least :data:`PROBE_MIN_GAP_NS` after the last probe ended. Step marks are kept, so
the report times those steps without the profiler beside the recorded ones (analysis/steps/probe.py).
The windows around a probe are ordinary capture windows whose
reasons name it; the one after a probe opens once the collectors are back on, so that the step
that paid for switching them on is in neither group. When the steps stop during a probe (the loop
ended), a timer ends the probe once no step mark has come for :data:`PROBE_PATIENCE` times the last
step (at least :data:`PROBE_MIN_WAIT_NS`), so what the program does after its loop is recorded from
then on. One thread watches every probe of the process (started at the first): starting a thread
per probe cost the program's step 0.12 ms each time on the 2-core CPU machine.
Where nothing marks steps but the program launches CUDA graphs (JAX), pace_probe.py can run the
probe by time instead (opt-in: ``GPUSCOPE_PACE_PROBE=1``), paced by the graph launches gpuscope
counts in C.

Events arrive on any thread (the program's, CUPTI's callback, a timer); a lock orders them. The
switch that turns collectors on and off runs under that lock, on the thread of the event, so a
start takes effect before the program's next launch.

Runs inside the profiled process: standard library only.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from ..capture_range import CaptureSpec, _seconds

Switch = Callable[[bool], None]  # turn collection on (True) or off
Emit = Callable[[int, "int | None", str], None]  # a capture_window row: start_ns, end_ns, reason
MAX_NAMES_SEEN = 12
PROBE_FIRST = 10  # the first probe starts at the end of this step (warm-up is over by then)
PROBE_EVERY = 25  # and again every this many steps,
PROBE_MIN_GAP_NS = 2_000_000_000  # but no sooner than this after the last one ended: switching collection
# off and on costs the program time of its own (the report says how much), which short steps (an
# inference loop's, a token's) would otherwise pay every few milliseconds
PROBE_STEPS = 3  # steps with collection off each time: the first pays for the switch, the others are timed;
PROBE_MIN_OFF_NS = 20_000_000  # more where steps are short, so that the timed ones last this long together
PROBE_MAX_STEPS = 25
PROBE_OPENS = "end of overhead probe"
PROBE_PATIENCE = 2  # a probe ends when no step mark came for this many times the last step
PROBE_MIN_WAIT_NS = 20_000_000  # and at least this long
PROBE_CLOSES = "overhead probe"
PACE_LAUNCH = "at CUDA graph launch"  # the paced probe's reasons (pace_probe.py): "overhead probe at CUDA graph launch N"
STEP_SOURCES = {"module": 0, "torch": 1, "gpuscope": 2}  # what counts steps, worst first


PROBE_GAP_ENV = "GPUSCOPE_PROBE_GAP_S"  # seconds between probes at least (0: every PROBE_EVERY steps)
PROBE_MIN_OFF_ENV = "GPUSCOPE_PROBE_MIN_OFF_MS"  # milliseconds a probe's timed steps last at least (0: PROBE_STEPS)


def _env_ns(name: str, unit_ns: float, default: int) -> int:
    """``$name`` (a number of ``unit_ns``) in ns, or ``default`` where it is unset or not a number."""
    try:
        return max(0, int(float(os.environ[name]) * unit_ns))
    except (KeyError, ValueError, OverflowError):
        return default


class CaptureWindow:
    """Turns collection on and off by the capture spec, and records each stretch of collection."""

    def __init__(self, spec: CaptureSpec, now_ns: Callable[[], int], switch: Switch, emit: Emit) -> None:
        self.spec = spec
        self.now_ns = now_ns
        self.switch = switch
        self.emit = emit
        self.on = False
        self.windows = 0
        self.steps = 0
        self.step_source = "module"  # optimizer steps replace module calls, gpuscope.step() marks both, once seen
        self.nvtx_opened = 0
        self.names_seen: list[str] = []
        self.profiler_starts = 0
        self.profiler_watched = False  # cudaProfilerStart/Stop can be seen (CUPTI's callback API)
        self.api_starts = 0
        self.ignored_api_calls = 0
        self._armed = spec.delay_ns == 0
        self._wanted = spec.range == "none" and spec.first_step is None
        self._capped = False
        self._record = spec.limited  # the whole run: no rows unless gpuscope.stop() pauses it
        self._opened_at = 0
        self._open_reason = ""
        self._nvtx_depth = 0
        self._lock = threading.RLock()
        self._timers: list[threading.Timer] = []
        self._duration_timer: threading.Timer | None = None
        self._probe = spec.probe and not spec.limited
        self._probe_until = 0  # the step at whose end the running probe ends (0: none running)
        self._next_probe_step = PROBE_FIRST  # the next probe starts at the end of this step or a later one,
        self._next_probe_ns = 0  # once this time has come (the last probe's end and the gap)
        self.probe_gap_ns = _env_ns(PROBE_GAP_ENV, 1e9, PROBE_MIN_GAP_NS)
        self.probe_min_off_ns = _env_ns(PROBE_MIN_OFF_ENV, 1e6, PROBE_MIN_OFF_NS)
        self._last_mark = 0  # the time of the last step mark, and the step before it
        self._last_mark_local = 0
        self._last_step_ns = 0
        self.probes = 0
        self.pace: Any = None  # the paced probe (pace_probe.PaceProbe), where graph launches are counted
        self._pace_off = False  # the paced probe has collection off now
        self._finished = False
        self._probe_started = threading.Condition(self._lock)  # wakes the watcher when a probe starts
        self._watcher_pid = 0  # the process whose watcher thread runs (a forked child starts its own)

    # -- lifecycle ---------------------------------------------------------------------------
    def begin(self) -> None:
        """Set the state at process start; start the delay timer."""
        with self._lock:
            if self.spec.first_step == 1:
                self._wanted = True
            if not self._armed:
                origin = self.spec.origin_ns if self.spec.origin_ns is not None else time.monotonic_ns()
                left = origin + self.spec.delay_ns - time.monotonic_ns()
                if left <= 0:
                    self._armed = True
                else:
                    self._timer(left, self._arm)
            reason = "step 1" if self.spec.first_step == 1 else "process start"
            self._update(self.now_ns(), reason, reason)

    def finish(self) -> dict[str, Any]:
        """Close the open window at process end; return what happened, for the report."""
        with self._lock:
            self._finished = True
            if self.pace is not None:
                self.pace.stop()
            for t in self._timers:
                t.cancel()
            if self.on:
                self._close(self.now_ns(), "process end")
            return {
                "capture": self.spec.describe(),
                "windows": self.windows,
                "armed": self._armed,
                "steps": self.steps,
                "step_source": self.step_source,
                "nvtx_opened": self.nvtx_opened,
                "names_seen": list(self.names_seen),
                "profiler_starts": self.profiler_starts,
                "profiler_watched": self.profiler_watched,
                "api_starts": self.api_starts,
                "ignored_api_calls": self.ignored_api_calls,
                "probes": self.probes,
                "probe_steps": PROBE_STEPS,
                **({"pace_probes": self.pace.taken()} if self.pace is not None and self.pace.cycles else {}),
            }

    # -- events ------------------------------------------------------------------------------
    def step_mark(self, source: str, t: int) -> None:
        """A step ended at ``t`` (a mark of ``gpuscope.step()``, of PyTorch's optimizer step, or the
        end of an outermost module call: ``module``).

        Counted as step_sum counts steps: gpuscope.step() marks when the program makes them (from
        the first one on), otherwise optimizer steps. A program with neither (an inference loop,
        ``generate``) is counted by its outermost module calls, so that the overhead probe times its
        iterations too; the first mark of a better source starts the count again.
        """
        if source == "module" and self.spec.first_step is not None:
            return  # --steps counts the program's own step marks, as documented
        with self._lock:
            rank = STEP_SOURCES.get(source, -1)
            current = STEP_SOURCES.get(self.step_source, -1)
            if rank < current:
                return
            if rank > current:
                self.step_source, self.steps = source, 0
                if self._probe_until:  # a probe counted in the source just replaced ends now
                    self._end_probe(t, f"{PROBE_OPENS} at a {source} step mark")
            self.steps += 1
            if self._probe:
                self._probe_step(t)
            first, last = self.spec.first_step, self.spec.last_step
            if first is None:
                return
            n = self.steps
            self._wanted = first - 1 <= n and (last is None or n < last)
            self._update(t, f"step {first}", f"step {n}")

    def range_opened(self, name: str, domain: str, source: str = "") -> None:
        """An NVTX-style range opened (pushed or started) on any thread; ``source`` as in nvtx_range
        (the names of PyTorch's ranges are not kept as hints)."""
        if not self._matches(name, domain):
            if source != "torch" and len(self.names_seen) < MAX_NAMES_SEEN and name not in self.names_seen:
                self.names_seen.append(name)
            return
        with self._lock:
            self.nvtx_opened += 1
            self._nvtx_depth += 1
            self._wanted = True
            label = self.spec.nvtx_label()
            self._update(self.now_ns(), f"NVTX range '{label}'", f"end of NVTX range '{label}'")

    def range_closed(self, name: str, domain: str) -> None:
        """An NVTX-style range closed (popped or ended)."""
        if not self._matches(name, domain):
            return
        with self._lock:
            self._nvtx_depth = max(self._nvtx_depth - 1, 0)
            self._wanted = self._nvtx_depth > 0
            label = self.spec.nvtx_label()
            self._update(self.now_ns(), f"NVTX range '{label}'", f"end of NVTX range '{label}'")

    def profiler_api(self, name: str, correlation_id: int = 0) -> None:
        """cudaProfilerStart/Stop (or the driver's cuProfilerStart/Stop) was called."""
        with self._lock:
            start = name.endswith("Start")
            if self.spec.range != "cudaProfilerApi":
                return
            self.profiler_starts += start
            self._wanted = start
            self._update(self.now_ns(), name, name)

    def api(self, start: bool) -> bool:
        """gpuscope.start() (``start``) or gpuscope.stop(); return whether collection is on after it.

        They drive collection with ``--capture-range=api`` and in a run recorded whole (where
        ``stop`` pauses it); under another capture range they are ignored.
        """
        with self._lock:
            if self.spec.range not in ("api", "none") or self.spec.first_step is not None:
                self.ignored_api_calls += 1
                return self.on
            self.api_starts += start
            if not start and self.on:
                self._record = True  # the run is no longer whole: say which parts were recorded
            self._wanted = start
            which = "gpuscope.start()" if start else "gpuscope.stop()"
            self._update(self.now_ns(), which, which)
            return self.on

    @property
    def probe_enabled(self) -> bool:
        """Whether this run has overhead probes (recorded whole, not turned off)."""
        return self._probe

    @property
    def probing(self) -> bool:
        """Whether an overhead probe has collection off now."""
        return self._probe_until > 0 or self._pace_off

    def pace_switch(self, on: bool, launches: int) -> bool:
        """The paced probe (pace_probe.py) turns collection off (``on`` False) or back on, after
        ``launches`` CUDA graph launches; return whether it did (off: only from an open window of a
        run recorded whole, with no probe running and the process not ending)."""
        with self._lock:
            if on:
                if not self._pace_off:
                    return False
                self._pace_off = False
                if not self._finished:
                    self._update(self.now_ns(), f"{PROBE_OPENS} {PACE_LAUNCH} {launches}", "")
                return True
            if self._finished or not self.on or self._probe_until or self.steps:
                return False
            self._record = True  # the run is no longer whole: say which parts were recorded
            self._pace_off = True
            self.probes += 1
            self._update(self.now_ns(), "", f"{PROBE_CLOSES} {PACE_LAUNCH} {launches}")
            return True

    def _probe_step(self, t: int) -> None:
        """At the end of step ``self.steps``: start or end an overhead probe."""
        n = self.steps
        if self._last_mark:
            self._last_step_ns = max(t - self._last_mark, 0)
        self._last_mark = t
        self._last_mark_local = time.monotonic_ns()  # for the probe's watch, on its own clock
        if self._probe_until:
            if n >= self._probe_until:
                self._end_probe(t, f"{PROBE_OPENS} at step {n}")
        elif self.on and n >= self._next_probe_step and t >= self._next_probe_ns:
            self._record = True  # the run is no longer whole: say which parts were recorded
            self._probe_until = n + self._probe_length()
            self._next_probe_step = n + PROBE_EVERY
            self.probes += 1
            self._update(t, "", f"{PROBE_CLOSES} at step {n}")
            if self._watcher_pid != os.getpid():
                self._watcher_pid = os.getpid()
                threading.Thread(target=self._probe_watch, name="gpuscope-capture", daemon=True).start()
            self._probe_started.notify()

    def _probe_length(self) -> int:
        """Steps of the next probe: :data:`PROBE_STEPS`, or more where steps are short, so that the timed
        ones cover :attr:`probe_min_off_ns` (at most :data:`PROBE_MAX_STEPS`)."""
        if self._last_step_ns <= 0 or not self.probe_min_off_ns:
            return PROBE_STEPS
        timed = -(-self.probe_min_off_ns // self._last_step_ns)
        return int(min(max(PROBE_STEPS, timed + 1), PROBE_MAX_STEPS))

    def _probe_watch(self) -> None:
        """End each probe when no step mark has come for a while: the loop has ended. Runs for the
        process's life, asleep between probes."""
        while True:
            with self._lock:
                while not self._probe_until:
                    self._probe_started.wait()
                wait = max(PROBE_PATIENCE * self._last_step_ns, PROBE_MIN_WAIT_NS)
                left = self._last_mark_local + wait - time.monotonic_ns()
                if left <= 0:
                    self._end_probe(self.now_ns(), f"{PROBE_OPENS} after step {self.steps} (no step since)")
                    continue
            time.sleep(left / 1e9)

    def _end_probe(self, t: int, reason: str) -> None:
        self._probe_until = 0
        self._next_probe_ns = t + self.probe_gap_ns
        self._update(t, reason, "")

    # -- state -------------------------------------------------------------------------------
    def _matches(self, name: str, domain: str) -> bool:
        spec = self.spec
        return name == spec.nvtx_name and (spec.nvtx_domain is None or domain == spec.nvtx_domain)

    def _arm(self) -> None:
        with self._lock:
            self._armed = True
            self._update(self.now_ns(), f"--delay {_seconds(self.spec.delay_ns)}", "")

    def _cap(self, started_at: int) -> None:
        with self._lock:
            if self.on and self._opened_at == started_at:
                self._capped = True
                self._update(self.now_ns(), "", f"--duration {_seconds(self.spec.duration_ns or 0)}")

    def _update(self, t: int, open_reason: str, close_reason: str) -> None:
        if not self._wanted:
            self._capped = False
        want = self._wanted and self._armed and not self._capped and not self._probe_until and not self._pace_off
        if want and not self.on:
            self._open(t, open_reason)
        elif self.on and not want:
            self._close(t, close_reason)

    def _open(self, t: int, reason: str) -> None:
        self.on = True
        self.switch(True)
        if reason.startswith(PROBE_OPENS):
            t = self.now_ns()  # the window starts once the collectors are back on
        self._opened_at, self._open_reason = t, reason
        if self._record:
            self.emit(t, None, reason)
        if self.spec.duration_ns is not None:
            self._duration_timer = self._timer(self.spec.duration_ns, lambda: self._cap(t))

    def _close(self, t: int, reason: str) -> None:
        self.on = False
        self.switch(False)
        if self._duration_timer is not None:
            self._duration_timer.cancel()
            self._duration_timer = None
        if self._record:
            self.emit(self._opened_at, t, f"{self._open_reason} to {reason}")
            self.windows += 1

    def _timer(self, after_ns: int, action: Callable[[], None]) -> threading.Timer:
        timer = threading.Timer(after_ns / 1e9, action)
        timer.name = "gpuscope-capture"  # the sampler leaves gpuscope's threads out
        timer.daemon = True
        timer.start()
        self._timers.append(timer)
        return timer

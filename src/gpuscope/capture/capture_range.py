"""What part of a run to record: the capture-range options of ``gpuscope profile``, checked and carried.

The options (parsed here in the launcher, before the program starts, and handed to every profiled
process through ``GPUSCOPE_CAPTURE``):

- ``--capture-range=cudaProfilerApi``: collection is on between ``cudaProfilerStart`` and
  ``cudaProfilerStop`` (or ``cuProfilerStart``/``cuProfilerStop``; ``torch.cuda.profiler.start``/
  ``stop``/``profile``), every time the program calls them;
- ``--capture-range=nvtx --nvtx-capture NAME[@DOMAIN]``: on while a range of that name is open
  (in any domain without ``@DOMAIN``);
- ``--capture-range=api``: on between ``gpuscope.start()`` and ``gpuscope.stop()``;
- ``--steps FIRST-LAST``: on from the start of step FIRST to the end of step LAST (steps count
  from 1, as ``step_sum`` numbers them; ``N`` is one step, ``FIRST-`` runs to the end);
- ``--delay SEC``: nothing is recorded before SEC seconds after the program started; a capture
  range's start is only honoured after it;
- ``--duration SEC``: each stretch of collection ends at most SEC seconds after it began.

A run recorded whole is not recorded quite whole: the *overhead probe* (on unless
``--no-overhead-probe``) turns collection off for a few steps now and then, so that the report can
time the program's steps with and without the profiler (process/window.py).

Runs inside the profiled process too: standard library only.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from ..errors import GpuscopeError

CAPTURE_ENV = "GPUSCOPE_CAPTURE"
RANGES = {
    "none": "the whole run (default)",
    "cudaProfilerApi": "cudaProfilerStart to Stop (torch.cuda.profiler.start, stop)",
    "nvtx": "while an NVTX range named by --nvtx-capture is open",
    "api": "between gpuscope.start() and gpuscope.stop()",
}
_STEPS_FORMAT = "give steps as FIRST-LAST (10-20), FIRST- (to the end) or N; steps count from 1"


@dataclass(frozen=True)
class CaptureSpec:
    """When collection is on. The default records the whole run."""

    range: str = "none"
    nvtx_name: str | None = None
    nvtx_domain: str | None = None  # None: any domain
    delay_ns: int = 0
    duration_ns: int | None = None
    first_step: int | None = None
    last_step: int | None = None  # None with first_step: to the end of the run
    origin_ns: int | None = None  # CLOCK_MONOTONIC when the session started (the delay counts from it)
    probe: bool = True  # the overhead probe, in a run recorded whole (process/window.py)

    @property
    def limited(self) -> bool:
        """True when something other than the whole run is to be recorded."""
        return (self.range != "none" or self.delay_ns > 0 or self.duration_ns is not None
                or self.first_step is not None)

    def nvtx_label(self) -> str:
        """The watched NVTX range as the user wrote it (``name`` or ``name@domain``)."""
        name = self.nvtx_name or ""
        return f"{name}@{self.nvtx_domain}" if self.nvtx_domain is not None else name

    def steps_label(self) -> str:
        """``10-20``, ``10``, or ``10-`` (to the end)."""
        first, last = self.first_step, self.last_step
        if last is None:
            return f"{first}-"
        return str(first) if first == last else f"{first}-{last}"

    def describe(self) -> str:
        """The capture range in words, for the summary and the report's meta."""
        parts = []
        if self.first_step is not None:
            last = "the end of the run" if self.last_step is None else str(self.last_step)
            parts.append(f"step {self.first_step}" if self.first_step == self.last_step
                         else f"steps {self.first_step} to {last}")
        if self.range == "cudaProfilerApi":
            parts.append("between cudaProfilerStart and cudaProfilerStop")
        elif self.range == "nvtx":
            parts.append(f"while NVTX range '{self.nvtx_label()}' is open")
        elif self.range == "api":
            parts.append("between gpuscope.start() and gpuscope.stop()")
        if self.delay_ns:
            parts.append(f"after a delay of {_seconds(self.delay_ns)}")
        if self.duration_ns is not None:
            parts.append(f"for at most {_seconds(self.duration_ns)} each time")
        return ", ".join(parts) if parts else "the whole run"

    def to_env(self) -> str:
        """The spec as the value of ``GPUSCOPE_CAPTURE``."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, text: str | None) -> CaptureSpec:
        """Read ``GPUSCOPE_CAPTURE``; an absent or unreadable value means the whole run."""
        if not text:
            return cls()
        try:
            items = json.loads(text)
            return cls(**{k: v for k, v in items.items() if k in cls.__dataclass_fields__})
        except (ValueError, TypeError):
            return cls()


def _seconds(ns: int) -> str:
    return f"{ns / 1e9:g} s"


def _parse_seconds(option: str, text: str, allow_zero: bool) -> int:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        least = ">= 0" if allow_zero else "> 0"
        raise GpuscopeError(f"{option} takes a number of seconds {least}, not {text!r}")
    return int(round(value * 1e9))


def parse_steps(text: str) -> tuple[int, int | None]:
    """Return (first, last) of a ``--steps`` value; last is None for ``FIRST-``."""
    first_s, dash, last_s = text.strip().partition("-")
    try:
        first = int(first_s)
        last = int(last_s) if last_s.strip() else (None if dash else first)
    except ValueError:
        raise GpuscopeError(f"--steps {text}: {_STEPS_FORMAT}") from None
    if first < 1 or (last is not None and last < 1):
        raise GpuscopeError(f"--steps {text}: steps count from 1")
    if last is not None and last < first:
        raise GpuscopeError(f"--steps {text}: the first step comes after the last")
    return first, last


def parse_capture(
    capture_range: str | None = None,
    nvtx_capture: str | None = None,
    delay: str | None = None,
    duration: str | None = None,
    steps: str | None = None,
    probe: bool = True,
) -> CaptureSpec:
    """Check the capture-range options and return their spec; raise GpuscopeError with one line."""
    kind = "none"
    if capture_range is not None:
        names = {k.lower(): k for k in RANGES}
        kind = names.get(capture_range.strip().lower(), "")
        if not kind:
            raise GpuscopeError(f"unknown --capture-range {capture_range!r}; choose from {', '.join(RANGES)}")
    name: str | None = None
    domain: str | None = None
    if nvtx_capture is not None:
        if kind != "nvtx":
            raise GpuscopeError("--nvtx-capture needs --capture-range=nvtx")
        before, at, after = nvtx_capture.rpartition("@")
        name, domain = (before, after) if at else (after, None)
        if not name or domain == "":
            raise GpuscopeError(f"--nvtx-capture {nvtx_capture!r}: give NAME or NAME@DOMAIN")
    elif kind == "nvtx":
        raise GpuscopeError("--capture-range=nvtx needs --nvtx-capture NAME[@DOMAIN]")
    first = last = None
    if steps is not None:
        if kind != "none":
            raise GpuscopeError("--steps and --capture-range cannot be combined: choose one")
        if delay is not None:
            raise GpuscopeError("--steps and --delay cannot be combined: choose one")
        first, last = parse_steps(steps)
    return CaptureSpec(
        range=kind,
        nvtx_name=name,
        nvtx_domain=domain,
        delay_ns=_parse_seconds("--delay", delay, True) if delay is not None else 0,
        duration_ns=_parse_seconds("--duration", duration, False) if duration is not None else None,
        first_step=first,
        last_step=last,
        probe=probe,
    )

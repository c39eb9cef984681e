"""The overhead probe read back: the program's steps timed with collection off, beside the recorded ones.

In a run recorded whole, the profiled process switches collection off for a few steps now and then
(capture/process/window.py) and keeps their step marks. The capture windows around such a probe
name it in their reasons. Per process, from the marks (step *k* ends at mark *k* and, from step 2,
starts at mark *k-1*, as ``step_sum`` numbers them):

- the *probe's steps*: those not recorded because a probe ran: the step that paid for switching the
  collectors off, the steps with collection off, and the step during which they were switched back on;
- *off* steps, *timed with collection off*: the probe's steps but its first and its last, timed mark
  to mark;
- *on* steps: the *recorded* steps whose two marks lie in one capture window, less the *warm-up*
  steps (step 1, which no mark starts, and the leading steps that ``step_sum`` flags as warm-up:
  each longer than 1.5x the median), timed the same way (mark to mark, so that both groups are
  measured alike).

A program that nothing marks steps of but that launches CUDA graphs (JAX) is probed by time instead
(capture/process/pace_probe.py): its *pace*, the time per graph launch between polls of gpuscope's
launch counter, with collection off against the stretches just before and after (the first poll
interval after each switch left out, as the switching steps are).

Their medians give how much longer collection made a step, a measurement of the profiler's cost that
needs no model of it, with a 95% interval from resampling both groups (deterministic: a fixed seed).
What stays on during a probe (the step marks, the wrappers that pass calls straight through, CUPTI's
subscription) is not in the difference, so it is a lower bound. A difference whose interval reaches 0,
or a negative one (steps of a busy machine vary more than collection costs), is no measurable
slowdown, with the noise it is within.
"""

from __future__ import annotations

import json
import math
import weakref
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ...trace.report import Report
from ...trace.trim import PROBE_CLOSES

PACE = "graph"  # the source of a probe paced by CUDA graph launches
POLL_NS = 10_000_000  # how often its launch counter was read (capture/process/pace_probe.py)
MIN_OFF_STEPS = 2  # fewer timed steps without collection than this: no verdict
# steps with collection off that took less than this share of the GPU work a recorded step holds were
# only queued: the loop does not wait for the GPU, so the time between its marks is not its steps'
QUEUED = 0.8
GPU_WINDOW_STEPS = 20  # recorded steps in a row whose kernels give the GPU work per step
NOISE = 0.03  # a difference of the medians below this share of the off median is not a cost
RESAMPLES = 1000  # bootstrap resamples for the interval of the slowdown
_EXACT_LIMIT = 2000  # a group larger than this: its median's spread from its MAD, not by resampling


@dataclass(frozen=True)
class ProbeTiming:
    """One process's steps with collection off and on (mark-to-mark durations, ns), and their step numbers."""

    pid: int
    probes: int
    off_ns: tuple[int, ...]
    on_ns: tuple[int, ...]
    source: str = "torch"  # what the steps were timed by: gpuscope, torch (optimizer), module (outermost
    # calls), or graph (no steps: the time per CUDA graph launch, :data:`PACE`)
    off_steps: tuple[int, ...] = ()  # the step numbers of ``off_ns``
    probe_steps: tuple[int, ...] = ()  # every step the probes kept from being recorded
    warmup_steps: tuple[int, ...] = ()  # recorded steps left out of ``on_ns`` as warm-up
    probe_spans: tuple[tuple[int, int, int], ...] = ()  # each of ``probe_steps``: (step, start_ns, end_ns), mark to mark
    gpu_ns: float = 0.0  # the GPU's busy time per recorded step (0.0: no kernels, or not known)

    @property
    def queued(self) -> bool:
        """Whether the steps with collection off were shorter than the GPU work of a recorded step
        (:data:`QUEUED`): a loop that never waits for the GPU marks its steps as fast as it can queue
        them while the queue has room, so they time the queueing, not the step."""
        return bool(self.gpu_ns and self.off_ns and self.off_median < QUEUED * self.gpu_ns)

    @property
    def switch_steps(self) -> tuple[int, ...]:
        """The probe's steps that were not timed: each probe's first (collection switched off in it)
        and last (switched back on), and steps of a probe the run ended in."""
        return tuple(s for s in self.probe_steps if s not in set(self.off_steps))

    @property
    def off_median(self) -> float:
        """The median step with collection off (0.0 when none was timed)."""
        return float(np.median(self.off_ns)) if self.off_ns else 0.0

    @property
    def floor_ns(self) -> float:
        """The least a step without collection can take: the GPU's work per recorded step (0.0 for a
        probe paced by graph launches, whose intervals are not steps)."""
        return 0.0 if self.source == PACE else self.gpu_ns

    @property
    def base_median(self) -> float:
        """The step without collection: the median step with collection off, and never less than the
        GPU's work per recorded step (:attr:`gpu_ns`). A host that runs ahead of the GPU with
        collection off marks its steps faster than the GPU can run them while the launch queue takes
        up the difference, so those steps time the host, and the program's own step is at least the
        GPU's work (within CUPTI's cost per kernel on the GPU, about 1 µs, by which this floor is high)."""
        return max(self.off_median, self.floor_ns)

    @property
    def gpu_floored(self) -> bool:
        """Whether the GPU's work per step, not the steps with collection off, set :attr:`base_median`."""
        return self.base_median > self.off_median > 0

    @property
    def on_median(self) -> float:
        """The median recorded step (0.0 when none was timed)."""
        return float(np.median(self.on_ns)) if self.on_ns else 0.0

    @property
    def ratio(self) -> float:
        """How many times longer a recorded step took than one without collection (1.0: no cost seen)."""
        return self.on_median / self.base_median if self.off_median > 0 and self.on_median > 0 else 1.0

    @property
    def measured(self) -> bool:
        """Whether there are enough steps of both kinds for a verdict, and the steps with collection
        off were not only queued (:attr:`queued`)."""
        return len(self.off_ns) >= MIN_OFF_STEPS and len(self.on_ns) >= MIN_OFF_STEPS and not self.queued

    @cached_property
    def interval(self) -> tuple[float, float]:
        """The 95% interval of the slowdown (``ratio - 1``) from resampling both groups; (0, 0) unmeasured."""
        if not self.measured:
            return (0.0, 0.0)
        return _interval(self.on_ns, self.off_ns, self.floor_ns)

    @cached_property
    def host_pace(self) -> float:
        """How long the host takes for a step without collection against with it: the medians of the
        steps with collection off and on, where the probe timed the report's own steps and the off
        steps are measurably shorter; else 1.0. Unlike :attr:`ratio`, not floored by the GPU's work:
        steps marked with collection off time the host's own pace, including where it ran ahead of
        the GPU (what a replay of the host's launches needs, diagnosis/host_pace.py)."""
        if not (self.times_steps and self.measured and self.on_median > self.off_median > 0):
            return 1.0
        lo, _ = _interval(self.on_ns, self.off_ns, 0.0)
        if self.on_median / self.off_median - 1.0 < NOISE or lo <= 0:
            return 1.0
        return self.off_median / self.on_median

    @property
    def slowdown(self) -> float:
        """How much longer a recorded step took (``ratio - 1``; negative: shorter)."""
        return self.ratio - 1.0

    @property
    def significant(self) -> bool:
        """Whether collection made a step measurably longer: above :data:`NOISE` and the interval above 0."""
        return self.measured and self.slowdown >= NOISE and self.interval[0] > 0

    @property
    def noise(self) -> float:
        """The spread the slowdown is within: half the interval's width, and at least the size of a
        negative slowdown (a step can not get shorter for being recorded: that is the run's own variation)."""
        lo, hi = self.interval
        spread = (hi - lo) / 2
        return max(spread, -self.slowdown, NOISE) if not self.significant else max(spread, 0.0)

    @property
    def cost_share(self) -> float:
        """The share of a recorded step that collection added (0 when within the noise or unmeasured)."""
        return 1.0 - 1.0 / self.ratio if self.significant else 0.0

    def verdict(self) -> str:
        """``collection made a step 28% longer (±9%)``, or ``no measurable slowdown (within the noise: ±12%)``."""
        unit = "iteration" if self.source == "module" else "step"
        if not self.significant:
            return f"no measurable slowdown (within the noise: ±{_pct(self.noise)})"
        spread = f"±{_pct(self.noise)}"
        if self.noise > self.slowdown:  # a lopsided interval: "150% (±181%)" would read as reaching below 0
            lo, hi = self.interval
            spread = f"95% interval {_pct(lo)} to {_pct(hi)}"
        if self.source == PACE:
            return (f"collection made the program {_pct(self.slowdown)} slower ({spread}; its CUDA graph "
                    "launches came that much further apart)")
        article = "an" if unit == "iteration" else "a"
        return f"collection made {article} {unit} {_pct(self.slowdown)} longer ({spread})"

    def describe(self) -> str:
        """One line: what the probe measured, or why it measured nothing (a probe at the run's last
        steps times no step with collection off)."""
        from ...units import duration

        unit = "iteration" if self.source == "module" else "step"

        def n(count: int, what: str = unit) -> str:
            return f"{count} {what}{'s' if count != 1 else ''}"

        after = self.warmup_phrase()
        if self.source == PACE and not self.measured:
            return (f"{n(self.probes, 'probe')} of the program's pace timed {n(len(self.off_ns), 'interval')} with "
                    f"collection off and {n(len(self.on_ns), 'interval')} with it on (at least {MIN_OFF_STEPS} of "
                    "each are needed): no measurement")
        if self.queued:
            article = "an" if unit == "iteration" else "a"
            return (f"{self.evidence()}: no measurement: {article} {unit} with collection off took less than the "
                    f"{duration(self.gpu_ns)} of GPU work a recorded {unit} holds; the program does not wait "
                    f"for the GPU between {unit}s, so their marks timed how fast it queued the work")
        if not self.measured:
            return (f"{n(self.probes, 'probe')} timed {n(len(self.off_ns))} with collection off and "
                    f"{n(len(self.on_ns), 'recorded ' + unit)}{after} (at least {MIN_OFF_STEPS} of each are "
                    f"needed): no measurement")
        if self.gpu_floored:
            from ...units import duration

            return (f"{self.evidence()}, and a {unit} holds {duration(self.gpu_ns)} of GPU work, which a {unit} "
                    f"without collection takes at least (the host ran ahead of the GPU): {self.verdict()}")
        return f"{self.evidence()}: {self.verdict()}"

    def evidence(self) -> str:
        """What the probe timed, without the verdict: ``4 steps timed with collection off (steps
        12-13, 37-38; 2 probes) took 285 ms each (median; ...) against 364 ms for the 38 recorded
        steps after warm-up (steps 1-4)``."""
        from ...units import duration

        unit = "iteration" if self.source == "module" else "step"

        def n(count: int, what: str = unit) -> str:
            return f"{count} {what}{'s' if count != 1 else ''}"

        if not self.off_ns or not self.on_ns:
            return f"{n(self.probes, 'probe')} timed {n(len(self.off_ns))} with collection off"
        if self.source == PACE:
            poll = duration(POLL_NS)
            return (f"with collection off ({n(self.probes, 'probe')}; nothing marks steps, the program launches CUDA "
                    f"graphs) a graph launch came every {duration(round(self.off_median))} (median of "
                    f"{n(len(self.off_ns), 'interval')} of {poll}; {duration(min(self.off_ns))} to "
                    f"{duration(max(self.off_ns))}) against every {duration(round(self.on_median))} with it on, just before "
                    "and after")
        low, high = min(self.off_ns), max(self.off_ns)
        what = " (outermost module calls: nothing marks steps)" if self.source == "module" else ""
        which = f"{unit}s {step_ranges(self.off_steps)}; " if self.off_steps else ""
        return (f"{n(len(self.off_ns))}{what} timed with collection off ({which}{n(self.probes, 'probe')}) "
                f"took {duration(self.off_median)} each (median; {duration(low)} to {duration(high)}) against "
                f"{duration(self.on_median)} for the {n(len(self.on_ns), 'recorded ' + unit)}{self.warmup_phrase()}")

    def added_ns(self) -> float:
        """The time collection added over the recorded steps timed: the difference of the medians
        times their number (0 where no slowdown was measured, or the pace was timed, not steps)."""
        if self.source == PACE:
            return 0.0
        return (self.on_median - self.base_median) * len(self.on_ns) if self.significant else 0.0

    @property
    def times_steps(self) -> bool:
        """Whether the groups are the same steps as the report's (marked steps: the medians compare
        with a step's time directly)."""
        return self.source in ("gpuscope", "torch")

    def warmup_phrase(self) -> str:
        """`` after warm-up (steps 1-3)``, the warm-up as ``step_sum`` flags it, or `` after step 1``:
        the recorded steps left out of the timed ones (step 1 always: no mark starts it)."""
        unit = "iteration" if self.source == "module" else "step"
        if not self.warmup_steps:
            return f" after {unit} 1"
        plural = "s" if len(self.warmup_steps) > 1 else ""
        return f" after warm-up ({unit}{plural} {step_ranges(self.warmup_steps)})"


def _pct(share: float) -> str:
    """A share as a whole percentage, at least 1% where not 0."""
    value = abs(share) * 100
    return f"{max(1, math.ceil(value - 0.5)) if value >= 0.005 else 0}%"


def _interval(on_ns: tuple[int, ...], off_ns: tuple[int, ...], floor_ns: float) -> tuple[float, float]:
    """The 95% interval of ``on / max(off, floor_ns) - 1`` over resampled medians of both groups."""
    rng = np.random.default_rng(0)
    on, off = _medians(on_ns, rng), _medians(off_ns, rng)
    if floor_ns:
        off = np.maximum(off, floor_ns)
    ok = off > 0
    if not ok.any():
        return (0.0, 0.0)
    lo, hi = np.percentile(on[ok] / off[ok] - 1.0, [2.5, 97.5])
    return (float(lo), float(hi))


def _medians(values: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """:data:`RESAMPLES` medians of ``values`` resampled with replacement (of a large group, drawn
    around its median with the median's standard error from the MAD)."""
    v = np.asarray(values, np.float64)
    if len(v) > _EXACT_LIMIT:
        med = float(np.median(v))
        se = 1.2533 * 1.4826 * float(np.median(np.abs(v - med))) / math.sqrt(len(v))
        return med + se * rng.standard_normal(RESAMPLES)
    return np.median(v[rng.integers(0, len(v), (RESAMPLES, len(v)))], axis=1)


def step_ranges(steps: tuple[int, ...] | list[int]) -> str:
    """``11-14, 36-39`` for the step numbers 11, 12, 13, 14, 36, ...; ``12`` for one."""
    out: list[str] = []
    ordered = sorted(set(steps))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(out)


_TIMINGS: weakref.WeakKeyDictionary[Report, dict[int, ProbeTiming]] = weakref.WeakKeyDictionary()


def probe_timings(report: Report) -> dict[int, ProbeTiming]:
    """Return, per process that ran an overhead probe, its steps with collection off and on
    (computed once per open report: the summary, step_sum, analyze and the viewer all ask)."""
    if not report.count("capture_window"):
        return {}
    if report not in _TIMINGS:
        _TIMINGS[report] = {**_pace_timings(report), **_probe_timings(report)}
    return dict(_TIMINGS[report])


def _probe_timings(report: Report) -> dict[int, ProbeTiming]:
    windows = report.sql("SELECT pid, start_ns, coalesce(end_ns, 9223372036854775807), reason FROM capture_window "
                         "WHERE end_ns IS NULL OR end_ns > start_ns ORDER BY pid, start_ns")
    # the marks steps are counted by, as the capture window counted them: gpuscope.step() marks
    # where the program made any, else PyTorch's optimizer steps, else (an inference loop) the ends of
    # the outermost module calls
    marks = report.sql(
        """SELECT DISTINCT r.pid, r.source, r.start_ns FROM nvtx_range r JOIN string n ON n.id = r.name_id
           WHERE r.kind = 'mark' AND ((r.category = 'step' AND n.value = 'step' AND r.source IN ('gpuscope', 'torch'))
                 OR (r.category = 'iteration' AND n.value = 'iteration' AND r.source = 'module'))
           ORDER BY r.pid, r.start_ns""")
    by_pid: dict[int, dict[str, list[int]]] = {}
    for pid, source, t in marks:
        by_pid.setdefault(int(pid), {}).setdefault(source, []).append(int(t))
    spans: dict[int, list[tuple[int, int, str]]] = {}
    for pid, start, end, reason in windows:
        spans.setdefault(int(pid), []).append((int(start), int(end), reason or ""))
    flagged = _warmup_flags(report) if any(s in ("gpuscope", "torch") for own in by_pid.values() for s in own) else None
    out = {}
    for pid, mine in spans.items():
        sources = by_pid.get(pid, {})
        source = next((s for s in ("gpuscope", "torch", "module") if sources.get(s)), "module")
        t = np.array(sources.get(source, []), np.int64)
        probes = sum(1 for _, _, reason in mine if PROBE_CLOSES in reason.rpartition(" to ")[2])
        if not probes or len(t) < 3:
            continue
        split = split_steps(t, mine, flagged.get(pid, set()) if flagged is not None and source != "module" else None)
        durations = np.diff(t)
        on = [s for s in split.recorded if s not in split.warmup]
        spans = tuple((s, int(t[s - 2]), int(t[s - 1])) for s in split.probe if s >= 2)
        out[pid] = ProbeTiming(pid, split.probes or probes, tuple(int(durations[s - 2]) for s in split.timed_off),
                               tuple(int(durations[s - 2]) for s in on), source, split.timed_off,
                               split.probe, split.warmup, spans, _gpu_per_step(report, pid, t, on))
    return out


def _pace_timings(report: Report) -> dict[int, ProbeTiming]:
    """Per process whose probe was paced by its CUDA graph launches (the ``pace_probes`` of its
    ``capture`` row), the time per launch of each poll interval: with collection off, and in the
    stretches just before and after; the first interval after each switch is left out."""
    out = {}
    for pid, detail in report.sql("SELECT pid, detail FROM collector WHERE name = 'capture' AND pid IS NOT NULL"):
        try:
            cycles = json.loads(detail or "{}").get("pace_probes") or []
        except (ValueError, AttributeError):
            continue
        split = []
        for c in cycles if isinstance(cycles, list) else []:
            try:
                split.append(_pace_split(c["polls"], int(c["off"]), int(c["on"])))
            except (ValueError, TypeError, KeyError, IndexError):
                continue  # not as this version writes it: no measurement rather than a wrong one
        if split:
            out[int(pid)] = ProbeTiming(int(pid), len(split), tuple(v for _, off in split for v in off),
                                        tuple(v for on, _ in split for v in on), PACE)
    return out


def _pace_split(polls: list[list[int]], off: int, on: int) -> tuple[list[int], list[int]]:
    """One cycle's time per launch over each poll interval (interval ``k`` ends at poll ``k``): those
    with collection on (before poll ``off``, and after the one past ``on``) and those with it off
    (after the one past ``off``, to ``on``); intervals without a launch left out."""
    per: dict[int, int] = {}
    for k in range(1, len(polls)):
        dt, dn = int(polls[k][0]) - int(polls[k - 1][0]), int(polls[k][1]) - int(polls[k - 1][1])
        if dn > 0 and dt > 0:
            per[k] = dt // dn
    with_on = [v for k, v in per.items() if k <= off or k >= on + 2]
    with_off = [v for k, v in per.items() if off + 2 <= k <= on]
    return with_on, with_off


def _gpu_per_step(report: Report, pid: int, t: np.ndarray, on: list[int]) -> float:
    """The GPU's busy time (the union of its kernels' intervals) per recorded step, over the last
    :data:`GPU_WINDOW_STEPS` of the longest run of recorded steps in a row (step ``s`` runs from mark
    ``s - 2`` to mark ``s - 1``); 0.0 without kernels. A window of many steps, since a host ahead of
    the GPU marks a step before its kernels run: only the window's edges are off by that lag."""
    if not on or not report.count("kernel"):
        return 0.0
    steps = sorted(on)
    best, start = (steps[0], 1), 0
    for i in range(1, len(steps) + 1):
        if i == len(steps) or steps[i] != steps[i - 1] + 1:
            if i - start > best[1]:
                best = (steps[start], i - start)
            start = i
    # the run's last steps: in its first, the GPU may still run work queued during the probe before
    # it, with collection off (busy, but with no kernels recorded)
    n = min(best[1], GPU_WINDOW_STEPS)
    first = best[0] + best[1] - n
    a, b = int(t[first - 2]), int(t[first + n - 2])
    rows = report.sql("SELECT greatest(start_ns, ?), least(end_ns, ?) FROM kernel WHERE pid = ? AND end_ns > ? "
                      "AND start_ns < ? ORDER BY start_ns", [a, b, pid, a, b])
    busy, reach = 0, a
    for lo, hi in rows:  # the union of the intervals, in start order
        lo = max(int(lo), reach)
        if hi > lo:
            busy += int(hi) - lo
            reach = int(hi)
    return busy / n


def _warmup_flags(report: Report) -> dict[int, set[int]] | None:
    """Per process, the step numbers that ``step_sum`` flags as warm-up (None where its steps are
    not the marks the probe counts)."""
    from .source import step_source, step_windows

    source = step_source(report)
    if source.kind not in ("gpuscope", "torch"):
        return None
    w = step_windows(report, source)
    out: dict[int, set[int]] = {}
    for pid, step in zip(w.loc[w["warmup"], "pid"], w.loc[w["warmup"], "step"]):
        out.setdefault(int(pid), set()).add(int(step))
    return out


@dataclass(frozen=True)
class StepSplit:
    """The step numbers of one process by what happened to them (see the module docstring)."""

    recorded: tuple[int, ...]  # both marks in one capture window (step 1 has no mark before it: not here)
    timed_off: tuple[int, ...]  # timed with collection off
    probe: tuple[int, ...]  # every step a probe kept from being recorded
    warmup: tuple[int, ...]  # the warm-up (step_sum's flag) among step 1 and ``recorded``: not timed
    probes: int = 0  # probes that held at least one step


def split_steps(marks: np.ndarray, windows: list[tuple[int, int, str]],
                warm: set[int] | None = None) -> StepSplit:
    """The step numbers inside probes (all, and those timed) and of the recorded steps, with the
    recorded steps' warm-up (``warm``: the steps ``step_sum`` flags; None: found here the same way,
    the leading recorded steps each longer than 1.5x their median), from the step marks and the
    capture windows."""
    from .source import _warmup

    n = len(marks)
    timed: list[int] = []
    probe: list[int] = []
    kept = 0  # probes that held a step (one begun at the run's last mark held none)
    follow = [*windows[1:], None]
    for (_, end, reason), nxt in zip(windows, follow):
        if PROBE_CLOSES not in reason.rpartition(" to ")[2]:
            continue
        start = nxt[0] if nxt is not None else int(np.iinfo(np.int64).max)
        # marks in the gap: the probe's first mark closes the window (at ``end``); the step after it
        # paid for the switch; the steps after that, up to the mark that switched collection back on
        # (just before ``start``), are timed; the step after that mark ran while switching back
        inside = np.flatnonzero((marks >= end) & (marks <= start))
        if not len(inside):
            continue
        last = int(inside[-1]) + 2 if nxt is not None else n  # a probe the run ended in: to the last step
        held = [s for s in range(int(inside[0]) + 2, min(last, n) + 1)]
        probe += held
        kept += bool(held)
        timed += [int(i) + 2 for i in inside[1:-1]]
    recorded: set[int] = set()
    for begin, end, _ in windows:
        inside = np.flatnonzero((marks >= begin) & (marks <= end))
        recorded.update(int(i) + 2 for i in inside[:-1])
    ordered = sorted(recorded - set(probe))
    if warm is None:
        durations = np.diff(marks)
        warm = set(ordered[:_warmup([int(durations[s - 2]) for s in ordered])] if ordered else [])
    # step 1 has no mark before it: never timed here, whether warm-up or not
    warmup = tuple(sorted(s for s in warm if s == 1 or s in set(ordered)))
    return StepSplit(tuple(ordered), tuple(sorted(set(timed))), tuple(sorted(set(probe))), warmup, kept)


def _split(marks: np.ndarray, windows: list[tuple[int, int, str]]) -> tuple[list[int], list[int]]:
    """The mark-to-mark durations of the timed steps inside probes, and of the recorded steps after warm-up."""
    split = split_steps(marks, windows)
    durations = np.diff(marks)
    return ([int(durations[s - 2]) for s in split.timed_off],
            [int(durations[s - 2]) for s in split.recorded if s not in split.warmup])

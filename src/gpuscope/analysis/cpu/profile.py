"""Sampled Python stacks aggregated per function and per line, about the program's own code.

Each sample stands for the wall time since its thread's previous sample. Its CPU time is its share
of the thread's CPU time: the thread's CPU time between two readings (every 0.1 s, from /proc) over
the wall time between them, times the sample's wall time. A sleeping thread has wall time and no
CPU time, so it is not a hotspot.

Frames of gpuscope itself (its hooks wrap the program's calls) are dropped from every stack. By
default a sample's self time goes to the innermost frame of the program's own code (outside
installed packages and the standard library): the line that called into the library is the line the
user can change. A stack that is importing a module (importlib on it) counts to one row of its own,
:data:`IMPORTS`, apart from the steady state.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass

from ...trace.report import Report
from ...trace.stacks import is_library, is_own, stack_paths

IMPORTS = ("(imports and start-up)", "<importlib>", 0)
NO_CODE = ("(no Python code)", "", 0)
DEFAULT_HZ = 1000.0  # the agent's default sampling rate (GPUSCOPE_SAMPLE_HZ)
Frame = tuple[str, str, int]  # function, file, line


@dataclass
class SampleRate:
    """How often the busiest thread of a process was sampled, against the rate asked for."""

    pid: int
    asked_hz: float
    reached_hz: float
    longest_gap_ns: int


@dataclass
class CpuProfile:
    """Per function and per line: [self wall, self CPU, total wall, total CPU, samples]."""

    wall_ns: int
    cpu_ns: float
    has_cpu: bool  # whether the report holds threads' CPU times (else CPU columns are unknown)
    by_function: dict[tuple[str, str], list[float]]
    by_line: dict[Frame, list[float]]
    rates: list[SampleRate]


def _is_import(file: str) -> bool:
    return file.startswith("<frozen importlib")


def user_path(path: list[Frame], libraries: bool) -> list[Frame]:
    """Return the frames of a stack (innermost first) that a hotspot shows: without gpuscope's own,
    and unless ``libraries``, from the innermost frame of the program's own code outwards (a stack
    with no such frame keeps its innermost library frame). An importing stack is :data:`IMPORTS`."""
    frames = [f for f in path if not is_own(f[1])]
    if any(_is_import(f[1]) for f in frames):
        return [IMPORTS]
    if not frames:
        return [NO_CODE]
    if libraries:
        return frames
    first = next((i for i, f in enumerate(frames) if not is_library(f[1])), None)
    return frames[first:] if first is not None else frames[:1]


SAMPLES_SQL = """
    WITH tt AS (
        SELECT pid, tid, ts_ns AS e, lag(ts_ns) OVER w AS s, cpu_ns - lag(cpu_ns) OVER w AS cpu
        FROM thread_time WINDOW w AS (PARTITION BY pid, tid ORDER BY ts_ns)),
    frac AS (SELECT pid, tid, e, greatest(0.0, least(1.0, cpu / nullif(e - s, 0))) AS f FROM tt WHERE s IS NOT NULL)
    SELECT c.pid, c.stack_id, sum(c.weight_ns), sum(c.weight_ns * coalesce(f.f, 0.0)), count(*)
    FROM cpu_sample c ASOF LEFT JOIN frac f ON c.pid = f.pid AND c.tid = f.tid AND c.ts_ns <= f.e
    GROUP BY ALL"""


def cpu_profile(report: Report, libraries: bool = False) -> CpuProfile:
    """Return the samples of ``report`` aggregated per function and per line (see the module's doc);
    ``libraries`` shows library frames as they are instead of folding them into the caller."""
    rows = report.sql(SAMPLES_SQL)
    paths = stack_paths(report, {(int(pid), int(sid)) for pid, sid, *_ in rows})
    by_function: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0, 0.0, 0])
    by_line: dict[Frame, list[float]] = defaultdict(lambda: [0, 0.0, 0, 0.0, 0])
    wall = 0
    cpu = 0.0
    for pid, sid, weight, cpu_w, n in rows:
        wall += int(weight)
        cpu += float(cpu_w)
        shown = user_path(paths.get((int(pid), int(sid)), []), libraries)
        for table, keys, inner in ((by_function, {(f, fl) for f, fl, _ in shown}, shown[0][:2]),
                                   (by_line, set(shown), shown[0])):
            table[inner][0] += weight
            table[inner][1] += cpu_w
            for key in keys:
                table[key][2] += weight
                table[key][3] += cpu_w
                table[key][4] += n
    has_cpu = bool(report.count("thread_time"))
    return CpuProfile(wall, cpu, has_cpu, dict(by_function), dict(by_line), sample_rates(report))


def sample_rates(report: Report) -> list[SampleRate]:
    """Return, per process, the rate its busiest thread was sampled at: its samples over the time
    from its first to its last, with the longest wall time one sample stood for."""
    asked = {}
    for pid, detail in report.sql("SELECT pid, detail FROM collector WHERE name = 'sampler'"):
        try:
            asked[int(pid)] = float(json.loads(detail or "{}").get("hz", DEFAULT_HZ))
        except (ValueError, TypeError, AttributeError):
            asked[int(pid)] = DEFAULT_HZ
    rows = report.sql(
        """SELECT pid, arg_max(n, n), arg_max(span, n), arg_max(gap, n) FROM (
               SELECT pid, tid, count(*) AS n, max(ts_ns) - min(ts_ns) AS span, max(weight_ns) AS gap
               FROM cpu_sample GROUP BY pid, tid) GROUP BY pid ORDER BY pid""")
    return [SampleRate(int(pid), asked.get(int(pid), DEFAULT_HZ), (n - 1) * 1e9 / span if span else 0.0, int(gap))
            for pid, n, span, gap in rows]


def rate_note(rates: list[SampleRate]) -> str | None:
    """One sentence on the sampling rate reached, or None when every process got what it asked."""
    low = [r for r in rates if r.reached_hz < 0.8 * r.asked_hz]
    if not low:
        return None
    parts = "; ".join(f"process {r.pid}: {r.reached_hz:,.0f}/s of {r.asked_hz:,.0f}/s asked, longest gap "
                      f"{r.longest_gap_ns / 1e6:,.0f} ms" for r in low)
    return f"Sampled slower than asked ({parts}): a busy CPU or a call holding the GIL delays the sampler."

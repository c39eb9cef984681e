"""Whether a capture range limited a report, to what, and what went wrong with it.

A capture range (``--steps``, ``--capture-range``, ``--delay``, ``--duration``, ``gpuscope.start()``/
``stop()``) leaves ``meta.capture_range``, the ``capture_window`` rows (when collection was on) and a
``capture`` collector row per process (what the process saw: steps made, NVTX ranges opened,
profiler API calls). From them: a one-line description, and the reasons why the report holds less
than asked (a step never reached, a range never opened), so that an empty report is never silent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...trace.report import Report
from ...trace.trim import capture_limited, probes_only
from .source import step_source


@dataclass
class CaptureSummary:
    """What part of the run a report holds."""

    description: str  # "steps 10 to 20"
    windows: int
    captured_ns: int  # total length of the windows (one still open at the end: to its process's end)
    problems: list[str] = field(default_factory=list)


def capture_summary(report: Report) -> CaptureSummary | None:
    """Return what the capture range kept of the run; None when the report holds the whole run."""
    limited = capture_limited(report.meta)
    windows = report.sql(
        """SELECT count(*), coalesce(sum(coalesce(w.end_ns, p.end_ns, w.start_ns) - w.start_ns), 0)
            FROM capture_window w LEFT JOIN (SELECT pid, max(end_ns) AS end_ns FROM process GROUP BY pid) p
            USING (pid)""")[0]
    count, captured = int(windows[0]), int(windows[1])
    if not limited and not count:
        return None
    if not limited and probes_only(report.con):
        return None  # a run recorded whole but for the overhead probe's few steps (analysis/steps/probe.py)
    capture = report.meta.get("capture_range") or {}
    spec: dict[str, Any] = capture.get("spec") or {}
    description = capture.get("description") or ("the parts of the run outside its pauses "
                                                  "(from gpuscope.stop() to gpuscope.start())")
    infos = [json.loads(d) for (d,) in report.sql("SELECT detail FROM collector WHERE name = 'capture'") if d]
    problems = _problems(spec, infos, count, _steps_made(report, infos)) if limited else []
    return CaptureSummary(description, count, captured, problems)


def _steps_made(report: Report, infos: list[dict[str, Any]]) -> int:
    """The most steps a process made: as its agent counted them, or (a process that never reached
    its exit handlers) from the step marks, which are kept whatever the window."""
    if infos:
        return max(int(i.get("steps", 0)) for i in infos)
    source = step_source(report).kind
    if source is None:
        return 0
    kind = "r.kind = 'range' AND r.end_ns IS NOT NULL" if source == "range" else \
        f"r.kind = 'mark' AND r.category = 'step' AND r.source = '{source}'"
    return int(report.sql(
        f"""SELECT coalesce(max(n), 0) FROM (
                SELECT count(DISTINCT r.start_ns) AS n FROM nvtx_range r JOIN string s ON s.id = r.name_id
                WHERE s.value = 'step' AND {kind} GROUP BY r.pid)""")[0][0])


def _problems(spec: dict[str, Any], infos: list[dict[str, Any]], windows: int, made: int) -> list[str]:
    """Say why the report holds less than the capture range asked for."""
    out: list[str] = []
    first, last = spec.get("first_step"), spec.get("last_step")
    if first is not None:
        plural = "" if made == 1 else "s"
        if made < first:
            hint = (" (steps are gpuscope.step() calls, or optimizer.step() calls with --trace torch)"
                    if made == 0 else "")
            out.append(f"no step {first} was reached: the program made {made} step{plural}{hint}; "
                       "nothing was captured")
        elif last is not None and made < last:
            held = str(first) if made == first else f"{first}-{made}"
            out.append(f"no step {last} was reached: the program made {made} step{plural}; "
                       f"the report holds step{'s' if made > first else ''} {held}")
    kind = spec.get("range")
    if kind == "nvtx" and not sum(int(i.get("nvtx_opened", 0)) for i in infos):
        label = spec.get("nvtx_name", "")
        if spec.get("nvtx_domain") is not None:
            label += f"@{spec['nvtx_domain']}"
        seen = sorted({n for i in infos for n in i.get("names_seen", [])})
        also = f" (ranges seen: {', '.join(seen)})" if seen else ""
        out.append(f"no NVTX range named '{label}' was opened{also}: nothing was captured. Ranges pushed "
                   "by C/C++ code cannot start collection; torch.cuda.nvtx, the nvtx package and "
                   "gpuscope.annotate can")
    if kind == "cudaProfilerApi" and not sum(int(i.get("profiler_starts", 0)) for i in infos):
        if any(i.get("profiler_watched", True) for i in infos) or not infos:
            out.append("cudaProfilerStart was never called (nor torch.cuda.profiler.start): nothing was captured")
        else:
            out.append("cudaProfilerStart and cudaProfilerStop could not be watched (no CUPTI callback API "
                       "here): nothing was captured")
    if kind == "api" and not sum(int(i.get("api_starts", 0)) for i in infos):
        out.append("gpuscope.start() was never called: nothing was captured")
    if spec.get("delay_ns") and infos and not any(i.get("armed") for i in infos):
        out.append(f"the program ended before the --delay of {spec['delay_ns'] / 1e9:g} s had passed: "
                   "nothing was captured")
    ignored = sum(int(i.get("ignored_api_calls", 0)) for i in infos)
    if ignored:
        out.append(f"{ignored} gpuscope.start()/stop() calls were ignored: the capture range decides")
    if not windows and not any("nothing was captured" in p for p in out):
        out.append("nothing was captured: no capture window opened")
    return out

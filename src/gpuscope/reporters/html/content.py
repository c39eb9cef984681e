"""What the HTML page shows, as plain data: built only from the analyses the text reports use.

The run comes from :func:`..analysis.overview.overview`, the breakdown and findings from
:func:`..analysis.diagnosis.diagnose`, every table from the functions of ``gpuscope stats``, the
roofline from :func:`..analysis.roofline.kernel_points` and ``layer_points`` with the device's
ceilings. Each table cell carries its raw value (to sort by) and the text the terminal report
shows (from :mod:`..units`), so the page computes no number of its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...analysis.table import Table
from ...analysis.timeline.tracks import Lane, TimelineIndex
from ...analysis.timeline.window import counters, lane_window
from ...errors import GpuscopeError, ReadLimitError
from ...trace.report import Report
from ..overview import capture_line, overhead_line
from ...units import duration, human, machine, scaled
from ..page_budget import STATIC_SLICES

STATIC_PX = 4000  # buckets over the whole run of a lane whose slices the file leaves out


def table_data(table: Table) -> dict[str, Any]:
    """Return a table as ``{"name", "title", "notes", "columns": [{"label", "unit"}], "rows":
    [[[raw, text], ...], ...]}``: raw values as csv/json give them, texts as the terminal shows them."""
    return {
        "name": table.name, "title": table.title, "notes": list(table.notes),
        "columns": [{"label": c.label, "unit": c.unit} for c in table.columns],
        "rows": [[[_plain(machine(v, c.unit)), human(v, c.unit)] for v, c in zip(row, table.columns)]
                 for row in table.rows],
    }


def _plain(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if v != v else float(v)
    if v is None or isinstance(v, (int, str, bool)):
        return v
    return str(v)


def run_info(report: Report) -> dict[str, Any]:
    """Return the run: program, exit, wall time, devices with their busy time, what was recorded
    and not, dropped records, collection overhead and warnings, as lines of text and facts."""
    from ...analysis.overview import overview

    ov = overview(report)
    meta = report.meta
    facts = [("Program", " ".join(ov.command) or "?"), ("Ended", ov.exit_description),
             ("Wall time", duration(ov.wall_ns) if ov.wall_ns else "?"), ("Processes", str(ov.processes))]
    for key, label in (("host", "Host"), ("started_at", "Started"), ("gpuscope_version", "gpuscope")):
        if meta.get(key):
            facts.append((label, str(meta[key])))
    for d in ov.devices:
        facts.append((f"GPU {d.device_id}", f"{d.name}: busy {duration(d.busy_ns)} of {duration(d.span_ns)} "
                                            f"({d.busy_percent:.1f}%), {d.kernels:,} kernels"))
    counts = ", ".join(f"{n:,} {t.replace('_', ' ')}s" for t, n in ov.records.items() if n)
    facts.append(("Recorded", counts or "no GPU activity"))
    if ov.capture is not None:
        facts.append(("Capture", capture_line(ov.capture)))
    facts.append(("Dropped records", ", ".join(f"{k} {v:,}" for k, v in ov.dropped.items()) or "none"))
    if ov.overhead is not None:
        facts.append(("Overhead", overhead_line(ov.overhead)))
    return {"facts": facts, "not_recorded": list(ov.not_recorded.values()), "warnings": ov.warnings,
            "complete": report.complete}


def diagnosis_data(report: Report, origin: int) -> dict[str, Any]:
    """Return the step-time breakdown (table and chart series) and the findings, each with the time
    span of the timeline it is about (the step it names, else its process's first steady step), in
    ns from ``origin``."""
    from ...analysis.diagnosis import diagnose
    from ..findings_json import as_dict

    diag = diagnose(report)
    plain = as_dict(diag)
    breakdown = diag.breakdown_table()
    series = []
    for p in plain["processes"]:
        mean = p["mean_ns"]
        series.append({"pid": p["pid"], "parts": [[diag.PART_LABELS[k], human(mean[k], "ns"), mean[k]]
                                                  for k in diag.PART_NAMES if k in mean and round(mean[k])]})
    findings = []
    for f in diag.findings:
        item = {k: _jsonable(v) for k, v in f.as_dict().items()}
        item["saving_text"] = duration(f.saving_ns)
        item["target"] = _target(f, plain["processes"], origin)
        findings.append(item)
    return {"breakdown": table_data(breakdown), "series": series, "findings": findings,
            "skipped": plain["skipped"], "notes": plain["notes"], "step_source": plain["step_source"]}


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return _plain(v)


def _target(f: Any, processes: list[dict[str, Any]], origin: int) -> dict[str, int] | None:
    """The span a finding is about (timeline times): the step its location names, else its
    process's first steady step."""
    import re

    procs = [p for p in processes if f.pid is None or p["pid"] == f.pid]
    steps = [s for p in procs for s in p["steps"]]
    if not steps:
        return None
    named = re.search(r"\bstep (\d+)\b", f.location or "")
    chosen = None
    if named:
        chosen = next((s for s in steps if str(s["step"]) == named.group(1)), None)
    chosen = chosen or next((s for s in steps if not s["warmup"]), steps[0])
    return {"start": int(chosen["start_ns"]) - origin, "end": int(chosen["start_ns"] + chosen["duration_ns"]) - origin}


def stats_data(report: Report) -> list[dict[str, Any]]:
    """Return every report of ``gpuscope stats``, in its order, as :func:`table_data`."""
    from ...analysis import stats_reports
    from ..output_cache import stats_table

    out = []
    for name, fn in stats_reports().items():
        try:
            out.append(table_data(stats_table(report, name, fn, {"libraries": False})))
        except GpuscopeError as exc:
            if not past_limit(exc):
                raise
            out.append({"name": name, "title": name, "notes": [left_out(exc)], "columns": [], "rows": [], "left_out": True})
    return out


def past_limit(exc: GpuscopeError) -> bool:
    """Whether ``exc`` says a query used up the memory or time a report's reader may use (the
    message names the setting that raises it), not that the report is damaged or the query wrong."""
    return isinstance(exc, ReadLimitError)


def left_out(exc: GpuscopeError) -> str:
    """The page's line for a part it left out: the limit's own message, with its setting."""
    return f"Left out of this page, past the limit of what gpuscope may use to read the report: {exc}"


def roofline_data(report: Report) -> dict[str, Any]:
    """Return the roofline: the device's ceilings and one point per kernel and per layer (the
    columns of ``kernel_points``), with the texts a tooltip shows."""
    from ...analysis.roofline.ceilings import LABELS, for_report
    from ...analysis.roofline.points import kernel_points, layer_points

    try:
        ceilings = for_report(report)
    except GpuscopeError as exc:
        if not past_limit(exc):
            raise
        return {"device": "?", "roofs": [], "kernels": [], "layers": [], "left_out": left_out(exc)}
    roofs = [{"key": k, "label": LABELS.get(k, k), "value": float(v), "source": src,
              "kind": "bandwidth" if k in ("dram", "l2") else "flops",
              "text": scaled(v, "B/s" if k in ("dram", "l2") else "FLOP/s")} for k, v, src in ceilings.rows()]

    def points(df: pd.DataFrame) -> list[dict[str, Any]]:
        out = []
        for r in df.to_dict("records"):
            if not (r["intensity"] and r["intensity"] > 0 and r["achieved_flops_per_s"] and r["achieved_flops_per_s"] > 0):
                continue
            out.append({"name": str(r["name"]), "layer": None if r["layer"] is None else str(r["layer"]),
                        "x": float(r["intensity"]), "y": float(r["achieved_flops_per_s"]), "bound": str(r["bound"]),
                        "time_ns": float(r["time_ns"]), "kernels": int(r["kernels"]),
                        "flops_text": scaled(r["achieved_flops_per_s"], "FLOP/s"),
                        "intensity_text": f"{r['intensity']:.3g} FLOP/B", "time_text": duration(r["time_ns"]),
                        "efficiency_text": human(None if r["efficiency"] != r["efficiency"] else 100 * r["efficiency"], "percent")})
        return out

    try:
        return {"device": ceilings.device, "roofs": roofs, "kernels": points(kernel_points(report, ceilings)),
                "layers": points(layer_points(report, ceilings))}
    except GpuscopeError as exc:
        if not past_limit(exc):
            raise
        return {"device": ceilings.device, "roofs": roofs, "kernels": [], "layers": [], "left_out": left_out(exc)}


def timeline_static(index: TimelineIndex, report: Report | None = None, budget: int = STATIC_SLICES) -> dict[str, Any]:
    """Return the timeline for a file: the tracks, every lane's slices while they fit in ``budget``
    (:func:`whole_first`: the lanes of the heaviest slices first), the others as :data:`STATIC_PX`
    buckets over the run, and the counters; with ``report``, the details of the GPU operations the
    file holds (:func:`file_details`). Times are timeline times (ns from the index's start)."""
    span = max(index.end_ns - index.start_ns, 1) + 1
    left = budget
    lanes = []
    for lane in whole_first(index.lanes):
        if len(lane) <= left:
            left -= len(lane)
            lanes.append({"lane": lane.id, "kind": "slices", "first": 0,
                          "start": (lane.start - index.start_ns).tolist(), "end": (lane.end - index.start_ns).tolist(),
                          "name": lane.name.tolist()})
        else:
            lanes.append(lane_window(lane, index.start_ns, index.start_ns + span, STATIC_PX, max_slices=0))
    lanes.sort(key=lambda w: w["lane"])
    out = {**index.describe(), "names": index.names, "static": {"t0": 0, "t1": span, "px": STATIC_PX, "lanes": lanes},
           "counters": counters(index, 0, span, STATIC_PX)}
    if report is not None:
        out["details"] = file_details(report, index, [w["lane"] for w in lanes if w["kind"] == "slices"])
    return out


def whole_first(lanes: list[Lane]) -> list[Lane]:
    """``lanes`` in the order a file takes them whole while they fit its budget: the heaviest slices
    first (the most busy time per slice: long kernels and steps before short API calls and sampled
    stacks), so that a budget of slices holds as much of the run's time as slices as it can; of
    equal weight, the smaller lane first, then by id. A lane without slices costs nothing."""
    def weight(lane: Lane) -> tuple[float, int, int]:
        n = len(lane)
        return (-(int(lane.cum[-1]) / n) if n else -float("inf"), n, lane.id)

    return sorted(lanes, key=weight)


def detail_note(index: TimelineIndex, timeline: dict[str, Any], viewer: str) -> str | None:
    """Return the line that says how much of the timeline a file (:func:`timeline_static`) holds as
    slices, when it left some out; None when it holds every slice."""
    lanes = timeline["static"]["lanes"]
    summarized = [w for w in lanes if w["kind"] != "slices"]
    if not summarized:
        return None
    whole = sum(len(w["start"]) for w in lanes if w["kind"] == "slices")
    return (f"Timeline: {index.events():,} slices, more than one file holds whole; {whole:,} of them are here as "
            f"slices, and {len(summarized):,} of {len(lanes):,} lanes are drawn as summaries at "
            f"{timeline['static']['px']:,} points over the run (busy share, slice count and dominant name at each): "
            f"{viewer} shows every slice. The tables, breakdown and findings cover the whole run.")


def file_details(report: Report, index: TimelineIndex, lane_ids: list[int]) -> dict[str, Any]:
    """Return the details of the GPU operations of ``lane_ids`` for a file, compactly: ``{"fields":
    [[[label, text], ...], ...], "lanes": {lane: {"fields": [position in fields, or -1 per slice],
    "correlation": [id or None per slice]}}}``; an entry of fields lists what
    :func:`...analysis.timeline.details.details` gives after start and duration (texts as the
    viewer shows them), its ``Correlation`` text left empty (the slice's own goes there), and,
    last, ``Launched by`` when the launch is known. Operations that share all but their
    correlation share an entry."""
    from ...analysis.timeline.file_details import gpu_details

    found = gpu_details(report, index, lane_ids)
    entries: dict[tuple[tuple[str, str], ...], int] = {}
    per_lane: dict[int, dict[str, list[Any]]] = {}
    for (lane, i), (fields, launch) in sorted(found.items()):
        texts = [(label, "" if label == "Correlation" else human(v, unit)) for label, v, unit in fields]
        if launch is not None:
            texts.append(("Launched by", f"{launch['name']} on thread {launch['tid']}"))
        key = tuple(texts)
        pos = entries.setdefault(key, len(entries))
        corr = next((v for label, v, _ in fields if label == "Correlation"), None)
        d = per_lane.setdefault(lane, {"fields": [-1] * len(index.lanes[lane]), "correlation": [None] * len(index.lanes[lane])})
        d["fields"][i] = pos
        d["correlation"][i] = None if corr is None else int(corr)
    return {"fields": [[list(t) for t in key] for key in entries], "lanes": {str(k): v for k, v in per_lane.items()}}

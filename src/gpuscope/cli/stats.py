"""``gpuscope stats``: the nsys-style summary reports of a report file."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..analysis import STATS_REPORTS, STORED_STATS, stats_reports, stored_stats
from ..analysis.distributed.fleet import FLEET_REPORTS
from ..errors import GpuscopeError
from ..reporters import FORMATS
from ..reporters.terminal import render_present
from ..safe_text import terminal
from .fleet import add_engine, is_fleet, run_stats
from ..analysis.heap import freed_memory_kept, give_back
from .output import emit

if TYPE_CHECKING:
    from ..trace.report import Report


NAME = "stats"
HELP = "Print summary reports (kernels, API calls, memory operations, ranges, layers, steps) of a report file."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", nargs="+", help="a .gpuscope report file; or several, or a directory of them (or of "
                   "their Parquet exports): then the fleet reports " + ", ".join(FLEET_REPORTS))
    p.add_argument(
        "-r", "--report", dest="names", action="append", metavar="NAME",
        help="report to print (repeatable); one of: " + ", ".join(STATS_REPORTS) + ". Default: all",
    )
    p.add_argument("-f", "--format", choices=list(FORMATS), default="table")
    p.add_argument("--libraries", action="store_true",
                   help="CPU hotspots: show library frames as they are, instead of counting their time to "
                        "the program's line that called them")
    p.add_argument("--output", help="write to this file instead of standard output")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing --output file")
    add_engine(p)


def run(args: argparse.Namespace) -> int:
    with freed_memory_kept():  # arrays of millions of rows made and freed in turn: see heap.py
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if is_fleet(args.report):
        return run_stats(args)
    args.report = args.report[0]
    names = args.names or list(STATS_REPORTS)
    unknown = [n for n in names if n not in STATS_REPORTS]
    if unknown:
        raise GpuscopeError(f"unknown report {', '.join(unknown)}; choose from {', '.join(STATS_REPORTS)}")
    from ..trace.report import Report

    with Report.open(args.report) as report:
        if not report.complete:
            print(f"gpuscope: warning: {args.report} was not finished (the profiler was stopped); "
                  "showing what was recorded", file=sys.stderr)
        _say_capture(args.report, report)
        reports = stats_reports()
        if args.libraries:
            from functools import partial

            for name in ("cpu_hotspots", "cpu_hotspots_lines"):
                reports[name] = partial(reports[name], libraries=True)
        from ..reporters.output_cache import gpu_operations, stats_table

        # a large report's tables are kept beside it: the next command asking for one reads it
        options = {"libraries": bool(args.libraries)}
        stored = stored_stats(report) if any(n in STORED_STATS for n in names) else {}  # computed at close
        operations = gpu_operations(report)
        tables = []
        for n in names:
            tables.append(stored[n] if n in stored else stats_table(report, n, reports[n], options, operations))
            give_back()  # one table's arrays are gone: its peak is not kept under the next one's
        # every report asked for by name is printed, empty or not; of all, those with rows
        text = render_present(tables) if args.format == "table" and not args.names else \
            FORMATS[args.format](tables)
    emit(text, args.output, args.force_overwrite)
    return 0


def _say_capture(path: str, report: Report) -> None:
    """Say on stderr that a capture range limited the report, and what it missed."""
    from ..analysis.steps.capture import capture_summary

    summary = capture_summary(report)
    if summary is None:
        return
    print(terminal(f"gpuscope: note: {path} holds part of the run (capture range: {summary.description})"),
          file=sys.stderr)
    for problem in summary.problems:
        print(terminal(f"gpuscope: warning: {problem}"), file=sys.stderr)

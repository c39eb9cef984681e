"""``gpuscope report``: the report as one self-contained HTML file to attach to a bug or a pull request."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import GpuscopeError
from ..safe_text import terminal

NAME = "report"
HELP = ("Write one self-contained HTML file (no network needed) with the run, breakdown, findings, "
        "timeline, roofline and every stats table.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..reporters.html import FILE_EVENT_CAP

    p.add_argument("report", help="a .gpuscope report file")
    p.add_argument("-o", "--output", help="the HTML file to write (default: the report's name with .html)")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing output file")
    p.add_argument("--max-events", type=int, default=FILE_EVENT_CAP, metavar="N",
                   help=f"refuse reports with more timeline slices than this (default {FILE_EVENT_CAP:,}); "
                        "gpuscope view shows any size")


def run(args: argparse.Namespace) -> int:
    from ..analysis.timeline_tracks import build_index
    from ..reporters.html import file_page
    from ..trace.outputs import check, write_output
    from ..trace.report import Report

    out = Path(args.output) if args.output else Path(Path(args.report).name).with_suffix(".html")
    check(out, args.force_overwrite)  # before the report is read
    with Report.open(args.report) as report:
        if not report.complete:
            print(f"gpuscope: warning: {args.report} was not finished (the profiler was stopped); "
                  "showing what was recorded", file=sys.stderr)
        index = build_index(report)
        events = index.events()
        if events > args.max_events:
            raise GpuscopeError(f"{args.report} has {events:,} timeline slices, more than one HTML file holds "
                                f"(--max-events {args.max_events:,}): open it with gpuscope view {args.report}")
        text = file_page(report, index)
    write_output(out, text.encode("utf-8"), args.force_overwrite)
    print(f"gpuscope: wrote {terminal(str(out))} ({len(text.encode()) / 1e6:.1f} MB); open it in a browser", file=sys.stderr)
    return 0

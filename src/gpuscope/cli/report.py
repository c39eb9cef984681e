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
    from ..reporters.html.content import STATIC_SLICES

    p.add_argument("report", help="a .gpuscope report file")
    p.add_argument("-o", "--output", help="the HTML file to write (default: the report's name with .html)")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing output file")
    p.add_argument("--max-events", type=int, default=STATIC_SLICES, metavar="N",
                   help=f"timeline slices the file holds whole (default {STATIC_SLICES:,}); the lanes past them "
                        "are drawn as summaries per pixel, and the page says so; gpuscope view shows every slice")


def run(args: argparse.Namespace) -> int:
    from ..analysis.timeline_tracks import build_index
    from ..reporters.html import file_page
    from ..trace.outputs import check, write_output
    from ..trace.report import Report

    if args.max_events < 0:
        raise GpuscopeError(f"--max-events {args.max_events}: give a number of slices, 0 or more")
    out = Path(args.output) if args.output else Path(Path(args.report).name).with_suffix(".html")
    check(out, args.force_overwrite)  # before the report is read
    with Report.open(args.report) as report:
        if not report.complete:
            print(f"gpuscope: warning: {args.report} was not finished (the profiler was stopped); "
                  "showing what was recorded", file=sys.stderr)
        index = build_index(report)
        text = file_page(report, index, budget=args.max_events, viewer=f"gpuscope view {args.report}")
    write_output(out, text.encode("utf-8"), args.force_overwrite)
    print(f"gpuscope: wrote {terminal(str(out))} ({len(text.encode()) / 1e6:.1f} MB); open it in a browser", file=sys.stderr)
    return 0

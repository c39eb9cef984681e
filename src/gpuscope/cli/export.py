"""``gpuscope export``: convert a report for other viewers (Chrome trace JSON for Perfetto UI)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..safe_text import terminal

NAME = "export"
HELP = "Convert a report to another format (chrome: a trace for Perfetto UI or chrome://tracing)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", help="a .gpuscope report file")
    p.add_argument("-f", "--format", choices=["chrome"], default="chrome")
    p.add_argument("-o", "--output", help="output file (default: REPORT with .trace.json)")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing output file")


def run(args: argparse.Namespace) -> int:
    out = Path(args.output) if args.output else Path(args.report).with_suffix(".trace.json")
    from ..trace import chrome
    from ..trace.outputs import check, open_output
    from ..trace.report import Report

    check(out, args.force_overwrite)  # before the report is read
    with Report.open(args.report) as report, open_output(out, args.force_overwrite) as fh:
        n = chrome.write(report, fh)
    print(f"gpuscope: wrote {terminal(str(out))} ({n:,} events); open it in https://ui.perfetto.dev", file=sys.stderr)
    return 0

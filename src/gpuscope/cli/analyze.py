"""``gpuscope analyze``: where the step time goes, and the fixes ranked by estimated saving."""

from __future__ import annotations

import argparse
import sys

from ..reporters import DIAGNOSIS_FORMATS
from ..errors import GpuscopeError
from .fleet import is_fleet, run_analyze
from ..analysis.heap import freed_memory_kept
from .output import emit

NAME = "analyze"
HELP = "Break each step's time into GPU busy and idle parts and rank the fixes by estimated saving."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", nargs="+", help="a .gpuscope report file (several, or a directory: each in turn)")
    p.add_argument("-f", "--format", choices=list(DIAGNOSIS_FORMATS), default="table")
    p.add_argument("--output", help="write to this file instead of standard output")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing --output file")
    p.add_argument("--min-share", type=float, default=1.0, metavar="PERCENT",
                   help="leave out findings that save less than this share of the step (default 1)")


def run(args: argparse.Namespace) -> int:
    with freed_memory_kept():  # arrays of millions of rows made and freed in turn: see heap.py
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if not 0.0 <= args.min_share <= 100.0:
        raise GpuscopeError(f"--min-share {args.min_share:g}: give a percentage from 0 to 100")
    from ..analysis.diagnosis import diagnose
    from ..reporters import diagnosis_formats
    from ..reporters import output_cache
    from ..trace.report import Report

    if is_fleet(args.report):
        return run_analyze(args)
    args.report = args.report[0]
    options = {"format": args.format, "min_share": args.min_share}
    with Report.open(args.report) as report:
        if not report.complete:
            print(f"gpuscope: warning: {args.report} was not finished (the profiler was stopped); "
                  "analyzing what was recorded", file=sys.stderr)
        # a large report's output is kept beside it: the same command again answers at once
        keep = output_cache.worth_keeping(output_cache.gpu_operations(report))
        text = output_cache.cached(args.report, NAME, options) if keep else None
        if text is None:
            text = diagnosis_formats()[args.format](diagnose(report, min_share=args.min_share / 100.0))
            if keep:
                output_cache.keep(args.report, NAME, options, text)
    emit(text, args.output, args.force_overwrite)
    return 0

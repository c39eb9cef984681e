"""``gpuscope report``: the report as one self-contained HTML file to attach to a bug or a pull request."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from ..errors import GpuscopeError
from ..safe_text import terminal

NAME = "report"
HELP = ("Write one self-contained HTML file (no network needed) with the run, breakdown, findings, "
        "timeline, roofline and every stats table.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..reporters.page_budget import STATIC_SLICES

    p.add_argument("report", help="a .gpuscope report file")
    p.add_argument("-o", "--output", help="the HTML file to write (default: the report's name with .html)")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing output file")
    p.add_argument("--max-events", type=int, default=STATIC_SLICES, metavar="N",
                   help=f"timeline slices the file holds whole (default {STATIC_SLICES:,}); the lanes past them "
                        "are drawn as summaries per pixel, and the page says so; gpuscope view shows every slice")
    p.add_argument("--try", dest="tried", metavar="RESULT.json",
                   help="add a section of the fixes gpuscope try measured: RESULT.json is what "
                        "gpuscope try --json printed for this report's program")


def run(args: argparse.Namespace) -> int:
    from ..analysis.timeline.tracks import build_index
    from ..reporters.html import file_page
    from ..trace.outputs import check, write_output
    from ..trace.report import Report

    if args.max_events < 0:
        raise GpuscopeError(f"--max-events {args.max_events}: give a number of slices, 0 or more")
    out = Path(args.output) if args.output else Path(Path(args.report).name).with_suffix(".html")
    check(out, args.force_overwrite)  # before the report is read
    tried = _tried(args.tried) if args.tried else None  # a file that is no try result: said before the work
    with Report.open(args.report) as report:
        if not report.complete:
            print(f"gpuscope: warning: {args.report} was not finished (the profiler was stopped); "
                  "showing what was recorded", file=sys.stderr)
        if tried is not None:
            _check_program(tried[1], report.meta.get("command"), args.tried)
        missing: list[str] = []
        # the index made in the page and dropped there once its timeline is drawn
        text = file_page(report, lambda: build_index(report), budget=args.max_events,
                         viewer=f"gpuscope view {args.report}",
                         tried=None if tried is None else tried[0], missing=missing)
    if missing:
        print(f"gpuscope: warning: left out of the page, past the memory or time gpuscope may use to read the "
              f"report (GPUSCOPE_MEMORY_LIMIT, GPUSCOPE_QUERY_TIME_LIMIT raise them; the page says which): "
              f"{', '.join(missing)}", file=sys.stderr)
    write_output(out, text.encode("utf-8"), args.force_overwrite)
    print(f"gpuscope: wrote {terminal(str(out))} ({len(text.encode()) / 1e6:.1f} MB); open it in a browser", file=sys.stderr)
    return 0


def _tried(path: str) -> tuple[dict[str, Any], list[str]]:
    """The page's section of the try result at ``path`` and the command it ran. A file that is not a
    result is said in one line (exit 2); any failure after it was read is gpuscope's own."""
    from ..experiment.result_file import read
    from ..reporters.html.try_section import try_data
    from . import failures

    try:
        result = read(path)
        return try_data(result, path), result.program.argv
    except GpuscopeError:  # the file's fault, said as it is
        raise
    except Exception as exc:  # noqa: BLE001
        if os.environ.get(failures.DEBUG_ENV):
            raise
        raise failures.own(exc) from None


def _check_program(argv: list[str], command: object, path: str) -> None:
    """Warn when the try result ran another program than the report recorded (``gpuscope try`` runs
    the report's own command, so a result of this report names the same one)."""
    if isinstance(command, list) and command != argv:
        print(f"gpuscope: warning: {terminal(path)} tried {terminal(shlex.join(argv))}, not this report's program "
              f"({terminal(shlex.join(str(c) for c in command))}); showing it anyway", file=sys.stderr)

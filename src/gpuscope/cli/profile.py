"""``gpuscope profile``: run a program under the collectors and write a report."""

from __future__ import annotations

import argparse
import sys

from ..analysis.cuda_summaries import REPORTS
from ..analysis.overview import overview
from ..capture import launcher, session
from ..reporters import overview as overview_text
from ..reporters import terminal
from ..trace.files import output_path
from ..trace.report import Report
from ..trace.writer import Diagnostic

NAME = "profile"
HELP = "Run a program and record its GPU (and CPU) activity into a report file."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", help="report file (default: report1.gpuscope, report2, ...)")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing report file")
    p.add_argument(
        "-t", "--trace",
        help="collectors, comma-separated: " + ", ".join(
            f"{k} ({v})" for k, v in session.KNOWN_TRACES.items()
        ) + f". Default: {','.join(session.DEFAULT_TRACE)}",
    )
    p.add_argument("--stats", action="store_true", help="print every stats report at the end")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a Python module, as python -m")
    p.add_argument("program", nargs=argparse.REMAINDER, help="the program and its arguments")


def _say(message: str) -> None:
    print(f"gpuscope: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    trace = session.parse_trace(args.trace)
    command = launcher.resolve_command(list(args.program), args.module)
    output = output_path(args.output, args.force_overwrite)
    printed: set[str] = set()

    def on_diagnostic(d: Diagnostic) -> None:
        pid, level, message = d
        if message not in printed:
            printed.add(message)
            _say(message if level != "error" else f"error: {message}")

    result = session.profile(command, output, trace, on_diagnostic)
    with Report.open(result.report) as report:
        text = overview_text.render(overview(report))
        if args.stats:
            text += terminal.render([fn(report) for fn in REPORTS.values()])
    sys.stderr.write(text)
    _say(f"program ended with {result.exit.describe()}")
    _say(f"wrote {result.report} ({result.records:,} records); "
         f"see it with: gpuscope stats {result.report}")
    return result.exit.shell_code

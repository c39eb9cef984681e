"""``gpuscope diff``: compare the steps of two reports (or two sets of repeated runs), and gate CI on it."""

from __future__ import annotations

import argparse
import sys

from ..errors import GpuscopeError
from ..safe_text import terminal
from .output import emit

NAME = "diff"
HELP = ("Compare two reports (or sets of repeated runs): step time with a confidence interval, and what "
        "changed per layer, kernel and operator. With --fail-if-slower PCT, exit 1 when the step time is "
        "significantly slower by more than PCT%%.")

GATE_FAILED = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("reports", nargs="*", metavar="REPORT", help="BASE NEW (or use --base and --new)")
    p.add_argument("--base", nargs="+", default=[], metavar="REPORT", help="reports of the base runs (pooled)")
    p.add_argument("--new", nargs="+", default=[], metavar="REPORT", help="reports of the new runs (pooled)")
    p.add_argument("-f", "--format", choices=["text", "json", "markdown"], default="text")
    p.add_argument("--output", help="write to this file instead of standard output")
    p.add_argument("--fail-if-slower", type=float, metavar="PCT",
                   help="exit 1 when the median step time is significantly slower (its 95%% interval above "
                        "zero) by more than PCT percent")


def _sides(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    base, new = list(args.base), list(args.new)
    rest = list(args.reports)
    if not base and rest:
        base.append(rest.pop(0))
    if not new and rest:
        new.append(rest.pop(0))
    if rest:
        raise GpuscopeError(f"too many reports: give BASE NEW, or --base A1 A2 ... --new B1 B2 ... "
                            f"({' '.join(rest)} left over)")
    if not base or not new:
        raise GpuscopeError("give a base and a new report: gpuscope diff BASE NEW")
    return base, new


def run(args: argparse.Namespace) -> int:
    from ..analysis.diff.compare import diff
    from ..analysis.diff.data import run_data
    from ..reporters.diff import RENDERERS
    from ..trace.report import Report

    base_paths, new_paths = _sides(args)
    if args.fail_if_slower is not None and args.fail_if_slower < 0:
        raise GpuscopeError("--fail-if-slower takes a percentage of zero or more")
    sides = []
    for paths in (base_paths, new_paths):
        runs = []
        for path in paths:
            with Report.open(path) as report:
                runs.append(run_data(report, path))
        sides.append(runs)
    result = diff(sides[0], sides[1])
    for line in result.warnings:
        print(f"gpuscope: warning: {terminal(line)}", file=sys.stderr)
    emit(RENDERERS[args.format](result), args.output)
    if args.fail_if_slower is not None:
        failed, reason = result.gate(args.fail_if_slower)
        print(f"gpuscope: {'FAIL' if failed else 'pass'}: {terminal(reason)}", file=sys.stderr)
        return GATE_FAILED if failed else 0
    return 0

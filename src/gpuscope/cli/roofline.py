"""``gpuscope roofline``: measure a machine's roofs, and place a report's kernels and layers under them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import GpuscopeError
from ..reporters import FORMATS
from ..safe_text import terminal

NAME = "roofline"
HELP = ("Roofline of a report: FLOPs, bytes, intensity, efficiency and bound per kernel and layer; "
        "--calibrate measures this machine's ceilings.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", nargs="?", help="a .gpuscope report file (with PyTorch operators: --trace torch-shapes, the default, or torch-ops)")
    p.add_argument("--calibrate", action="store_true",
                   help="measure DRAM and L2 bandwidth and FLOP/s peaks of this machine and cache them per device")
    p.add_argument("--device", default="auto", help="what --calibrate measures: auto (default), cuda, cuda:N or cpu")
    p.add_argument("-o", "--output", help="write the chart: FILE.png, FILE.svg or FILE.html (needs matplotlib)")
    p.add_argument("--by", choices=("kernel", "layer"), default="kernel", help="one chart point per kernel or layer")
    p.add_argument("-f", "--format", choices=list(FORMATS), default="table")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing chart file")


def _say(message: str) -> None:
    print(f"gpuscope: {terminal(message)}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if not args.report and not args.calibrate:
        raise GpuscopeError("give a report file, or --calibrate to measure this machine's ceilings")
    out = Path(args.output) if args.output else None
    if out is not None and not args.report:
        raise GpuscopeError("-o draws a report's roofline: give the report file")
    if out is not None:
        from ..trace.outputs import check

        check(out, args.force_overwrite)
    from ..analysis.ceilings import ceilings_table, for_report, save

    tables = []
    if args.calibrate:
        from ..run.roof_benchmark import calibrate

        _say(f"measuring the ceilings of {args.device} (a few seconds)")
        measured = calibrate(args.device)
        path = save(measured)
        tables.append(ceilings_table(measured))
        _say(f"wrote {path}")
    if args.report:
        from ..analysis.roofline import (
            kernel_points,
            layer_points,
            roofline_layer_sum,
            roofline_sum,
        )
        from ..trace.report import Report

        with Report.open(args.report) as report:
            ceilings = for_report(report)
            if not args.calibrate:
                tables.append(ceilings_table(ceilings))
            tables += [roofline_sum(report, ceilings), roofline_layer_sum(report, ceilings)]
            points = (kernel_points if args.by == "kernel" else layer_points)(report, ceilings)
        if out is not None:
            if points.empty:
                raise GpuscopeError(f"{args.report} has no FLOPs to draw: record it with --trace torch-shapes or torch-ops")
            from ..reporters import roofline_plot

            roofline_plot.write(points, ceilings, out, f"Roofline of {Path(args.report).name}: {ceilings.device}",
                                args.force_overwrite)
    sys.stdout.write(FORMATS[args.format](tables))
    if out is not None:
        _say(f"wrote {out}; open it in a browser or an image viewer")
    return 0

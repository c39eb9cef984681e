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
    p.add_argument("--repeats", type=int, default=None,
                   help="--calibrate runs its benchmarks this many times and keeps the medians (default 3)")
    p.add_argument("--replace", action="store_true",
                   help="--calibrate caches this run's values even where the cache holds higher ones")
    p.add_argument("-o", "--output", help="write the chart: FILE.png, FILE.svg or FILE.html (needs matplotlib)")
    p.add_argument("--by", choices=("kernel", "layer"), default="kernel", help="one chart point per kernel or layer")
    p.add_argument("-f", "--format", choices=list(FORMATS), default="table")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing chart file")


def _say(message: str) -> None:
    print(f"gpuscope: {terminal(message)}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if (args.repeats is not None or args.replace) and not args.calibrate:
        raise GpuscopeError("--repeats and --replace go with --calibrate")
    if not args.report and not args.calibrate:
        raise GpuscopeError("give a report file, or --calibrate to measure this machine's ceilings")
    out = Path(args.output) if args.output else None
    if out is not None and not args.report:
        raise GpuscopeError("-o draws a report's roofline: give the report file")
    if out is not None:
        from ..trace.outputs import check

        check(out, args.force_overwrite)
    from ..analysis.roofline.ceilings import ceilings_table, for_report, save

    tables = []
    if args.calibrate:
        from ..run.roof_benchmark import calibrate

        from ..analysis.roofline.calibration import calibration_table, merge
        from ..analysis.roofline.ceilings import LABELS, load_cached

        _say(f"measuring the ceilings of {args.device} (about ten seconds)")
        measured = calibrate(args.device, repeats=args.repeats)
        try:
            cached = load_cached(measured.device)
        except GpuscopeError as exc:
            _say(f"{exc}: replacing it")
            cached = None
        kept, choices = merge(cached, measured, force=args.replace)
        path = save(kept)
        tables += [calibration_table(measured, choices), ceilings_table(kept)]
        shaky = measured.unstable()
        if shaky:
            _say("warning: unstable machine: " + ", ".join(f"{LABELS.get(k, k)} varied {100 * v:.0f}%" for k, v in
                                                          shaky.items()) + " over the repeats; calibrate again when it is idle")
        old = [LABELS.get(c.key, c.key) for c in choices if c.kept == "cached"]
        if old:
            _say(f"kept the cached {', '.join(old)} (higher or steadier than this run: see the table); "
                 "--replace takes this run's")
        _say(f"wrote {path}")
    if args.report:
        from ..analysis.roofline.points import kernel_points, layer_points, roofline_layer_sum, roofline_sum
        from ..trace.report import Report

        from ..reporters import output_cache

        # a large report's text is kept beside it (not a chart, nor beside a calibration's tables)
        options = {"format": args.format}
        with Report.open(args.report) as report:
            keep = out is None and not args.calibrate and output_cache.worth_keeping(output_cache.gpu_operations(report))
            text = output_cache.cached(args.report, NAME, options) if keep else None
            if text is not None:
                sys.stdout.write(text)
                return 0
            ceilings = for_report(report)
            if not args.calibrate:
                tables.append(ceilings_table(ceilings))
            tables += [roofline_sum(report, ceilings), roofline_layer_sum(report, ceilings)]
            # the points are drawn only: without a chart to draw they are not derived
            points = (kernel_points if args.by == "kernel" else layer_points)(report, ceilings) if out else None
        if keep:
            text = FORMATS[args.format](tables)
            output_cache.keep(args.report, NAME, options, text)
            sys.stdout.write(text)
            return 0
        if out is not None and points is not None:
            if points.empty:
                raise GpuscopeError(f"{args.report} has no FLOPs to draw: record it with --trace torch-shapes or torch-ops")
            from ..reporters import roofline_plot

            roofline_plot.write(points, ceilings, out, f"Roofline of {Path(args.report).name}: {ceilings.device}",
                                args.force_overwrite)
    sys.stdout.write(FORMATS[args.format](tables))
    if out is not None:
        _say(f"wrote {out}; open it in a browser or an image viewer")
    return 0

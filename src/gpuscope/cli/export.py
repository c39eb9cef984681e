"""``gpuscope export``: convert a report for other viewers (Chrome trace JSON for Perfetto UI)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import GpuscopeError

NAME = "export"
HELP = ("Convert a report to another format (chrome: a trace for Perfetto UI or chrome://tracing; parquet: a "
        "folder with one Parquet file per table).")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", help="a .gpuscope report file")
    p.add_argument("-f", "--format", choices=["chrome", "parquet"], default="chrome")
    p.add_argument("-o", "--output", help="output file (default: REPORT with .trace.json; for parquet a folder, "
                                          "REPORT with .parquet)")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing output file")


def run(args: argparse.Namespace) -> int:
    if args.format == "parquet":
        return _parquet(args)
    out = Path(args.output) if args.output else Path(args.report).with_suffix(".trace.json")
    if out.exists() and not args.force_overwrite:
        raise GpuscopeError(f"output {out} exists; use --force-overwrite or choose another -o")
    from ..trace import chrome
    from ..trace.report import Report

    with Report.open(args.report) as report:
        tmp = out.with_name(f".{out.name}.partial")
        try:
            with open(tmp, "w") as fh:
                n = chrome.write(report, fh)
            os.replace(tmp, out)
        except OSError as exc:
            raise GpuscopeError(f"cannot write {out}: {exc.strerror}") from None
        finally:
            tmp.unlink(missing_ok=True)
    print(f"gpuscope: wrote {out} ({n:,} events); open it in https://ui.perfetto.dev", file=sys.stderr)
    return 0


def _parquet(args: argparse.Namespace) -> int:
    from ..trace import parquet
    from ..trace.report import Report

    out = Path(args.output) if args.output else Path(args.report).with_suffix(".parquet")
    if out.exists() and not args.force_overwrite:
        raise GpuscopeError(f"output {out} exists; use --force-overwrite or choose another -o")
    with Report.open(args.report) as report:
        try:
            counts = parquet.write(report, out)
        except OSError as exc:
            raise GpuscopeError(f"cannot write {out}: {exc.strerror}") from None
    print(f"gpuscope: wrote {out}/ ({len(counts)} tables, {sum(counts.values()):,} rows; columns in "
          f"{out}/schema.json)", file=sys.stderr)
    return 0

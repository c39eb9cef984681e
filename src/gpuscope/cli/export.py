"""``gpuscope export``: convert a report for other tools (the formats of trace/exports.py: Chrome trace JSON, Parquet)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import GpuscopeError
from ..safe_text import terminal
from ..trace.exports import EXPORTS, writer

NAME = "export"
HELP = "Convert a report to another format (" + "; ".join(f"{n}: {f.help}" for n, f in EXPORTS.items()) + ")."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", help="a .gpuscope report file")
    p.add_argument("-f", "--format", choices=list(EXPORTS), default="chrome")
    p.add_argument("-o", "--output", help="output file, or folder for parquet (default: REPORT with the "
                                          "format's suffix: .trace.json, .parquet)")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing output file")


def run(args: argparse.Namespace) -> int:
    fmt = EXPORTS[args.format]
    if fmt.folder:
        return _folder(args)
    out = Path(args.output) if args.output else Path(args.report).with_suffix(fmt.suffix)
    from ..trace.outputs import check, open_output
    from ..trace.report import Report

    write = writer(args.format)
    check(out, args.force_overwrite)  # before the report is read
    with Report.open(args.report) as report, open_output(out, args.force_overwrite) as fh:
        n = write(report, fh)
    print(f"gpuscope: wrote {terminal(str(out))} ({n:,} events); open it in {fmt.opens_in}", file=sys.stderr)
    return 0


def _folder(args: argparse.Namespace) -> int:
    from ..trace.outputs import check
    from ..trace.report import Report

    fmt = EXPORTS[args.format]
    out = Path(args.output) if args.output else Path(args.report).with_suffix(fmt.suffix)
    if out.is_dir() and not out.is_symlink():
        if not args.force_overwrite:
            raise GpuscopeError(f"output {out} exists; use --force-overwrite or choose another -o")
    else:
        check(out, args.force_overwrite)
    with Report.open(args.report) as report:
        try:
            counts = writer(args.format)(report, out)
        except OSError as exc:
            raise GpuscopeError(f"cannot write {out}: {exc.strerror}") from None
    assert isinstance(counts, dict)
    print(f"gpuscope: wrote {terminal(str(out))}/ ({len(counts)} tables, {sum(counts.values()):,} rows); open it "
          f"with {fmt.opens_in}", file=sys.stderr)
    if args.format == "parquet" and not _parquet_engine():
        print("gpuscope: note: pandas.read_parquet needs pyarrow, which is not installed: pip install "
              "'gpuscope[parquet]' (DuckDB reads the files as they are)", file=sys.stderr)
    return 0


def _parquet_engine() -> bool:
    """Whether pandas can read Parquet here (it needs pyarrow or fastparquet; gpuscope writes with DuckDB)."""
    from importlib.util import find_spec

    return any(find_spec(name) is not None for name in ("pyarrow", "fastparquet"))

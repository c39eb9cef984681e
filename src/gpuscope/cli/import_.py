"""``gpuscope import``: a PyTorch profiler trace or an Nsight Systems SQLite export as a report."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import GpuscopeError
from ..trace.schema import FILE_SUFFIX

if TYPE_CHECKING:
    from ..trace.importers import Imported

DEBUG_ENV = "GPUSCOPE_DEBUG"  # set to see the traceback of a failure said in one line

NAME = "import"
HELP = ("Import a PyTorch profiler (Kineto) JSON trace (.json, .json.gz) or an Nsight Systems SQLite "
        "export as a gpuscope report.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="a torch.profiler trace (.json or .json.gz) or an nsys export (.sqlite)")
    p.add_argument("-o", "--output", metavar="NAME",
                   help=f"report file ({FILE_SUFFIX} is added when missing; default: the trace's name with {FILE_SUFFIX})")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing report file")


def default_output(trace: Path) -> Path:
    """The report name for ``trace``: its name without ``.json``, ``.gz``, ``.sqlite``, plus the suffix."""
    name = trace.name
    for ext in (".gz", ".json", ".sqlite", ".pt.trace"):
        name = name.removesuffix(ext)
    return trace.with_name(name + FILE_SUFFIX)


def run(args: argparse.Namespace) -> int:
    from ..trace.outputs import check

    source = Path(args.trace)
    if not source.is_file():
        raise GpuscopeError(f"{source}: no such trace file")
    out = Path(args.output) if args.output else default_output(source)
    if out.suffix != FILE_SUFFIX:  # as profile does: -o run writes run.gpuscope
        out = out.with_name(out.name + FILE_SUFFIX)
    check(out, args.force_overwrite)  # a symbolic link counts as existing; with force it is replaced, not followed
    done = _imported(source, out)
    c = done.counts
    print(f"gpuscope: wrote {out} ({c.get('kernel', 0):,} kernels, {c.get('memcpy', 0) + c.get('memset', 0):,} "
          f"copies and sets, {c.get('api_call', 0):,} API calls, {c.get('torch_op', 0):,} operators) from "
          f"{done.format} trace {source.name}; look at it with gpuscope stats {out}", file=sys.stderr)
    return 0


def _imported(source: Path, out: Path) -> Imported:
    """Return what :func:`import_trace` wrote; what else it raises (a trace shaped as no profiler
    writes one) becomes one line naming the trace (``GPUSCOPE_DEBUG=1``: the traceback)."""
    from ..trace.importers import import_trace

    try:
        return import_trace(source, out)
    except (GpuscopeError, KeyboardInterrupt, BrokenPipeError, OSError):  # said as every command says them
        raise
    except Exception as exc:  # noqa: BLE001
        if os.environ.get(DEBUG_ENV):
            raise
        if isinstance(exc, RecursionError):
            raise GpuscopeError(f"{source}: values nested too deep to import") from None
        text = str(exc).strip().splitlines()
        raise GpuscopeError(f"{source}: cannot import this trace, damaged or of a form gpuscope does not know "
                            f"({type(exc).__name__}: {text[0][:200] if text else ''}); {DEBUG_ENV}=1 shows "
                            "where") from None

"""The per-node reports of one multi-node run, given together to ``stats``, ``analyze`` or ``view``:
merged into one temporary report with their clocks aligned (analysis/distributed/nodes.py), then read as one."""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..safe_text import terminal
from ..trace.schema import FILE_SUFFIX


def report_files(paths: list[str]) -> list[Path] | None:
    """The report files among ``paths`` (a directory: its ``.gpuscope`` files), or None where a path is
    a Parquet export (those are read by the fleet engines only)."""
    out: list[Path] = []
    for given in paths:
        p = Path(given)
        if p.is_file():
            out.append(p)
        elif p.is_dir() and not (p / "schema.json").is_file():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(FILE_SUFFIX))
            if not found:
                return None
            out += found
        else:
            return None
    return out


def nodes_of_one_run(paths: list[str]) -> list[Path] | None:
    """The distinct report files of ``paths`` when they are the nodes of one run (each holds ranks of one
    world size, no rank twice); None otherwise."""
    from ..analysis.distributed.nodes import one_run  # noqa: PLC0415
    from ..trace.report import Report  # noqa: PLC0415

    files = report_files(paths)
    if files is None or len(files) < 2:
        return None
    reports = []
    try:
        for f in files:
            reports.append(Report.open(f))
        distinct, seen, twice = [], {}, []
        for f, r in zip(files, reports):
            key = repr(sorted(r.meta.items()))
            if key in seen:
                twice.append(f"{f} is the same report as {seen[key]}: counted once")
                continue
            seen[key] = f
            distinct.append((f, r))
        if len(distinct) < 2:
            return None
        if not one_run([r for _, r in distinct]):
            return None
        for message in twice:
            print(terminal(f"gpuscope: warning: {message}"), file=sys.stderr)
        return [f for f, _ in distinct]
    finally:
        for r in reports:
            r.close()


@contextlib.contextmanager
def merged(files: list[Path]) -> Iterator[Path]:
    """A temporary report of ``files`` (nodes of one run) with aligned clocks; says on stderr which
    offset each report got and how it was found."""
    from ..analysis.distributed.nodes import merge_nodes  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="gpuscope-nodes-") as work:
        output = Path(work) / ("nodes" + FILE_SUFFIX)
        done = merge_nodes(files, output)
        parts = []
        for name, host, fix, shift in done:
            pid = f", pids + {shift:,}" if shift else ""
            parts.append(f"{name} ({host or 'host unknown'}): {fix.describe()}{pid}")
        say(f"{len(files)} reports are the nodes of one run, read as one; clock offsets: " + "; ".join(parts))
        yield output


def say(message: str) -> None:
    """A note on stderr."""
    print(terminal(f"gpuscope: note: {message}"), file=sys.stderr)

"""``gpuscope stats`` and ``gpuscope analyze`` given several reports (or a directory of them).

Reports that are the nodes of one run (cli/nodes.py) are also merged into one, clocks aligned: then
``analyze`` diagnoses the whole run, and ``stats`` answers every report of one report file besides the
fleet reports."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ..analysis.distributed.fleet import FLEET_REPORTS
from ..errors import GpuscopeError
from ..reporters import FORMATS
from .nodes import merged, nodes_of_one_run
from .output import emit

# what ``stats`` prints by default for the nodes of one run, besides the fleet reports
NODE_REPORTS = ("rank_sum", "collective_sum", "rank_layer_sum")


def add_engine(p: argparse.ArgumentParser) -> None:
    """The ``--engine`` option of a command that reads many reports."""
    p.add_argument("--engine", default="duckdb", metavar="ENGINE",
                   help="with several reports: duckdb (default, embedded) or dask[=SCHEDULER_ADDRESS] (a Dask "
                        "LocalCluster, or the scheduler at that address)")


def is_fleet(paths: list[str]) -> bool:
    """Several reports, or a directory of them (not one report file)."""
    return len(paths) > 1 or (len(paths) == 1 and Path(paths[0]).is_dir())


def _warn(message: str) -> None:
    print(f"gpuscope: warning: {message}", file=sys.stderr)


def run_stats(args: argparse.Namespace) -> int:
    """Print the fleet summaries of the reports given."""
    from ..analysis.distributed.fleet.engines import parse_engine, run_summaries  # noqa: PLC0415
    from ..analysis.distributed.fleet.sources import open_sources, runs_differ  # noqa: PLC0415
    from ..analysis.distributed.fleet.tables import to_table  # noqa: PLC0415

    from ..analysis import STATS_REPORTS, stats_reports  # noqa: PLC0415

    engine, address = parse_engine(args.engine)
    nodes = nodes_of_one_run(args.report)
    per_run = list(STATS_REPORTS) if nodes else []
    names = args.names or list(FLEET_REPORTS) + ([n for n in NODE_REPORTS] if nodes else [])
    unknown = [n for n in names if n not in FLEET_REPORTS and n not in per_run]
    if unknown:
        more = (" (the reports of one report file only where the reports are the nodes of one run)"
                if any(n in STATS_REPORTS for n in unknown) else "")
        raise GpuscopeError(f"with several reports, choose from {', '.join(FLEET_REPORTS)}{more} "
                            f"(not {', '.join(unknown)})")
    fleet = [n for n in names if n in FLEET_REPORTS]
    tables = {}
    with tempfile.TemporaryDirectory(prefix="gpuscope-fleet-") as work:
        if fleet:
            sources = open_sources([str(f) for f in nodes] if nodes else args.report, Path(work), _warn)
            differ = None if nodes else runs_differ(sources)
            if differ:
                print(f"gpuscope: note: {differ}", file=sys.stderr)
            frames = run_summaries(fleet, sources, engine, address, by_report=differ is not None)
            note = [f"{len(sources)} report{'s' if len(sources) > 1 else ''}, engine {engine}."]
            tables.update({n: to_table(n, frames[n], differ is not None, note) for n in fleet})
        single = [n for n in names if n not in FLEET_REPORTS]
        if single and nodes:
            from ..trace.report import Report  # noqa: PLC0415

            with merged(nodes) as path, Report.open(path) as report:
                functions = stats_reports()
                tables.update({n: functions[n](report) for n in single})
        text = FORMATS[args.format]([tables[n] for n in names])
    emit(text, args.output)
    return 0


def run_analyze(args: argparse.Namespace) -> int:
    """The diagnosis of each distinct report given, one after the other, each under its name."""
    import hashlib  # noqa: PLC0415
    import json  # noqa: PLC0415

    from ..analysis.diagnosis import diagnose  # noqa: PLC0415
    from ..reporters import diagnosis_formats  # noqa: PLC0415
    from ..trace.report import Report  # noqa: PLC0415

    nodes = nodes_of_one_run(args.report)
    if nodes:  # one run: one diagnosis of all its nodes, in any format
        with merged(nodes) as path, Report.open(path) as report:
            text = diagnosis_formats()[args.format](diagnose(report, min_share=args.min_share / 100.0))
        emit(text, args.output)
        return 0
    if args.format != "table":
        raise GpuscopeError("with several reports, analyze prints tables only (-f table); run it per report "
                            "for another format")
    seen: dict[str, Path] = {}
    texts = []
    for path in _report_files(args.report):
        with Report.open(path) as report:
            identity = hashlib.sha256(json.dumps(report.meta, sort_keys=True).encode()).hexdigest()
            if identity in seen:
                _warn(f"{path} is the same report as {seen[identity]}: counted once")
                continue
            seen[identity] = path
            texts.append(f"== {path.name} ==\n" + diagnosis_formats()["table"](
                diagnose(report, min_share=args.min_share / 100.0)))
    emit("\n".join(texts), args.output)
    return 0


def _report_files(paths: list[str]) -> list[Path]:
    out = []
    for given in paths:
        p = Path(given)
        out += [p] if p.is_file() else sorted(p.glob("*.gpuscope"))
    if not out:
        raise GpuscopeError("analyze with several reports reads .gpuscope files (not Parquet exports)")
    return out

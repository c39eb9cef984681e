"""``gpuscope kernels``: hardware metrics of a report's kernels, measured by Nsight Compute.

``--ncu`` runs a program under ncu for the chosen kernels: the program the user gives after ``--``
(never the one the report names: a report is data someone may have sent, and opening it must not
run anything it holds); ``--import`` reads a CSV that ncu wrote. Either way the metrics are stored in
the report (table ``kernel_metric``), so later commands (``roofline``) use them; with ``--ncu``, ncu's
CSV is kept beside the report (``REPORT.ncu.csv``, or ``-o``) as every output is written: never
through a symbolic link, never over an existing file without ``--force-overwrite``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import GpuscopeError
from ..reporters import FORMATS
from ..safe_text import terminal

NAME = "kernels"
HELP = "Kernel metrics (throughput, occupancy, DRAM bytes, hit rates, FLOPs) measured by Nsight Compute."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", help="a .gpuscope report file")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--ncu", action="store_true",
                     help="run the program given after -- under ncu (Nsight Compute): gpuscope kernels REPORT --ncu -- "
                          "python train.py")
    how.add_argument("--import", dest="import_csv", metavar="CSV", help="read ncu's CSV (--csv --page raw or details)")
    pick = p.add_mutually_exclusive_group()
    pick.add_argument("--top", type=int, metavar="N", help="profile the N kernels with the most time (default 10)")
    pick.add_argument("-k", "--kernel", metavar="REGEX", help="profile the kernels whose demangled name matches REGEX")
    p.add_argument("--nvtx", action="append", default=[], metavar="RANGE",
                   help="only launches inside this NVTX range (ncu's --nvtx-include syntax); repeatable")
    p.add_argument("--per-kernel", type=int, default=3, metavar="K", help="launches to profile per kernel (default 3)")
    p.add_argument("-c", "--launch-count", type=int, metavar="N", help="launches to profile in all (default: enough "
                   "for --per-kernel of each chosen kernel)")
    p.add_argument("-f", "--format", choices=list(FORMATS), default="table")
    p.add_argument("-o", "--output", metavar="CSV",
                   help="with --ncu: where to keep ncu's CSV (default: the report's name with .ncu.csv)")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing CSV file")
    p.set_defaults(program=[])  # with --ncu: the program after --, as it was profiled (cli.main splits it off)


def _say(message: str) -> None:
    print(f"gpuscope: {terminal(message)}", file=sys.stderr, flush=True)


def _recorded(meta: dict[str, object], processes: list[tuple[object, ...]]) -> str:
    """The command the report says it profiled, quoted and with control characters escaped, to show."""
    import json
    import shlex

    command = meta.get("command")
    if not (isinstance(command, list) and command):
        command = next((json.loads(str(argv)) for (argv,) in processes if argv), None)
    if not command:
        return "(not recorded)"
    text = shlex.join(str(a) for a in command)
    return text.encode("unicode_escape").decode("ascii")[:500]


def _command(args: argparse.Namespace, report_path: Path) -> list[str]:
    """The program to run under ncu: what the user gave after --; without it, one line that says
    what the report recorded and how to give it."""
    command = list(args.program or [])
    if command:
        return command
    from ..trace.report import Report

    with Report.open(report_path) as report:
        recorded = _recorded(report.meta, report.sql("SELECT argv FROM process ORDER BY start_ns"))
    raise GpuscopeError(f"--ncu runs only the program you give after --, never the one a report names; this report "
                        f"recorded: {recorded}; run it as: gpuscope kernels {shlex_quote(str(report_path))} --ncu -- "
                        "PROGRAM ARGS")


def shlex_quote(text: str) -> str:
    """``text`` quoted for a shell, control characters escaped."""
    import shlex

    return shlex.quote(text).encode("unicode_escape").decode("ascii")


def run(args: argparse.Namespace) -> int:
    from ..analysis.roofline.kernel_metrics import kernel_metrics_table, profile_selection
    from ..trace import ncu_import as ncu
    from ..trace.outputs import check, write_output
    from ..trace.report import Report

    path = Path(args.report)
    text = None
    if args.output and not args.ncu:
        raise GpuscopeError("-o names where --ncu keeps ncu's CSV; it is only used with --ncu")
    if args.ncu:
        from ..capture.process import ncu_replay as runner

        runner.find_ncu()  # before anything else: one line and a non-zero exit when it is missing
        program = _command(args, path)
        with Report.open(path) as report:
            if args.nvtx and not (args.top or args.kernel):  # the range chooses: any kernel in it
                regex, base, count = None, "mangled", 50
            else:
                regex, base, count = profile_selection(report, args.top, args.kernel, args.per_kernel)
        count = args.launch_count or count
        log = Path(args.output) if args.output else path.with_suffix(".ncu.csv")
        check(log, args.force_overwrite)  # before the program runs, not after minutes of replay
        _say(f"running {shlex_quote(' '.join(program))} under ncu for {count} kernel launches "
             "(each is replayed to read its counters)")
        text = runner.run(program, None, regex=regex, name_base=base, count=count, nvtx=args.nvtx)
        write_output(log, text, args.force_overwrite)
        _say(f"ncu's CSV: {log}")
    elif args.import_csv:
        try:
            text = Path(args.import_csv).read_text(errors="replace")
        except OSError as exc:
            raise GpuscopeError(f"cannot read {args.import_csv}: {exc.strerror}") from None
    elif args.program:
        raise GpuscopeError("a program after -- is only run with --ncu")
    if text is not None:
        launches = ncu.parse_csv(text)
        with Report.open(path) as report:
            matched = ncu.match(report, launches)
        if not matched.rows:
            raise GpuscopeError(f"none of the {len(launches)} launches in ncu's results is a kernel of {path}")
        ncu.store(path, matched)
        _say(f"stored metrics of {matched.launches} launches of {matched.kernels} kernels in {path}")
        if matched.unmatched:
            _say(f"{len(matched.unmatched)} kernels of ncu's results are not in the report "
                 f"(first: {matched.unmatched[0][:80]})")
    with Report.open(path) as report:
        if not report.count("kernel"):
            raise GpuscopeError(f"{path} has no kernels: it recorded no GPU activity (profile with --trace cuda "
                                "on a machine with an NVIDIA GPU)")
        sys.stdout.write(FORMATS[args.format]([kernel_metrics_table(report)]))
    return 0

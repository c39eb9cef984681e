"""``gpuscope profile``: run a program under the collectors and write a report."""

from __future__ import annotations

import argparse
import sys

from ..capture import capture_range, collectors
from ..capture.process import launch as launcher
from ..errors import GpuscopeError
from ..safe_text import terminal
from ..trace.files import reserve_report

NAME = "profile"
HELP = "Run a program and record its GPU (and CPU) activity into a report file."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", help="report file (default: report1.gpuscope, report2, ...); %%h: the host's "
                   "name, %%q{NAME}: environment variable NAME (one report per node of a multi-node run)")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing report file")
    p.add_argument("-t", "--trace", help="collectors, comma-separated (listed below)")
    # One line per collector, kept as written: argparse would fill them into one paragraph.
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = help_lists()
    p.add_argument("--stats", action="store_true", help="print every stats report at the end")
    c = p.add_argument_group("capture range (record part of the run; collection is off outside it)")
    c.add_argument("--capture-range", metavar="KIND", help="when collection is on (kinds listed below)")
    c.add_argument("--nvtx-capture", metavar="NAME[@DOMAIN]",
                   help="with --capture-range=nvtx: the range (any domain unless @DOMAIN)")
    c.add_argument("--steps", metavar="FIRST-LAST",
                   help="record steps FIRST to LAST (10-20; 10 for one step; 10- to the end), counted "
                        "from 1 as step_sum counts them: gpuscope.step() marks, else optimizer steps")
    c.add_argument("--delay", metavar="SEC", help="record nothing for the first SEC seconds")
    c.add_argument("--duration", metavar="SEC", help="stop recording SEC seconds after it started (each time)")
    p.add_argument("--no-overhead-probe", dest="overhead_probe", action="store_false",
                   help="record every step (by default collection is off for 3 steps after step 10 and "
                        "every 25 after it, to time steps without the profiler)")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a Python module, as python -m")
    p.add_argument("program", nargs=argparse.REMAINDER, help="the program and its arguments")


def help_lists() -> str:
    """Return the end of ``profile --help``: the ``--trace`` values one line each, the defaults, and
    the ``--capture-range`` kinds one line each."""
    width = max(len(t.name) for t in collectors.TRACES) + 2
    lines = ["collectors (--trace VALUE,VALUE,...):"]
    lines += [f"  {t.name:<{width}}{t.help}" for t in collectors.TRACES]
    lines.append(f"default: {','.join(collectors.DEFAULT_TRACE)}")
    lines.append(f"without an NVIDIA driver: {','.join(collectors.cpu_only(collectors.DEFAULT_TRACE))}")
    lines.append("what each records and costs: docs/cli.md and docs/costs.md in gpuscope's source")
    lines.append("")
    lines.append("capture ranges (--capture-range KIND):")
    width = max(len(k) for k in capture_range.RANGES) + 2
    lines += [f"  {k:<{width}}{v}" for k, v in capture_range.RANGES.items()]
    return "\n".join(lines)


_WITH_VALUE = {"-o", "--output", "-t", "--trace", "--capture-range", "--nvtx-capture", "--steps", "--delay",
               "--duration"}


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``profile``'s arguments into gpuscope's options and the program's command line.

    gpuscope's options come first; the program starts at the first word that is not one of them,
    after ``--``, or at ``-m MODULE`` (kept at the front of the program part). Everything of the
    program's is passed through untouched, options like ``--epochs 1`` included.
    """
    own: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return own, argv[i + 1 :]
        if arg == "-m" or (arg.startswith("-m") and not arg.startswith("--")):
            return own, argv[i:]
        if arg in _WITH_VALUE:
            own += argv[i : i + 2]
            i += 2
            continue
        if not arg.startswith("-"):
            return own, argv[i:]
        own.append(arg)
        i += 1
    return own, []


def apply_program(args: argparse.Namespace, program: list[str]) -> None:
    """Set ``args.module`` and ``args.program`` from the program part of the command line."""
    args.module = None
    if program and program[0].startswith("-m"):
        if program[0] == "-m":
            if len(program) < 2:
                raise GpuscopeError("-m needs a module name")
            args.module, program = program[1], program[2:]
        else:
            args.module, program = program[0][2:], program[1:]
    args.program = program


def _say(message: str) -> None:
    print(f"gpuscope: {terminal(message)}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    launcher.guard_standard_streams()  # before any file is opened: a closed fd 0-2 must not be taken by one
    trace = collectors.parse_trace(args.trace)
    capture = capture_range.parse_capture(args.capture_range, args.nvtx_capture, args.delay, args.duration,
                                          args.steps, getattr(args, "overhead_probe", True))
    command = launcher.resolve_command(list(args.program), args.module)
    output = reserve_report(args.output, args.force_overwrite)
    if args.trace is None and not collectors.gpu_present():
        trace = collectors.cpu_only(trace, collectors.is_distributed(command.argv))
        _say("no NVIDIA GPU driver found: profiling the CPU side "
             "(Python stacks, PyTorch ranges, operators in sample windows, host counters)")
    from ..run import program
    from ..run.summary import closing_line, end_of_run

    printed: set[str] = set()

    def on_diagnostic(d: tuple[int, str, str]) -> None:
        pid, level, message = d
        if message not in printed:
            printed.add(message)
            _say(message if level != "error" else f"error: {message}")

    result = program.profile(command, output, trace, on_diagnostic, capture)
    try:
        text = end_of_run(result.report, printed, diagnosis=True, stats=args.stats)
    except GpuscopeError as exc:  # the program ran; its exit code stays what the shell sees
        text = f"gpuscope: error: {terminal(exc)}\n"
    sys.stderr.write(text)
    _say(f"the program {result.exit.describe()}")
    print(closing_line(result.report, result.records), file=sys.stderr, flush=True)
    return result.exit.shell_code

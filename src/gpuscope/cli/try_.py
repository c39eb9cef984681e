"""``gpuscope try``: apply the top findings' fixes that need no code change, and measure them."""

from __future__ import annotations

import argparse
import getpass
import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import GpuscopeError, QueryError
from ..safe_text import terminal

if TYPE_CHECKING:
    from ..experiment.fixes import Plan
    from ..experiment.measure import TryResult
    from ..experiment.runs import Budget, Program

NAME = "try"
HELP = ("Re-run the program with each fix of the top findings that needs no code change switched on "
        "(TF32, autocast, torch.compile, DataLoader workers, ...), interleaved with the program as written, "
        "and show the measured gain beside the estimate.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", nargs="?", help="a report of the program (or: gpuscope try [OPTIONS] -- PROGRAM ARGS, "
                                             "which profiles it first)")
    p.add_argument("--top", type=int, default=3, metavar="N", help="fixes of the N top findings (default 3)")
    p.add_argument("--fix", action="append", metavar="NAME", help="try this fix whatever the findings (repeatable)")
    p.add_argument("--rounds", type=int, default=3, metavar="N", help="interleaved rounds (default 3)")
    p.add_argument("--steps", type=int, default=40, metavar="N", help="stop each run at N steps (default 40)")
    p.add_argument("--time-budget", type=float, default=120.0, metavar="SEC",
                   help="stop each run at its first step past SEC seconds (default 120)")
    p.add_argument("--warmup", type=int, default=5, metavar="N", help="steps left out of each run's timing (default 5)")
    p.add_argument("--tolerance", type=float, default=10.0, metavar="PERCENT",
                   help="how far an estimate may lie outside the measured interval (default 10 points)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--fail-if-unconfirmed", action="store_true",
                   help="exit 1 when a tried fix crashes the program, is no gain, or its estimate lies outside its "
                        "interval by more than --tolerance")
    p.add_argument("--trust-report", action="store_true",
                   help="run the command of a report recorded by another user or on another host")
    p.add_argument("-o", "--output", help="with a program: keep the report of its profile here (default: removed)")
    p.add_argument("--force-overwrite", action="store_true", help="replace an existing --output file")


def _check(args: argparse.Namespace) -> None:
    for name, least in (("top", 1), ("rounds", 1), ("steps", 2), ("warmup", 0)):
        if getattr(args, name) < least:
            raise GpuscopeError(f"--{name} {getattr(args, name)}: give a number >= {least}")
    if not args.time_budget > 0:
        raise GpuscopeError("--time-budget takes a number of seconds > 0")
    if not 0 <= args.tolerance <= 100:
        raise GpuscopeError(f"--tolerance {args.tolerance:g}: give a percentage from 0 to 100")
    if args.steps <= args.warmup + 1:
        raise GpuscopeError(f"--steps {args.steps} leaves no step to time after --warmup {args.warmup}")
    program = getattr(args, "program", None)
    if (args.report is None) == (program is None):
        raise GpuscopeError("give a report, or -- and the program to profile first (not both)")


def _say(message: str) -> None:
    print(f"gpuscope: {terminal(message)}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from ..experiment import fixes
    from ..experiment.runs import Budget
    from ..reporters.try_text import render_json, render_text

    _check(args)
    for name in args.fix or []:
        fixes.fix_named(name)
    budget = Budget(args.steps, args.time_budget)
    with tempfile.TemporaryDirectory(prefix="gpuscope-try-") as tmp:
        path = Path(args.report) if args.report else _profile_first(args, budget, Path(tmp))
        with _failures(path if args.report else None):  # a report the user gave: it may be damaged
            program, chosen, top = _read(path, args)
        with _failures(None):  # from here on, any failure is gpuscope's own
            result = _measure(args, program, chosen, budget)
            result.top_findings = top
            text = render_json(result) if args.json else render_text(result)
    sys.stdout.write(text)
    if result.baseline_error:
        return 1
    return 1 if args.fail_if_unconfirmed and result.unconfirmed else 0


@contextmanager
def _failures(report: Path | None) -> Iterator[None]:
    """Say an unexpected exception in one line: raised while reading ``report`` (a file the user gave),
    a damaged report or gpuscope's own error, as the report's rows tell; otherwise gpuscope's own."""
    from . import failures

    try:
        yield
    except (KeyboardInterrupt, OSError):
        raise
    except Exception as exc:  # noqa: BLE001
        if isinstance(exc, GpuscopeError) and not isinstance(exc, QueryError):  # said as it is
            raise
        if os.environ.get(failures.DEBUG_ENV):
            raise
        raise (failures.unexpected(exc, str(report)) if report is not None else failures.own(exc)) from None


def _read(path: Path, args: argparse.Namespace) -> tuple[Program, Plan, list[str]]:
    """What the report says: how its program ran, the fixes to try, and the rules of the top findings."""
    from ..analysis.diagnosis import diagnose
    from ..experiment import fixes
    from ..trace.report import Report

    with Report.open(path) as report:
        program = _program(report.meta, args.trust_report, str(path))
        findings = diagnose(report).findings
    top = [f.rule for f in fixes.actionable(findings)[:args.top]]
    return program, fixes.plan(findings, args.top, args.fix), top


def _measure(args: argparse.Namespace, program: Program, chosen: Plan, budget: Budget) -> TryResult:
    """Run the program as written and with each fix of the plan, saying each run on stderr."""
    from ..experiment.measure import measure
    from ..experiment.runs import Outcome

    names = ", ".join(p.fix.name for p in chosen.tried) or "none"
    _say(f"trying {names}: {args.rounds} round(s) of {1 + len(chosen.tried)} runs")

    def progress(o: Outcome) -> None:
        error = o.error or ""
        if not o.failed:
            state = f"{len(o.steps_ns) + 1 if o.steps_ns else 0} step marks"
        else:  # how it ended, and its error line where that says more
            state = f"failed: {error}" if o.ending in error or o.stopped == "killed" else f"failed: {o.ending}: {error}"
        _say(f"round {o.round}: {o.variant}: {state} ({o.wall_s:.1f} s)")

    result = measure(program, chosen.tried, args.rounds, budget, args.warmup, args.tolerance / 100.0, progress)
    result.needs_edit = chosen.needs_edit
    result.report = str(args.output or args.report or "")
    return result


def _program(meta: dict[str, object], trusted: bool, path: str) -> Program:
    """How the report's program ran: its argv and working directory, and this environment with the
    variables the report stored over it."""
    from ..experiment.runs import Program

    argv, cwd, env = meta.get("command"), meta.get("cwd"), meta.get("environment") or {}
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv) and isinstance(cwd, str)):
        raise GpuscopeError(f"{path} does not say how its program was run (no command or working directory)")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        env = {}
    here = (socket.gethostname(), _user())
    there = (meta.get("host"), meta.get("user"))
    if there != here and not trusted:
        raise GpuscopeError(f"{path} was recorded by {terminal(there[1])} on {terminal(there[0])}: try runs the "
                            "command a report stores; pass --trust-report to run it here")
    if not os.path.isdir(cwd):
        raise GpuscopeError(f"the program's working directory {cwd} is gone")
    return Program(list(argv), cwd, {**os.environ, **env})


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _profile_first(args: argparse.Namespace, budget: Budget, tmp: Path) -> Path:
    """Profile the program (stopped at the same budget) and return its report."""
    import json

    from ..capture import collectors
    from ..capture.capture_range import CaptureSpec
    from ..capture.process import launch as launcher
    from ..capture.trial import TRY_ENV
    from ..run import program as session
    from ..trace.files import reserve_report

    launcher.guard_standard_streams()
    command = launcher.resolve_command(list(args.program))
    output = reserve_report(args.output, args.force_overwrite) if args.output else tmp / "profile.gpuscope"
    trace = collectors.DEFAULT_TRACE if collectors.gpu_present() else collectors.cpu_only(
        collectors.DEFAULT_TRACE, collectors.is_distributed(command.argv))
    _say(f"profiling {terminal(' '.join(args.program))} first")
    settings = {"patches": [], "steps": budget.steps, "time_budget_s": budget.time_s,
                "losses": 0, "out": str(tmp / "profile.json")}
    os.environ[TRY_ENV] = json.dumps(settings)  # the budget, in the profiled run too
    try:
        result = session.profile(command, output, list(trace), lambda d: None, CaptureSpec())
    finally:
        os.environ.pop(TRY_ENV, None)
    if result.exit.shell_code != 0:
        raise GpuscopeError(f"the program {result.exit.describe()} while it was profiled; fix that first")
    return result.report

"""The ``gpuscope`` command: one module per subcommand, each with ``add_parser`` and ``run``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Protocol, Sequence

from ..errors import GpuscopeError, InternalError, QueryError
from ..safe_text import terminal
from ..version import __version__
from . import analyze, diff, export, failures, import_, kernels, profile, report, roofline, stats, try_, view


class Command(Protocol):
    NAME: str
    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


COMMANDS: list[Command] = [  # type: ignore[list-item]
    profile, stats, analyze, roofline, kernels, report, view, export, import_, diff, try_,
]


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: an argument it does not know is its own error, said with its own usage
    (argparse leaves such arguments to the top-level parser, whose usage names no option of the command)."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def, override]
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuscope", description="Profile deep-learning programs on NVIDIA GPUs."
    )
    parser.add_argument("--version", action="version", version=f"gpuscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_CommandParser)
    for cmd in COMMANDS:
        # the command list's help is %-formatted by argparse, a description is printed as it is
        p = sub.add_parser(cmd.NAME, help=cmd.HELP, description=cmd.HELP.replace("%%", "%"))
        cmd.add_arguments(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the gpuscope command line; return the exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if sys.stdout is None and not (argv and argv[0] == profile.NAME):
        print("gpuscope: error: standard output is closed; use --output FILE or redirect it", file=sys.stderr)
        return 2
    try:
        if argv and argv[0] == profile.NAME:
            own, program = profile.split_argv(argv[1:])
            args = parser.parse_args([profile.NAME, *own])
            profile.apply_program(args, program)
        elif argv and argv[0] in (kernels.NAME, try_.NAME) and "--" in argv:  # kernels REPORT --ncu -- PROGRAM ARGS
            cut = argv.index("--")
            args = parser.parse_args(argv[:cut])
            args.program = argv[cut + 1:]
        else:
            args = parser.parse_args(argv)
        return int(_run_reader(args) if args.command != profile.NAME else args._run(args))
    except InternalError as exc:
        print(f"gpuscope: internal error: {terminal(exc)}", file=sys.stderr)
        return exc.exit_code
    except GpuscopeError as exc:
        print(f"gpuscope: error: {terminal(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("gpuscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except OSError as exc:  # standard output closed or unwritable
        print(f"gpuscope: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        return 1


DEBUG_ENV = failures.DEBUG_ENV  # set to see the traceback of a failure said in one line


def _run_reader(args: argparse.Namespace) -> int:
    """Run a command that reads a report. A report is data from anywhere: whatever a damaged one makes
    the analyses raise is said in one line (exit 2), never as a traceback (unless GPUSCOPE_DEBUG is
    set); a failure of gpuscope itself is said as one (exit 3); cli/failures.py tells them apart."""
    try:
        return int(args._run(args))
    except QueryError as exc:  # the commands run only gpuscope's own SQL
        if os.environ.get(DEBUG_ENV):
            raise
        raise failures.unexpected(exc, getattr(args, "report", None)) from None
    except (GpuscopeError, KeyboardInterrupt, BrokenPipeError):
        raise
    except OSError as exc:
        said = failures.os_error(exc)
        if said is None:
            raise  # the output, not the report
        raise said from None
    except Exception as exc:  # noqa: BLE001
        if os.environ.get(DEBUG_ENV):
            raise
        raise failures.unexpected(exc, getattr(args, "report", None)) from None

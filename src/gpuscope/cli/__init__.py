"""The ``gpuscope`` command: one module per subcommand, each with ``add_parser`` and ``run``."""

from __future__ import annotations

import argparse
import sys
from typing import Protocol, Sequence

from .. import __version__
from ..errors import GpuscopeError
from ..safe_text import terminal
from . import analyze, export, kernels, profile, roofline, stats


class Command(Protocol):
    NAME: str
    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


COMMANDS: list[Command] = [profile, stats, analyze, roofline, kernels, export]  # type: ignore[list-item]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuscope", description="Profile deep-learning programs on NVIDIA GPUs."
    )
    parser.add_argument("--version", action="version", version=f"gpuscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.NAME, help=cmd.HELP, description=cmd.HELP)
        cmd.add_arguments(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the gpuscope command line; return the exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == profile.NAME:
            own, program = profile.split_argv(argv[1:])
            args = parser.parse_args([profile.NAME, *own])
            profile.apply_program(args, program)
        elif argv and argv[0] == kernels.NAME and "--" in argv:  # kernels REPORT --ncu -- PROGRAM ARGS
            cut = argv.index("--")
            args = parser.parse_args(argv[:cut])
            args.program = argv[cut + 1:]
        else:
            args = parser.parse_args(argv)
        return int(args._run(args))
    except GpuscopeError as exc:
        print(f"gpuscope: error: {terminal(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("gpuscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1

"""``gpuscope profile --help`` as a user reads it: one line per ``--trace`` value and per capture range,
no benchmark figures, nothing wider than an 80-column terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from gpuscope.capture import capture_range, collectors
from gpuscope.cli import COMMANDS


def _help(command: str) -> str:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", "gpuscope", command, "--help"], capture_output=True, text=True,
                          check=True, env=env).stdout


def test_profile_help_lists_each_collector_and_capture_range_on_a_line_of_its_own() -> None:
    text = _help("profile")
    lines = text.splitlines()
    for option in collectors.TRACES:
        [line] = [x for x in lines if x.split()[:1] == [option.name] and option.help in x]
        assert line == f"  {option.name:<16}{option.help}"
    for kind, meaning in capture_range.RANGES.items():
        assert sum(1 for x in lines if x.split()[:1] == [kind] and x.rstrip().endswith(meaning)) == 1, kind
    assert "default: " + ",".join(collectors.DEFAULT_TRACE) in lines
    assert max(len(x) for x in lines) <= 80


def test_help_texts_carry_no_benchmark_figures_or_long_paragraphs() -> None:
    figure = re.compile(r"\d\.\d+x|\d+ ?µs|\b20\d\d-\d\d-\d\d\b|H100|H200")
    for command in [c.NAME for c in COMMANDS]:
        text = _help(command)
        assert not figure.search(text), (command, figure.search(text))
        # an option's help is a few lines at most: its paragraph ends at the next option or a blank line
        paragraph = 0
        for line in text.splitlines():
            paragraph = paragraph + 1 if line.startswith(" " * 24) and line.strip() else 0
            assert paragraph <= 8, (command, line)


def test_an_unknown_option_is_said_with_the_usage_of_its_command() -> None:
    res = subprocess.run([sys.executable, "-m", "gpuscope", "stats", "some.gpuscope", "--no-such-option"],
                         capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"})
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("usage: gpuscope stats ") and "--libraries" in res.stderr
    assert res.stderr.rstrip().splitlines()[-1] == "gpuscope stats: error: unrecognized arguments: --no-such-option"


def test_a_percent_sign_is_printed_once_in_the_description_and_the_command_list(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import argparse

    from gpuscope.cli import build_parser

    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    listing = parser.format_help()
    for name, command in sub.choices.items():
        assert "%%" not in command.format_help(), name
    assert "%%" not in listing
    words = " ".join(sub.choices["diff"].format_help().split())
    assert "more than PCT%." in words and "more than PCT%." in " ".join(listing.split())

"""Where a command's text goes: a file named by ``--output``, or stdout."""

from __future__ import annotations

import sys
from pathlib import Path

from ..safe_text import terminal
from ..trace.outputs import write_output


def emit(text: str, output: str | None, force: bool = False) -> None:
    """Write ``text`` to ``output`` (saying so on stderr; an existing name only with ``force``, a
    symbolic link never followed), or to stdout without one."""
    if output:
        write_output(Path(output), text, force, option="--output")
        print(f"gpuscope: wrote {terminal(output)}", file=sys.stderr)
    else:
        sys.stdout.write(text)

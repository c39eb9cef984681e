"""Where a command's text goes: a file named by ``--output``, or stdout."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import GpuscopeError


def emit(text: str, output: str | None) -> None:
    """Write ``text`` to ``output`` (saying so on stderr), or to stdout without one."""
    if output:
        try:
            Path(output).write_text(text)
        except OSError as exc:
            raise GpuscopeError(f"cannot write {output}: {exc.strerror}") from None
        print(f"gpuscope: wrote {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)

"""A profiled program's tracebacks without gpuscope's frames.

A signal (Ctrl-C's KeyboardInterrupt, a SystemExit from the program's own handler) is raised in
whatever frame the main thread runs when it arrives, sometimes one of gpuscope's wrappers around
the program's calls. The traceback Python prints for an exception nobody caught then shows
gpuscope's frames among the program's, as if gpuscope had failed. The hook installed here prints
the same traceback with gpuscope's frames taken out (the program's own frames, the library frames,
the exception and its chain stay as they are); where anything in it fails, the original hook
prints the original traceback. Runs inside the profiled process: standard library only.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def without_own_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Return ``tb`` with the entries whose code lies in gpuscope's package taken out."""
    kept = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(PACKAGE_DIR):
            kept.append(tb)
        tb = tb.tb_next
    out: types.TracebackType | None = None
    for entry in reversed(kept):
        out = types.TracebackType(out, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return out


def install() -> None:
    """Wrap ``sys.excepthook`` so that an uncaught exception's traceback leaves out gpuscope's frames."""
    original = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: types.TracebackType | None) -> Any:
        try:
            trimmed = without_own_frames(tb)
            seen: set[int] = set()
            link: BaseException | None = value
            while link is not None and id(link) not in seen:  # the chain (__cause__, __context__) too
                seen.add(id(link))
                link.__traceback__ = trimmed if link is value else without_own_frames(link.__traceback__)
                link = link.__cause__ or link.__context__
        except Exception:  # noqa: BLE001  (never lose the program's traceback)
            return original(kind, value, tb)
        return original(kind, value, trimmed)

    hook._gpuscope = True  # type: ignore[attr-defined]
    sys.excepthook = hook

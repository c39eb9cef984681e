"""Python stacks folded to the program's own code, for the CPU-side diagnosis.

A sample's stack runs from the program's code down through libraries (PyTorch, the standard
library) and gpuscope's own wrappers. What the user can change is the *user frame*: the deepest
frame whose file is neither an installed package, the standard library, frozen or generated code,
nor gpuscope itself. Library frames below it are folded into it, so ``model(x)`` through
``Module.__call__`` and gpuscope's range wrapper counts at the program's line, and a Dataset's
``__getitem__`` called by the DataLoader's fetcher counts at the Dataset's line.

Each stack is also classified: *importing* (it runs the import machinery: start-up, or a lazy
import), *operator* (a PyTorch operator runs under gpuscope's operator recorder) and *overhead*
(the innermost frame is gpuscope's own: the cost of recording, which the program does not have
without the profiler).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...trace.report import Report
from ..steps.from_pattern import calling_line
from ...trace.stacks import Frame, is_library, is_own, short_path, stack_paths

_IMPORTING = re.compile(r"^<frozen importlib\._bootstrap(?:_external)?>$|[/\\]importlib[/\\]__init__\.py$")
_OPERATOR_FRAME = re.compile(r"[/\\]gpuscope[/\\]capture[/\\](?:python[/\\])?torch_ops\.py$")
_TORCH_FILE = re.compile(r"[/\\]torch[/\\][^<>]*\.py$")
_PACKAGE_ROOT = re.compile(r".*(?:site-packages|dist-packages|[/\\]lib[/\\]python3\.\d+)[/\\]")
_DATASET_FETCH = re.compile(r"[/\\]torch[/\\]utils[/\\]data[/\\]_utils[/\\]fetch\.py$")

def is_user(path: str) -> bool:
    """Return whether ``path`` is the program's own code: not a library, the standard library,
    frozen or generated code (``<...>``), nor gpuscope (:func:`...trace.stacks.is_library`)."""
    return not is_library(path)


def user_frame(path: Sequence[Frame]) -> Frame | None:
    """The deepest user frame of a stack given innermost first (None when it has none)."""
    return next((f for f in path if is_user(f[1])), None)


@dataclass(frozen=True)
class StackInfo:
    """What a diagnosis needs to know of one stack.

    ``user`` and ``caller``: the deepest user frame and the user frame on another line that called
    into it (None when there is none); ``innermost``: the innermost frame (None for an empty
    stack); ``importing``: the import machinery is on the stack; ``operator``: a
    PyTorch operator runs under gpuscope's recorder; ``overhead``: the innermost frame is
    gpuscope's own; ``module_caller``: the program's frame that called the outermost
    ``nn.Module`` on the stack (None outside modules); ``chain``: the program's frames, outermost
    first; ``fetching``: a DataLoader fetches samples from the Dataset in this process;
    ``in_torch``: the innermost frame is PyTorch's own Python (a module's forward, a functional),
    where a sample outside recorded operators most likely waits in one.
    """

    user: Frame | None
    caller: Frame | None
    innermost: Frame | None
    importing: bool
    operator: bool
    overhead: bool
    fetching: bool
    in_torch: bool = False
    module_caller: Frame | None = None
    chain: tuple[Frame, ...] = ()

    @property
    def location(self) -> str:
        """``file:line function`` of the user frame (``(no program code)`` without one)."""
        return frame_text(self.user) if self.user else "(no program code)"


def frame_text(frame: Frame) -> str:
    """``file:line function``, the file relative to the working directory when inside it."""
    func, file, line = frame
    return f"{short_path(file)}:{line} {func}"


def library_path(path: str) -> str:
    """A library file as its package path (``torch/nn/modules/linear.py``), else as :func:`short_path`."""
    m = _PACKAGE_ROOT.search(path)
    return path[m.end():] if m else short_path(path)


def classify(path: Sequence[Frame]) -> StackInfo:
    """Fold and classify one stack given innermost first."""
    users = [f for f in path if is_user(f[1])]
    return StackInfo(
        user=users[0] if users else None,
        caller=next((f for f in users[1:] if f[1:] != users[0][1:]), None),
        innermost=path[0] if path else None,
        importing=any(_IMPORTING.search(f[1]) for f in path),
        operator=any(_OPERATOR_FRAME.search(f[1]) for f in path),
        overhead=bool(path) and is_own(path[0][1]),
        fetching=any(_DATASET_FETCH.search(f[1]) for f in path),
        in_torch=bool(path) and is_library(path[0][1]) and bool(_TORCH_FILE.search(path[0][1])),
        module_caller=calling_line(list(path)),
        chain=tuple(reversed(users)),
    )


def load_stacks(report: Report, wanted: Iterable[tuple[int, int]]) -> dict[tuple[int, int], StackInfo]:
    """Return the :class:`StackInfo` of each (pid, stack id) asked for."""
    return {key: classify(path) for key, path in stack_paths(report, set(wanted)).items()}

"""Python stacks stored in a report (``cpu_frame``/``cpu_stack`` prefix trees), resolved to places.

A stack is shown at its *program line*: the innermost frame outside installed libraries and the
standard library, with the innermost frame beside it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .report import Report

_LIBRARY = re.compile(r"(site-packages|dist-packages)[/\\]|[/\\]lib[/\\]python3\.\d+[/\\]|^<"
                      r"|gpuscope-spool-[^/\\]*[/\\]boot[/\\]")
# gpuscope's own frames (its hooks wrap the program's calls), wherever it was installed from
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def is_library(path: str) -> bool:
    """Return whether ``path`` is a file of an installed package, the standard library or gpuscope."""
    return bool(_LIBRARY.search(path)) or path.startswith(_OWN)


@dataclass(frozen=True)
class Site:
    """Where a stack points: the program line and the innermost frame (``file:line`` and function)."""

    location: str
    function: str
    innermost: str


def stack_sites(report: Report, pids_stacks: set[tuple[int, int]]) -> dict[tuple[int, int], Site]:
    """Return the :class:`Site` of each (pid, stack id) asked for."""
    if not pids_stacks:
        return {}
    frames = {(pid, fid): (func, file, line) for pid, fid, func, file, line in report.sql(
        """SELECT f.pid, f.id, fn.value, fl.value, f.line FROM cpu_frame f
           JOIN string fn ON fn.id = f.function_id JOIN string fl ON fl.id = f.file_id""")}
    parents = {(pid, sid): (parent, fid) for pid, sid, parent, fid in report.sql(
        "SELECT pid, id, parent_id, frame_id FROM cpu_stack")}
    out = {}
    for pid, sid in pids_stacks:
        path = []  # innermost first
        node = sid
        while node and (pid, node) in parents:
            node, fid = parents[(pid, node)]
            path.append(frames[(pid, fid)])
        if not path:
            out[(pid, sid)] = Site("(no Python code)", "", "")
            continue
        func0, file0, line0 = path[0]
        user = next((f for f in path if not is_library(f[1])), path[0])
        out[(pid, sid)] = Site(f"{short_path(user[1])}:{user[2]}", user[0], f"{short_path(file0)}:{line0} {func0}")
    return out



def short_path(path: str) -> str:
    """A file path relative to the working directory when inside it, else as recorded."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path

"""Python stacks stored in a report (``cpu_frame``/``cpu_stack`` prefix trees), resolved to places.

A stack is shown at its *program line*: the innermost frame outside installed libraries and the
standard library, with the innermost frame beside it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .report import Report

_LIBRARY = re.compile(r"(site-packages|dist-packages)[/\\]|[/\\]lib[/\\]python3\.\d+[/\\]|^<")
# gpuscope's own modules (its hooks wrap the program's calls): this installation's, those of the
# machine that recorded the report (a checkout, site-packages, the spool's copy the agent boots
# from); a program that merely lives in a folder named gpuscope is not matched
_OWN = re.compile(r"[/\\]gpuscope[/\\](?:capture|analysis|trace|cli|reporters|run)[/\\](?:[^/\\]+[/\\])*[^/\\]+\.py$"
                  r"|[/\\]gpuscope[/\\](?:__init__|__main__|annotation|errors|spool|safe_text|units|version)\.py$"
                  r"|gpuscope-spool-[^/\\]*[/\\]boot[/\\]")
_INSTALLED = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

Frame = tuple[str, str, int]  # function, file, line


def is_own(path: str) -> bool:
    """Return whether ``path`` is a file of gpuscope itself."""
    return bool(_OWN.search(path)) or path.startswith(_INSTALLED)


def is_library(path: str) -> bool:
    """Return whether ``path`` is a file of an installed package, the standard library or gpuscope."""
    return bool(_LIBRARY.search(path)) or is_own(path)


def stack_paths(report: Report, wanted: set[tuple[int, int]]) -> dict[tuple[int, int], list[Frame]]:
    """Return the frames of each (pid, stack id) asked for, innermost first (frames the report
    lacks are skipped; a walk stops after 10,000 frames, for a damaged tree)."""
    if not wanted:
        return {}
    frames = {(pid, fid): (func, file, int(line or 0)) for pid, fid, func, file, line in report.sql(
        """SELECT f.pid, f.id, fn.value, fl.value, f.line FROM cpu_frame f
           JOIN string fn ON fn.id = f.function_id JOIN string fl ON fl.id = f.file_id""")}
    parents = {(pid, sid): (parent, fid) for pid, sid, parent, fid in report.sql(
        "SELECT pid, id, parent_id, frame_id FROM cpu_stack")}
    out = {}
    for pid, sid in wanted:
        path: list[Frame] = []
        node = sid
        while node and (pid, node) in parents and len(path) < 10_000:
            node, fid = parents[(pid, node)]
            if (pid, fid) in frames:
                path.append(frames[(pid, fid)])
        out[(pid, sid)] = path
    return out


@dataclass(frozen=True)
class Site:
    """Where a stack points: the program line and the innermost frame (``file:line`` and function)."""

    location: str
    function: str
    innermost: str


def stack_sites(report: Report, pids_stacks: set[tuple[int, int]]) -> dict[tuple[int, int], Site]:
    """Return the :class:`Site` of each (pid, stack id) asked for."""
    out = {}
    for (pid, sid), path in stack_paths(report, pids_stacks).items():
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

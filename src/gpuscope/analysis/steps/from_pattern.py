"""Steps found as the program's repeating pattern, where nothing marks them (:mod:`.source`, source 4).

The tokens of a process's loop, the first of these it has: the GPU operations it launched (kernel
names, copy directions), its main thread's top-level module calls (grouped where a long pause
comes every N calls), its sampled Python stacks, else the PyTorch operators it ran. The repeating
sequence among them (:mod:`.pattern`) gives the iterations; step *k* runs from the launch that
starts iteration *k* to the one that starts iteration *k+1*, and what came before the first is
set-up. Sampled stacks that repeat only as an alias of the sampler, a loop turning many times
between two samples (:func:`_unresolved`), give no steps.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...trace.report import Report
from ..ops.attribution import ops_table
from ..ops.launch_sites import after_launches, sampled_lines
from ..ops.rows import op_frame
from .pattern import Pattern, find_pattern


@dataclass(frozen=True)
class PatternSteps:
    """Steps found as a repeating pattern: ``frame`` (pid, step, start_ns, end_ns, stop_ns, gpu_side:
    the bounds are GPU start times, see :func:`_bounds`) and ``detail``: how they were found, or why
    none were (one line)."""

    frame: pd.DataFrame
    detail: str


_PATTERNS: weakref.WeakKeyDictionary[Report, PatternSteps] = weakref.WeakKeyDictionary()
_COPY_TOKENS = {"HtoD": -2, "DtoH": -3, "DtoD": -4, "HtoH": -5, "PtoP": -6}


_TOKEN_ORDER = ("pid", "start_ns", "op_id")


def _token_columns() -> dict[str, str]:
    """The columns of a token (:func:`_gpu_tokens`) as SQL over the operations' columns. The tokens
    are made in SQL: strings per operation in pandas cost gigabytes on ten million of them."""
    copies = " ".join(f"WHEN '{k}' THEN {v}" for k, v in _COPY_TOKENS.items())
    return {"pid": "pid",
            "token": f"""CASE kind WHEN 'memcpy' THEN CASE copy_kind {copies} ELSE -7 END
                               WHEN 'memset' THEN -10 WHEN 'graph' THEN -11
                               ELSE coalesce(name_id, -1) END::BIGINT""",
            "launch_ns": "launch_ns", "start_ns": "start_ns", "exact": "kind IN ('kernel', 'graph')"}


def _tokens_query(report: Report) -> str:
    """Every GPU operation as a token with its ``op_id`` (:func:`_gpu_tokens`), in no order."""
    columns = {**_token_columns(), "op_id": "op_id"}
    return f"SELECT {', '.join(f'{sql} AS {name}' for name, sql in columns.items())} FROM {ops_table(report)}"


_GIVEN: weakref.WeakKeyDictionary[Report, Callable[[], pd.DataFrame]] = weakref.WeakKeyDictionary()


def _gpu_tokens(report: Report) -> pd.DataFrame:
    """Every GPU operation as a token, in the order the GPU ran them: without API records the launch
    times of copies and memsets are estimates, too rough to order them among kernels, while one
    stream runs its operations in launch order. Put in order in numpy (:func:`..ops.rows.op_frame`):
    DuckDB's sort of ten million spilled and took as long as the rest of the pattern search. Made
    from the operations a reader holds where it gave them (:func:`given_operations`)."""
    given = _GIVEN.get(report)
    if given is not None:
        return given()
    return op_frame(report, _token_columns(), _TOKEN_ORDER)


@contextlib.contextmanager
def given_operations(report: Report, ops: pd.DataFrame) -> Iterator[None]:
    """While in this block, the tokens of ``report`` are made from ``ops``, every GPU operation of
    it as the diagnosis's timeline reads them (``op_id``, ``pid``, ``kind`` and ``copy_kind`` as
    categoricals, ``name_id``, ``launch_ns``, ``start_ns``, in ``pid, start_ns, end_ns, op_id``
    order), instead of reading them again."""
    _GIVEN[report] = lambda: tokens_of(ops)
    try:
        yield
    finally:
        _GIVEN.pop(report, None)


def tokens_of(ops: pd.DataFrame) -> pd.DataFrame:
    """The tokens of :func:`_gpu_tokens` (the same frame) from operations as :func:`given_operations`
    takes them."""
    from ..ops.rows import _order

    kind = ops["kind"].array
    code = {str(c): i for i, c in enumerate(kind.categories)}
    codes = np.asarray(kind.codes)

    def of(k: str) -> np.ndarray:
        return codes == code[k] if k in code else np.zeros(len(codes), dtype=bool)

    token = ops["name_id"].fillna(-1).to_numpy(np.int64)
    copies = of("memcpy")
    if copies.any():
        copy_kind = ops["copy_kind"].astype(object).to_numpy()[copies]
        token[copies] = [_COPY_TOKENS.get(k, -7) if isinstance(k, str) else -7 for k in copy_kind]
    token[of("memset")] = -10
    token[of("graph")] = -11
    exact = of("kernel") | of("graph")
    # the keys in their own types (the order is the same), None where the rows are in order already
    # (one process, most runs): no sort, no copy of ten million ids as 64-bit integers
    keys = [ops[c].to_numpy() for c in ("pid", "start_ns", "op_id")]
    varying = [k for k in keys if len(k) and k.min() != k.max()]
    found = _order(varying, len(ops))[0] if varying else None
    at = slice(None) if found is None else found
    return pd.DataFrame({"pid": _int64(keys[0])[at], "token": token[at],
                         "launch_ns": ops["launch_ns"].to_numpy(np.int64)[at],
                         "start_ns": keys[1].astype(np.int64, copy=False)[at], "exact": exact[at]}, copy=False)


def _int64(values: np.ndarray) -> np.ndarray:
    """``values`` as 64-bit integers: one value viewed for every row (a process id read as such,
    read-only) stays so, not ten million copies of it."""
    if len(values) > 1 and values.strides == (0,):
        return np.broadcast_to(values[:1].astype(np.int64), values.shape)
    return values.astype(np.int64, copy=False)


def _process_pattern(own: pd.DataFrame) -> tuple[Pattern, pd.DataFrame] | None:
    """The loop of one process and the frame its starts index, from all its GPU operations
    or from its kernels alone, whichever repeats better (a copy whose place among the kernels varies
    blurs the pattern; a loop of identical kernels needs its copies to show where an iteration ends);
    of two that repeat as well, the longer period."""
    tries = [own]
    if "exact" in own and not own["exact"].all() and own["exact"].any():
        tries.append(own[own["exact"].to_numpy(bool)])
    best: tuple[Pattern, pd.DataFrame] | None = None
    for frame in tries:
        found = find_pattern(frame["token"].to_numpy(np.int64), frame["launch_ns"].to_numpy(np.int64),
                             frame["exact"].to_numpy(bool) if "exact" in frame else None)
        if found is None:
            continue
        if best is None or found.score > best[0].score + 0.02 or (
                found.score >= best[0].score - 0.02 and found.period > best[0].period):
            best = (found, frame)
    return best


def _bounds(found: Pattern, frame: pd.DataFrame) -> tuple[np.ndarray, bool]:
    """The times that start each iteration, and after them the end of the last one.

    An iteration starts at the launch of its first operation. Where launch times do not tell
    iterations apart (a host far ahead of a GPU-bound loop: CUPTI gives kernels queued deep no
    queued time, and they share the estimate of their launch anchor), the GPU start of that
    operation stands in. The last iteration ends at the launch (or GPU start) of the operation
    after it, or just after its own last one. Returns the times, and whether they are GPU starts."""
    launch = frame["launch_ns"].to_numpy(np.int64)
    start = frame["start_ns"].to_numpy(np.int64)
    idx = np.append(found.starts, min(int(found.starts[-1]) + found.period, len(launch) - 1))
    at = launch[idx]
    gpu_side = len(np.unique(at)) < 0.9 * len(at)
    if gpu_side:
        at = start[idx]
    if idx[-1] <= idx[-2]:
        at[-1] = at[-2] + 1
    return np.maximum.accumulate(at), gpu_side


def _launch_line(report: Report, pid: int, starts: np.ndarray) -> str | None:
    """The program line (``file:line``) that Python samples of the main thread show most often
    just after the iterations start (the loop body that launches them), or None without samples."""
    if not report.count("cpu_sample") or not len(starts):
        return None
    samples = report.df("SELECT ts_ns, stack_id, 1 AS weight FROM cpu_sample WHERE pid = ? AND tid = pid "
                        "ORDER BY ts_ns", [pid])
    counts: dict[str, float] = {}
    for loc, _, n in sampled_lines(report, pid, samples, *after_launches(starts)):
        if not loc.startswith("("):
            counts[loc] = counts.get(loc, 0.0) + n
    return max(counts, key=lambda k: counts[k]) if counts else None


LONG_GAP = 3.0  # a pause between two top-level module calls this many times the median pause may end a group
GROUPED = 0.5  # share of the long pauses that must come N calls after another for the calls to be grouped
MAX_GROUP = 1024  # calls in one group, at most
SAMPLE_REGULARITY = 0.25  # iterations found in samples: median absolute deviation at most this share of the median


def _module_tokens(report: Report) -> pd.DataFrame:
    """The top-level module calls of each process's main thread (forward ranges of the ``torch``
    collector not inside another), in time order: ``pid``, ``token`` (the module's name), ``launch_ns``,
    ``start_ns``, ``end_ns``."""
    if not report.count("nvtx_range"):
        return pd.DataFrame(columns=["pid", "token", "launch_ns", "start_ns", "end_ns"])
    frame = report.df(
        """SELECT pid, name_id AS token, start_ns AS launch_ns, start_ns, coalesce(end_ns, start_ns) AS end_ns
           FROM nvtx_range WHERE source = 'torch' AND kind = 'range' AND category IN ('forward', 'model') AND tid = pid
           ORDER BY pid, start_ns, end_ns DESC""")
    keep = []
    for _, own in frame.groupby("pid", sort=True):
        end = own["end_ns"].to_numpy(np.int64)
        reach = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(end)[:-1]])
        keep.append(own[own["start_ns"].to_numpy(np.int64) >= reach])
    return pd.concat(keep, ignore_index=True) if keep else frame


def _grouped(own: pd.DataFrame) -> pd.DataFrame | None:
    """The module calls with each call's token marked where a long pause comes before it (at least
    :data:`LONG_GAP` times the median pause): calls of one model on each item of a batch, back to
    back, and a longer pause between batches make one iteration per batch. None unless the long
    pauses come every N calls (N >= 2) for most of them: pauses of a busy machine come anywhere."""
    if len(own) < 8:
        return None
    start, end = own["start_ns"].to_numpy(np.int64), own["end_ns"].to_numpy(np.int64)
    gap = np.concatenate([[0], start[1:] - end[:-1]])
    median = float(np.median(gap[1:]))
    long = gap > LONG_GAP * max(median, 1_000.0)
    long[0] = False
    at = np.flatnonzero(long)
    if len(at) < 4:
        return None
    # the distance N at which most long pauses have another long pause N calls earlier (a noise
    # pause between two batch boundaries leaves both boundaries' pair intact)
    pairs = [int((long[n:] & long[:-n]).sum()) for n in range(2, min(MAX_GROUP, len(long) // 4) + 1)]
    if not pairs or max(pairs) < GROUPED * len(at):
        return None
    out = own.assign(token=own["token"].to_numpy(np.int64) * 2 + long)
    out.attrs["grouped"] = True
    return out


def _module_pattern(own: pd.DataFrame) -> tuple[Pattern, pd.DataFrame] | None:
    """The loop of one process from its top-level module calls: each call an iteration, or a group
    of calls where :func:`_grouped` finds one."""
    grouped = _grouped(own)
    if grouped is not None:
        found = _process_pattern(grouped)
        if found is not None and found[0].period > 1:
            return found
    return _process_pattern(own)


def _sample_tokens(report: Report) -> pd.DataFrame:
    """The main thread's Python samples as a sequence of visits to the program's stacks: consecutive
    samples with the same frames of the program's own code (outside libraries; the whole chain, so
    that one helper called from two places is two stacks) are one token, at the time the first of
    them began (``pid``, ``token``, ``launch_ns``, ``start_ns``), with ``samples``: how many samples
    in a row saw it."""
    from ...trace.stacks import is_library, stack_paths

    cols = ["pid", "token", "launch_ns", "start_ns", "samples"]
    if not report.count("cpu_sample"):
        return pd.DataFrame(columns=cols)
    s = report.df("SELECT pid, ts_ns, weight_ns, stack_id FROM cpu_sample WHERE tid = pid ORDER BY pid, ts_ns")
    paths = stack_paths(report, {(int(p), int(i)) for p, i in zip(s["pid"], s["stack_id"])})
    stacks: dict[tuple[tuple[str, int], ...], int] = {}
    token = []
    for p, i in zip(s["pid"], s["stack_id"]):
        path = paths.get((int(p), int(i)), [])
        user = tuple((f[1], f[2]) for f in path if not is_library(f[1]))
        token.append(stacks.setdefault(user, len(stacks)) if user else -1)
    s = s.assign(token=np.array(token, np.int64), launch_ns=s["ts_ns"] - s["weight_ns"])
    s = s[s["token"] >= 0]
    change = np.ones(len(s), bool)
    change[1:] = (s["token"].to_numpy()[1:] != s["token"].to_numpy()[:-1]) | (
        s["pid"].to_numpy()[1:] != s["pid"].to_numpy()[:-1])
    out = s[change]
    samples = np.diff(np.append(np.flatnonzero(change), len(s)))
    return out.assign(start_ns=out["launch_ns"], samples=samples)[cols].reset_index(drop=True)


def _regular(found: Pattern, frame: pd.DataFrame) -> bool:
    """Whether iterations found in sampled stacks are of about one length: samples taken less often
    than the loop turns repeat by chance (two lines alternate however the loop runs), and then the
    lengths scatter."""
    t = frame["launch_ns"].to_numpy(np.int64)[found.starts]
    d = np.diff(t)
    if len(d) < 3:
        return False
    med = float(np.median(d))
    return med > 0 and float(np.median(np.abs(d - med))) <= SAMPLE_REGULARITY * med


def _unresolved(found: Pattern, frame: pd.DataFrame) -> tuple[int, int, int] | None:
    """Where sampled stacks repeat as an alias of the sampler, not as the loop: the samples that saw
    one element of the pattern in a row, least, median and most over the iterations, of the element
    that scatters most beyond :data:`SAMPLE_REGULARITY` of its median (and one sample); None where
    every element is seen for about as many samples each turn. A loop the sampler resolves holds
    each of its lines for about as long every turn; a loop that turns many times between two
    samples shows a line for as long as the sampler's phase drifts through it, one sample in one
    turn and hundreds in the next, and the lines between are single samples."""
    n = frame["samples"].to_numpy(np.int64)
    starts = found.starts[:-1][found.starts[:-1] + found.period <= len(n)]
    if not len(starts):
        return None
    per = n[starts[:, None] + np.arange(found.period)[None, :]]
    med = np.median(per, axis=0)
    spread = np.median(np.abs(per - med), axis=0) - np.maximum(SAMPLE_REGULARITY * med, 1.0)
    worst = int(np.argmax(spread))
    if spread[worst] <= 0:
        return None
    return int(per[:, worst].min()), int(med[worst]), int(per[:, worst].max())


def _step_tokens(report: Report) -> Iterator[tuple[pd.DataFrame, str]]:
    """The sequences whose repetition may give the iterations of a report without step marks, in
    the order they are tried, each with what it is in words: GPU operations; without any, the
    top-level module calls of the main thread, its sampled Python stacks, and its PyTorch operators
    where every one was recorded (``--trace torch-ops``; operators of short sample windows would give
    steps inside those windows only). Each is made only when the one before showed no loop."""
    tokens = _gpu_tokens(report)
    if len(tokens):
        yield tokens, "GPU operations"
        return
    yield _module_tokens(report), "top-level module calls"
    yield _sample_tokens(report), "sampled Python stacks"
    if report.count("torch_op") and not report.count("torch_op_window"):
        yield report.df("SELECT pid, name_id AS token, start_ns AS launch_ns, start_ns FROM torch_op "
                        "WHERE tid = pid ORDER BY pid, start_ns"), "PyTorch operators"


def _find(tokens: pd.DataFrame, what: str,
          aliased: dict[int, tuple[int, int, int]] | None = None) -> dict[int, tuple[Pattern, pd.DataFrame]]:
    """Per process, its loop in ``tokens``; a pattern of sampled stacks that only aliases the sampler
    is left out and put in ``aliased`` (see :func:`_unresolved`)."""
    out = {}
    pids = tokens["pid"].to_numpy()
    # one process: its tokens are the frame itself, not a copy of millions of rows
    groups = [(pids[0], tokens)] if len(pids) and (pids == pids[0]).all() else tokens.groupby("pid", sort=True)
    for pid, own in groups:
        own = own.reset_index(drop=True)
        if what == "top-level module calls":
            result = _module_pattern(own)
        else:
            result = _process_pattern(own)
            if result is not None and what == "sampled Python stacks":
                alias = _unresolved(*result)
                if alias is not None and aliased is not None:
                    aliased[int(pid)] = alias
                if alias is not None or not _regular(*result):
                    result = None
        if result is not None:
            out[int(pid)] = result
    return out


_MODULE_CALL = re.compile(r"[/\\]torch[/\\]nn[/\\]modules[/\\]module\.py$")


def calling_line(path: list[tuple[str, str, int]]) -> tuple[str, str, int] | None:
    """The program's frame that called the outermost module in a stack given innermost first: the
    first frame outside libraries beyond the outermost ``Module.__call__`` (None when the stack is
    in no module, or nothing outside libraries called it)."""
    from ...trace.stacks import is_library

    calls = [i for i, f in enumerate(path) if _MODULE_CALL.search(f[1])]
    if not calls:
        return None
    return next((f for f in path[calls[-1] + 1:] if not is_library(f[1])), None)


def _module_line(report: Report, pid: int, frame: pd.DataFrame) -> str | None:
    """The program line (``file:line``) that made most of the sampled top-level module calls."""
    from ...trace.stacks import short_path, stack_paths

    if not report.count("cpu_sample") or not len(frame):
        return None
    s = report.df("SELECT ts_ns, stack_id FROM cpu_sample WHERE pid = ? AND tid = pid ORDER BY ts_ns", [pid])
    ts = s["ts_ns"].to_numpy(np.int64)
    starts, ends = frame["start_ns"].to_numpy(np.int64), frame["end_ns"].to_numpy(np.int64)
    i = np.searchsorted(starts, ts, "right") - 1
    inside = s[(i >= 0) & (ts < ends[np.maximum(i, 0)])]
    counts = inside["stack_id"].value_counts()
    paths = stack_paths(report, {(pid, int(x)) for x in counts.index})
    lines: dict[str, int] = {}
    for sid, n in counts.items():
        f = calling_line(paths.get((pid, int(sid)), []))  # type: ignore[arg-type]
        if f is not None:
            key = f"{short_path(f[1])}:{f[2]}"
            lines[key] = lines.get(key, 0) + int(n)
    return max(lines, key=lambda k: lines[k]) if lines else None


def _module_detail(report: Report, found: Pattern, frame: pd.DataFrame, n: int, line: str | None) -> str:
    """How iterations were found from module calls, in words: ``each call of Model (from
    train.py:12) is an iteration, 149 times``, or ``groups of 16 calls of Model ...``."""
    ids = frame["token"].to_numpy(np.int64)[found.starts[0]:found.starts[0] + found.period]
    names: list[str] = []
    for t in ids:
        name_id = int(t) // 2 if frame.attrs.get("grouped") else int(t)  # see _grouped
        row = report.sql("SELECT value FROM string WHERE id = ?", [name_id])
        name = str(row[0][0]) if row else "?"
        if name not in names:
            names.append(name)
    what = " and ".join(names[:3]) + (" ..." if len(names) > 3 else "")
    where = f" (from {line})" if line else ""
    if found.period == 1:
        return f"each top-level call of {what}{where} is an iteration, {n} times"
    return f"repeating pattern of {found.period} top-level calls of {what}{where}, {n} times"


def pattern_steps(report: Report) -> PatternSteps:
    """Return the steps of each process found as its repeating launch sequence (GPU operations;
    without any, the top-level module calls of its main thread, its sampled Python stacks, or its
    PyTorch operators: :func:`_step_tokens`), computed once per report."""
    if report in _PATTERNS:
        return _PATTERNS[report]
    tokens, what = pd.DataFrame(columns=["pid", "token"]), "GPU operations"
    found_by_pid: dict[int, tuple[Pattern, pd.DataFrame]] = {}
    tried = []
    aliased: dict[int, tuple[int, int, int]] = {}
    for tokens, what in _step_tokens(report):
        if len(tokens):
            tried.append((tokens, what))
            found_by_pid = _find(tokens, what, aliased)
            if found_by_pid:
                break
    if not found_by_pid and tried:  # why none: said of the first sequence there was
        tokens, what = tried[0]
    rows: list[tuple[int, int, int, int, int]] = []
    details: list[str] = []
    for pid, (found, frame) in found_by_pid.items():
        starts = found.starts
        bounds, gpu_side = _bounds(found, frame)
        host = what != "GPU operations" and what != "PyTorch operators"
        # from module calls or samples, an iteration ends where the next begins: the last one, whose
        # end nothing records (its Python after the calls), is left out
        n = len(starts) - 1 if host else len(starts)
        for i in range(n):
            rows.append((int(pid), i + 1, int(bounds[i]), int(bounds[i + 1]), int(bounds[i + 1]), gpu_side))
        line = (_module_line(report, int(pid), frame) if what == "top-level module calls"
                else _launch_line(report, int(pid), bounds[:-1]))
        where = f" (process {pid})" if tokens["pid"].nunique() > 1 else ""
        if what == "top-level module calls":
            details.append(_module_detail(report, found, frame, n, line) + where)
            continue
        verb = " at" if what == "sampled Python stacks" else " launched from"
        details.append(f"repeating pattern of {found.period} {what if found.period != 1 else what[:-1]}"
                       + (f"{verb} {line}" if line else "") + f", {n} times" + where)
    frame = pd.DataFrame(rows, columns=["pid", "step", "start_ns", "end_ns", "stop_ns", "gpu_side"])
    if details:
        detail = "; ".join(details) + ": no step marks were recorded"
    elif len(tokens) and what == "sampled Python stacks" and aliased:
        least, median, most = next(iter(aliased.values()))
        detail = (f"no step marks, and the {len(tokens)} {what} repeat only as an alias of the sampler "
                  f"(a line held for {least} to {most} samples in a row from one turn to the next, {median} in "
                  "the median: the loop turns faster than samples are taken): the whole capture counts as one step")
    elif len(tokens):
        detail = (f"no step marks, and the {len(tokens)} {what} do not repeat at least 4 times in one "
                  "order: the whole capture counts as one step")
    else:
        detail = ""
    _PATTERNS[report] = PatternSteps(frame, detail)
    return _PATTERNS[report]

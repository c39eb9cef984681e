"""What each rank does per step before and between its collectives: the work that makes the others
wait, told apart from the waits themselves.

A rank's waits in collectives say who arrived last, not why. Under a launch-bound step (eager
PyTorch, or any job under a profiler) the last arrival at each collective is whichever host
launched it later, by a fraction of a millisecond per call, and those lags add up to milliseconds
per step although removing nothing would save them. So the rank rules look at the work itself:

- ``host_ns``: host time of the step that launches nothing before its first GPU operation (the
  step's *lead*: data loading, a sleep, logging, a checkpoint), blocking calls (synchronizations)
  left out, plus the DataLoader waits after the first launch. A rank whose input pipeline is slower
  starts its GPU work later in every step by that much.
- ``kernel_ns``: the time the rank's own compute kernels (NCCL's left out) ran in the step (their
  union, a kernel counted in the step that launched it). A rank with a bigger shard or batch runs
  longer between its collectives.
- ``queue_ns``: how long the rank's NCCL kernels of the step sat in its GPU's queue behind its own
  work (their start - their launch). Extra kernel time delays a collective only where the GPU,
  not the host, was behind: in a launch-bound step the GPU idles between kernels and a bigger shard
  fills those gaps instead of making the others wait.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..distributed.collectives import interval_union
from .timeline import Timelines

COLUMNS = ["pid", "start_ns", "host_ns", "loader_ns", "kernel_ns", "queue_ns"]


def rank_work(timelines: Timelines, names: dict[int, str]) -> pd.DataFrame:
    """One row per process and step: ``pid``, ``start_ns`` (of the step), ``host_ns``, ``loader_ns`` (the DataLoader
    waits of the step), ``kernel_ns``, ``queue_ns`` (see the module docstring)."""
    rows = []
    nccl_ids = [i for i, name in names.items() if name.startswith("nccl")]
    for p in timelines.processes:
        if not p.has_steps or not len(p.ops):
            continue
        ops = p.ops.sort_values("launch_ns", kind="stable")
        launch = ops["launch_ns"].to_numpy(np.int64)
        nccl = ops["name_id"].isin(nccl_ids).to_numpy(bool)
        compute = ((ops["kind"] == "kernel").to_numpy() & ~nccl)
        cs, ce = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
        calls_s, calls_e = p.calls["start_ns"].to_numpy(np.int64), p.calls["end_ns"].to_numpy(np.int64)
        ls, le = p.loaders["start_ns"].to_numpy(np.int64), p.loaders["end_ns"].to_numpy(np.int64)
        held = _held(launch, cs, ce, nccl)
        for start, end in zip(p.windows["start_ns"].to_numpy(np.int64), p.windows["end_ns"].to_numpy(np.int64)):
            i, j = np.searchsorted(launch, [start, end], "left")
            first = int(launch[i]) if j > i else int(end)
            blocked = _covered(calls_s, calls_e, start, first)
            lead = max(0, first - int(start) - blocked)
            loader = _covered(ls, le, start, end)
            in_lead = _covered(ls, le, start, first)
            mine = np.flatnonzero(compute[i:j]) + i
            queue = int(held[np.flatnonzero(nccl[i:j]) + i].sum())
            rows.append((p.pid, int(start), lead + loader - in_lead, loader, _union_ns(cs[mine], ce[mine]), queue))
    return pd.DataFrame(rows, columns=COLUMNS)


def _held(launch: np.ndarray, start: np.ndarray, end: np.ndarray, nccl: np.ndarray) -> np.ndarray:
    """Per operation (NCCL kernels only, else 0): how long it sat in the GPU's queue after its launch
    and after the process's previous NCCL kernel ended (a collective queued behind another one that
    waits for a peer is held by the peer, not by this rank's own work)."""
    out = np.zeros(len(launch), dtype=np.int64)
    idx = np.flatnonzero(nccl)
    if not len(idx):
        return out
    idx = idx[np.argsort(start[idx], kind="stable")]
    prev_end = np.r_[np.iinfo(np.int64).min, np.maximum.accumulate(end[idx])[:-1]]
    out[idx] = np.maximum(start[idx] - np.maximum(launch[idx], prev_end), 0)
    return out


def _covered(s: np.ndarray, e: np.ndarray, a: int, b: int) -> int:
    """The time of [a, b) that the intervals (s, e) cover, counted once."""
    if b <= a or not len(s):
        return 0
    keep = (s < b) & (e > a)
    return _union_ns(np.maximum(s[keep], a), np.minimum(e[keep], b))


def _union_ns(s: np.ndarray, e: np.ndarray) -> int:
    """The length of the union of the intervals (s, e)."""
    starts, ends = interval_union(s, e)
    return int((ends - starts).sum())

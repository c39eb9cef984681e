"""The work of kernels launched outside the operator sample windows, carried over from sampled launches.

With ``--trace torch-shapes`` PyTorch operators are recorded only in a few sample windows
(``torch_op_window``; capture/python/op_sample.py), while every kernel is recorded. A kernel launched in a
window gets its work from its operator (:mod:`.kernel_work`); one launched outside them has no
operator. It takes the per-launch work of the sampled launches of the same *kernel
configuration*: the same kernel (name), grid, block, cluster and shared memory (static and
dynamic), which fix what one launch computes for all but a few kernels. Matching, the most specific
first:

1. the same configuration at the same place in a range of the same name: the n-th launch of the
   configuration inside one instance of the owning PyTorch range (a module's forward, the
   ``backward()`` call, the optimizer step; :func:`.layers.op_owners_sql`) takes the work of the
   n-th launches inside sampled instances of that range. Iterations repeat their launches in order,
   so this tells apart matrix products of different shapes that share a configuration (persistent
   kernels launch as many blocks as the GPU has room for, whatever the shape);
2. the same configuration in a range of the same name;
3. the same configuration anywhere.

A launch takes the mean FLOPs, matrix FLOPs and bytes of the sampled launches it matched (these
agree but where one configuration served operators of different shapes: counted as *mixed*), and
the precision, kind, operator and tensor-core use of the first of them; its ``source`` is
``carried``. Launches of a configuration never sampled keep no work. Reports whose operators were
all recorded (``--trace torch-ops``) and older reports have no windows: nothing is carried.
"""

from __future__ import annotations

from dataclasses import dataclass
from weakref import WeakKeyDictionary

import pandas as pd

from ....trace.report import Report
from ...ops.attribution import FOREVER, ops_table
from ...ranges.op_windows import WINDOWS, sampled, windows

MIXED = 1.01  # sampled launches of one configuration whose work differs by more than this factor are mixed
_WORK = ["flops", "matrix_flops", "bytes"]
_LABELS = ["precision", "work_kind", "op_name", "tensor_cores"]


@dataclass(frozen=True)
class Carried:
    """What carrying did in one report: the windows, and the kernel launches outside them."""

    windows: int  # sample windows
    operators: int  # operators recorded in them
    kernel_ns: int  # GPU time of all kernels
    outside: int  # kernel launches outside every window
    outside_ns: int
    carried: int  # launches outside that took sampled work
    carried_ns: int
    mixed: int  # carried launches whose sampled launches did not agree (they took the mean)


_SUMMARY: WeakKeyDictionary[Report, Carried] = WeakKeyDictionary()


def _keys(report: Report) -> pd.DataFrame:
    """Every kernel's ``item`` (op_id), ``work_key`` (its configuration, as above) and ``in_window``."""
    return report.df(
        f"""WITH cfg AS (
                SELECT id, dense_rank() OVER (ORDER BY name_id, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                                              cluster_x, cluster_y, cluster_z, static_shared_memory,
                                              dynamic_shared_memory) AS work_key
                FROM kernel_config),
            w AS (SELECT pid, start_ns, coalesce(end_ns, {FOREVER}) AS end_ns FROM {WINDOWS}),
            placed AS (
                SELECT o.op_id, o.config_id, coalesce(o.launch_ns <= w.end_ns, FALSE) AS in_window
                FROM (SELECT * FROM {ops_table(report)} WHERE kind = 'kernel') o
                ASOF LEFT JOIN w ON w.pid = o.pid AND o.launch_ns >= w.start_ns)
            SELECT p.op_id AS item, c.work_key, p.in_window FROM placed p JOIN cfg c ON c.id = p.config_id"""
    )


def _fill(frame: pd.DataFrame, target: pd.Series, source: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Give the rows of ``target`` the work of ``source`` rows with equal ``keys``; return the rows filled,
    and whether their match was mixed (index: frame's)."""
    g = source.groupby(keys, dropna=False, sort=False)
    agg = g[_WORK].mean().join(g[_LABELS].first())
    spread = g[["flops", "bytes"]].agg(["min", "max"])
    agg["mixed"] = ((spread[("flops", "max")] > spread[("flops", "min")] * MIXED)
                    | (spread[("bytes", "max")] > spread[("bytes", "min")] * MIXED)).to_numpy()
    hit = frame.loc[target, keys].join(agg, on=keys, how="inner")
    frame.loc[hit.index, _WORK + _LABELS] = hit[_WORK + _LABELS]
    frame.loc[hit.index, "source"] = "carried"
    return hit["mixed"].astype(bool)


def carry(report: Report, frame: pd.DataFrame) -> pd.DataFrame:
    """Return :mod:`.kernel_work`'s frame with the work of sampled launches carried to the launches outside
    the sample windows (see the module docstring); ``frame`` needs ``item``, ``time_ns``, ``owner``,
    ``owner_rid``, ``source`` and the work columns. Unchanged for a report without windows."""
    if not sampled(report):
        return frame
    n, ops, _ = windows(report)
    frame = frame.merge(_keys(report), on="item", how="left")
    frame["in_window"] = frame["in_window"].fillna(False).astype(bool)
    owned = frame["owner_rid"].notna()
    frame["ordinal"] = frame.groupby(["owner_rid", "work_key"], dropna=False, sort=False).cumcount().where(owned)
    source = frame[(frame["source"] == "model") & frame["in_window"]]
    outside = ~frame["in_window"]
    mixed = pd.Series(False, index=frame.index)
    for keys in (["work_key", "owner", "ordinal"], ["work_key", "owner"], ["work_key"]):
        target = outside & frame["flops"].isna()
        if keys[-1] == "ordinal":
            target &= owned
        if target.any() and len(source):
            src = source[source["ordinal"].notna()] if keys[-1] == "ordinal" else source
            hit = _fill(frame, target, src, keys)
            mixed.loc[hit.index] = hit
    carried = frame["source"] == "carried"
    t = frame["time_ns"]
    _SUMMARY[report] = Carried(n, ops, int(t.sum()), int(outside.sum()), int(t[outside].sum()), int(carried.sum()),
                               int(t[carried].sum()), int((mixed & carried).sum()))
    return frame.drop(columns=["work_key", "in_window", "ordinal"])

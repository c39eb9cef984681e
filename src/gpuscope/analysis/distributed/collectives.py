"""Collective communication: which calls were collectives, on which rank, and who waited for whom.

A collective is found in three kinds of records, the first that a process has:

1. NCCL kernels (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``, ``ncclKernel_AllGather_RING_LL_Sum_int8``):
   kind, algorithm (``RING``, ``TREE``, ``NVLS``, ``COLLNET``), protocol (``LL``, ``LL128``,
   ``SIMPLE``) from the name; times on the GPU, where a kernel spins until every rank joined;
2. PyTorch's c10d operators (``c10d::allreduce_``, ``c10d::_allgather_base_``,
   ``_c10d_functional::all_reduce``; ``--trace torch-ops``): the call that hands the tensors to the
   backend (gloo, NCCL), with their shapes, so bytes;
3. ``record_function`` ranges the backends make (``gloo:all_reduce``, ``nccl:all_reduce``).

Ranks are matched call by call: the *n*-th collective of a kind and process group on one rank is
the *n*-th of that kind and group on every other (a collective is entered by every rank of its
group in the same order). The group is known from the c10d operator (its process group's name,
description and member ranks, recorded with the call); NCCL kernels take the group of the operator
of the same kind and number in their process (or, where operators were recorded only in sample
windows, of the operator running at their launch); without operators all calls are of one group,
and where only some processes know a kind's group, every process takes the one group the others
named, or none. Its *arrival* on a rank is the start of its call; no rank can leave before the last one arrived, so a
rank waits ``last arrival - own arrival`` for the slowest (arrival skew), and the last to arrive is
the one the others wait for. Times of processes of one host share one clock; across hosts they are
compared as recorded.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from ...trace.report import Report
from .groups import call_keys, fill_by_position, process_steps
from .ranks import rank_table

# the kinds, by their spelling with underscores and case removed
KINDS = {
    "allreduce": "all_reduce", "allreducecoalesced": "all_reduce", "allgather": "all_gather",
    "allgatherbase": "all_gather", "allgatherintotensor": "all_gather", "allgathercoalesced": "all_gather",
    "allgatherintotensorcoalesced": "all_gather", "reducescatter": "reduce_scatter",
    "reducescatterbase": "reduce_scatter", "reducescattertensor": "reduce_scatter",
    "reducescattertensorcoalesced": "reduce_scatter", "alltoall": "all_to_all", "alltoallbase": "all_to_all",
    "alltoallsingle": "all_to_all", "broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier",
    "send": "send", "recv": "recv", "recvanysource": "recv", "sendrecv": "send_recv", "gather": "gather",
    "scatter": "scatter", "monitoredbarrier": "barrier",
}
ALGORITHMS = ("RING", "TREE", "NVLS", "NVLSTREE", "COLLNETDIRECT", "COLLNETCHAIN", "COLLNET", "PAT")
PROTOCOLS = ("LL128", "LL", "SIMPLE")
_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)((?:_[A-Za-z0-9]+)*)")
_TORCH_OP = re.compile(r"^_?c10d(?:_functional)?::_?([a-z_]+?)_?$")
_RANGE = re.compile(r"^(gloo|nccl|mpi|ucc):([a-z_]+)")
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
            "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16, "float8_e4m3fn": 1,
            "float8_e5m2": 1}
COLUMNS = ["pid", "rank", "host", "kind", "name", "source", "start_ns", "end_ns", "bytes", "algorithm",
           "protocol", "group", "group_desc", "group_size", "seq", "call"]
# NCCL's bus bandwidth factor per kind (nccl-tests, doc/PERFORMANCE.md), for a group of n ranks:
# busBw = algBw * factor, so that every kind reads against the hardware's link bandwidth
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
              "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0,
              "reduce": lambda n: 1.0, "send": lambda n: 1.0, "recv": lambda n: 1.0, "send_recv": lambda n: 1.0}
# operators whose first argument is one rank's shard of the collective's buffer (nccl-tests counts
# all_gather and reduce_scatter by the whole, gathered buffer)
_SHARD_FIRST = {("c10d::reduce_scatter_", "reduce_scatter"), ("c10d::_reduce_scatter_base_", "reduce_scatter"),
                ("c10d::reduce_scatter_tensor_coalesced_", "reduce_scatter"),
                ("_c10d_functional::all_gather_into_tensor", "all_gather"),
                ("_c10d_functional::all_gather_into_tensor_coalesced", "all_gather")}


def _kind(word: str) -> str | None:
    return KINDS.get(word.replace("_", "").lower())


def parse_kernel(name: str) -> tuple[str, str | None, str | None] | None:
    """Return (kind, algorithm, protocol) of an NCCL kernel's name, or None for another kernel."""
    m = _NCCL_KERNEL.match(name)
    if not m:
        return None
    kind = _kind(m.group(1))
    if kind is None:
        return None
    parts = [p.upper() for p in m.group(2).split("_") if p]
    algorithm = next((p for p in parts if p in ALGORITHMS), None)
    protocol = next((p for p in parts if p in PROTOCOLS), None)
    return kind, algorithm, protocol


def parse_op(name: str) -> str | None:
    """Return the kind of a c10d operator (``c10d::allreduce_``), or None (``wait_tensor`` is no collective)."""
    m = _TORCH_OP.match(name)
    return _kind(m.group(1)) if m else None


def parse_range(name: str) -> str | None:
    """Return the kind of a backend's ``record_function`` range (``gloo:all_reduce``), or None."""
    m = _RANGE.match(name)
    return _kind(m.group(2)) if m else None


def tensor_bytes(shapes: str | None, dtypes: str | None) -> int | None:
    """The bytes of a c10d operator's first argument (a tensor or a list of tensors), from the
    ``torch_op`` row's JSON ``shapes`` and ``dtypes``; None when they do not say."""
    try:
        s, d = json.loads(shapes or "null"), json.loads(dtypes or "null")
    except ValueError:
        return None
    if not s or not d:
        return None
    first, types = s[0], d[0]
    if first is None or types is None:
        return None
    if first and not isinstance(first[0], list):  # one tensor: a shape, and one dtype
        first, types = [first], [types] if isinstance(types, str) else types
    if isinstance(types, str):
        types = [types] * len(first)
    total = 0
    for shape, dtype in zip(first, types):
        if shape is None or dtype not in ITEMSIZE:
            return None
        total += int(np.prod(shape, dtype=np.int64)) * ITEMSIZE[dtype]
    return total


def group_of(scalars: str | None) -> tuple[str | None, str | None, int | None]:
    """(name, description, size) of the process group of a c10d operator, from its ``torch_op`` row's
    JSON ``scalars``: ``process_group`` ([name, description, global ranks], as recorded), or the
    ``group_name`` and ``group_size`` arguments of the functional collectives; Nones where absent."""
    try:
        values = json.loads(scalars or "{}")
    except ValueError:
        return None, None, None
    if not isinstance(values, dict):
        return None, None, None
    group = values.get("process_group")
    if isinstance(group, list) and len(group) == 3:
        ranks = group[2] if isinstance(group[2], list) else None
        return (None if group[0] is None else str(group[0]), None if group[1] is None else str(group[1]),
                len(ranks) if ranks else None)
    name, size = values.get("group_name"), values.get("group_size")
    return (None if name is None else str(name), None, size if isinstance(size, int) else None)


def bus_bandwidth(kind: str, data_bytes: float | None, seconds: float, n: int | None) -> float | None:
    """NCCL's bus bandwidth (B/s) of a collective of ``kind`` moving ``data_bytes`` in ``seconds``
    among ``n`` ranks; None where any is unknown (barriers move no data)."""
    factor = BUS_FACTOR.get(kind)
    if factor is None or not data_bytes or seconds <= 0 or not n or n < 1:
        return None
    return data_bytes / seconds * factor(n)


def data_bytes(name: str, kind: str, first_bytes: float | None, n: int | None) -> float | None:
    """The collective's buffer as nccl-tests counts it, from the bytes of the operator's first
    argument: the whole gathered buffer for all_gather and reduce_scatter (``n`` times a shard)."""
    if first_bytes is None or pd.isna(first_bytes):
        return None
    if (name, kind) in _SHARD_FIRST:
        return float(first_bytes) * n if n else None
    return float(first_bytes)


def _from_kernels(report: Report) -> pd.DataFrame:
    if not report.count("kernel"):
        return pd.DataFrame(columns=["pid", "name", "start_ns", "end_ns"])
    return report.df(
        """SELECT k.pid, n.value AS name, k.start_ns, k.end_ns FROM kernel k
           JOIN kernel_config c ON c.id = k.config_id JOIN string n ON n.id = c.name_id
           WHERE n.value LIKE 'nccl%Kernel%' ORDER BY k.pid, k.start_ns""")


def _from_ops(report: Report) -> pd.DataFrame:
    if not report.count("torch_op"):
        return pd.DataFrame(columns=["pid", "name", "start_ns", "end_ns", "shapes", "dtypes", "scalars"])
    return report.df(
        """SELECT o.pid, n.value AS name, o.start_ns, o.end_ns, o.shapes, o.dtypes, o.scalars FROM torch_op o
           JOIN string n ON n.id = o.name_id WHERE n.value LIKE '%c10d%' ORDER BY o.pid, o.start_ns""")


def _from_ranges(report: Report) -> pd.DataFrame:
    if not report.count("nvtx_range"):
        return pd.DataFrame(columns=["pid", "name", "start_ns", "end_ns"])
    return report.df(
        """SELECT r.pid, n.value AS name, r.start_ns, r.end_ns FROM nvtx_range r JOIN string n ON n.id = r.name_id
           WHERE r.kind = 'range' AND regexp_matches(n.value, '^(gloo|nccl|mpi|ucc):') ORDER BY r.pid, r.start_ns""")


def collectives(report: Report) -> pd.DataFrame:
    """Every collective call of every process, from its best source (NCCL kernels, then c10d
    operators, then backend ranges): ``pid``, ``rank`` (None without a rank row), ``host``, ``kind``,
    ``name``, ``source`` (``kernel``, ``torch_op``, ``range``), ``start_ns``, ``end_ns``, ``bytes``
    (the collective's buffer as nccl-tests counts it, :func:`data_bytes`; None where not recorded), ``algorithm``, ``protocol`` (NCCL kernels), ``group``,
    ``group_desc``, ``group_size`` (the process group, from the c10d operator; None where not
    recorded), ``seq`` (its number among the process's collectives of its kind and group, from 0),
    ``call`` (the key it is matched by across ranks: its step and number in the step, see
    :func:`.groups.call_keys`), in start order per process."""
    frames = []
    kernels = _from_kernels(report)
    if len(kernels):
        # each distinct name parsed once: a long run launches the same few NCCL kernels millions of times
        codes, names = pd.factorize(kernels["name"])
        parsed = [parse_kernel(n) for n in names]
        ok = np.array([p is not None for p in parsed], bool)
        keep = ok[codes]
        codes = codes[keep]

        def field(i: int) -> np.ndarray:
            return np.array([p[i] if p else None for p in parsed] or [None], dtype=object)[codes]

        kernels = kernels[keep].assign(kind=field(0), algorithm=field(1), protocol=field(2), source="kernel",
                                       bytes=None, group=None, group_desc=None, group_size=None)
        frames.append(kernels)
    ops = _from_ops(report)
    if len(ops):
        kinds = [parse_op(n) for n in ops["name"]]
        keep = np.array([k is not None for k in kinds], bool)
        sizes = [tensor_bytes(s, d) for s, d in zip(ops["shapes"], ops["dtypes"])]
        groups = [group_of(x) for x in ops["scalars"]]
        sizes = [data_bytes(n, k, b, g[2]) if k else None for n, k, b, g in zip(ops["name"], kinds, sizes, groups)]
        ops = ops.assign(kind=kinds, bytes=sizes, source="torch_op", algorithm=None, protocol=None,
                         group=[g[0] for g in groups], group_desc=[g[1] for g in groups],
                         group_size=[g[2] for g in groups])[keep]
        frames.append(ops.drop(columns=["shapes", "dtypes", "scalars"]))
    ranges = _from_ranges(report)
    if len(ranges):
        kinds = [parse_range(n) for n in ranges["name"]]
        keep = np.array([k is not None for k in kinds], bool)
        frames.append(ranges.assign(kind=kinds, bytes=None, source="range", algorithm=None, protocol=None, group=None,
                                    group_desc=None, group_size=None)[keep])
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    found = pd.concat(frames, ignore_index=True)
    order = {"kernel": 0, "torch_op": 1, "range": 2}
    best = found.groupby("pid")["source"].agg(lambda s: min(s, key=order.__getitem__))
    found = found[found["source"] == found["pid"].map(best)]
    steps = process_steps(report) if found["pid"].nunique() > 1 else pd.DataFrame(columns=["pid", "step", "start_ns", "end_ns"])
    found = _groups_alike(fill_by_position(_bytes_from_ops(found, ops, report), steps))
    found = found.sort_values(["pid", "start_ns"], kind="stable").reset_index(drop=True)
    found["seq"] = found.groupby(["pid", group_key(found), "kind"]).cumcount()
    found["call"] = call_keys(found.assign(group_key=group_key(found)), steps, ["group_key", "kind"])
    ranks = rank_table(report).set_index("pid")
    found["rank"] = found["pid"].map(ranks["rank"]) if len(ranks) else None
    found["host"] = found["pid"].map(ranks["host"]) if len(ranks) else None
    found["end_ns"] = found["end_ns"].fillna(found["start_ns"]).astype(np.int64)
    return found[COLUMNS]


def group_key(coll: pd.DataFrame) -> pd.Series:
    """The process group of each collective as a key to group by ("" where not recorded)."""
    return coll["group"].astype(object).where(coll["group"].notna(), "").astype(str).rename("group_key")


def _groups_alike(found: pd.DataFrame) -> pd.DataFrame:
    """Make the process group, the key calls are matched by across ranks, known alike on every process.
    Where some processes know the group of a kind's calls and others do not (their operators fell
    outside the sample windows), the calls of that kind match by number within one group on every
    side: the one group the others named; where they named several, none (every call of the kind in
    one sequence) if some process knows no group of the kind, else the groups as known (the calls
    left unknown, those outside the steps :mod:`.groups` fills, match among themselves).
    Matching known groups on one rank against none on another would leave every call unmatched,
    each rank seeming to wait for the others forever."""
    if not len(found):
        return found
    found = found.copy()
    for column in ("group", "group_desc", "group_size"):
        found[column] = found[column].astype(object)
    for kind, rows in found.groupby("kind").groups.items():
        part = found.loc[rows]
        known = part["group"].notna()
        if known.all() or not known.any():
            continue
        named = part.loc[known, ["group", "group_desc", "group_size"]].drop_duplicates("group")
        if len(named) == 1:
            g = named.iloc[0]
            for column in ("group", "group_desc", "group_size"):
                found.loc[rows[~known.to_numpy()], column] = g[column]
        elif part.loc[known, "pid"].nunique() < part["pid"].nunique():
            for column in ("group", "group_desc", "group_size"):
                found.loc[rows, column] = None
    return found


def _bytes_from_ops(found: pd.DataFrame, ops: pd.DataFrame, report: Report) -> pd.DataFrame:
    """Give NCCL kernels the bytes and process group of their c10d operator: the one of the same
    kind and number in their process where the process has as many operators of that kind as
    kernels; else the operator of that kind running on the host when the kernel was launched (the
    operators recorded in sample windows: numbering those would pair them with the wrong kernels).
    A barrier's kernel (NCCL's one-element all-reduce) is numbered among the all-reduces and takes
    the kind ``barrier`` from its operator."""
    if not len(ops) or not (found["source"] == "kernel").any():
        return found
    ops = ops.dropna(subset=["kind"]).copy()
    # NCCL carries out a barrier as a one-element all-reduce: its kernel is an all-reduce's
    ops["call_kind"] = ops["kind"]
    ops["kind"] = ops["kind"].where(ops["kind"] != "barrier", "all_reduce")
    ops["seq"] = ops.sort_values("start_ns").groupby(["pid", "kind"]).cumcount()
    columns = ("bytes", "group", "group_desc", "group_size", "call_kind")
    by = {(int(p), k, int(s)): (b, g, d, n, c) for p, k, s, b, g, d, n, c in
          zip(ops["pid"], ops["kind"], ops["seq"], *(ops[c] for c in columns))}
    found = found.copy()
    # numbered in time order, then put back in ``found``'s order (zipped with its rows below)
    seq = found.sort_values("start_ns", kind="stable").groupby(["pid", "kind"]).cumcount().reindex(found.index)
    calls = ops.groupby(["pid", "kind"]).size()
    kernel = found["source"] == "kernel"
    launched = found[kernel].groupby(["pid", "kind"]).size()
    whole = {key for key, n in launched.items() if calls.get(key) == n}
    in_whole = pd.Series([(p, k) in whole for p, k in zip(found["pid"], found["kind"])], index=found.index, dtype=bool)
    got = {i: by.get((int(p), k, int(s)), (None,) * 5) for i, p, k, s in
           zip(found.index[kernel & in_whole], found.loc[kernel & in_whole, "pid"], found.loc[kernel & in_whole, "kind"],
               seq[kernel & in_whole])}
    if (kernel & ~in_whole).any():
        at = {(int(p), int(o)): (k, (b, g, d, n, c)) for p, o, k, b, g, d, n, c in
              zip(ops["pid"], ops["start_ns"], ops["kind"], *(ops[c] for c in columns))}
        launches = _launching_ops(report)
        for i, p, k, s in zip(found.index[kernel & ~in_whole], found.loc[kernel & ~in_whole, "pid"],
                              found.loc[kernel & ~in_whole, "kind"], found.loc[kernel & ~in_whole, "start_ns"]):
            kind, values = at.get((int(p), launches.get((int(p), int(s)), -1)), (None, None))
            if kind == k:
                got[i] = values
    for n, column in enumerate(columns[:-1]):
        found[column] = found[column].astype(object)
        if got:
            found.loc[list(got), column] = pd.Series([g[n] for g in got.values()], index=list(got), dtype=object)
    found.loc[[i for i, g in got.items() if g[4] == "barrier"], "kind"] = "barrier"
    return found


def _launching_ops(report: Report) -> dict[tuple[int, int], int]:
    """For each NCCL kernel launched inside a recorded c10d operator, (pid, kernel start) → that
    operator's start."""
    from ..ops.attribution import ops_table
    from ..ranges.operators import op_kernels_table, torch_ops_table

    ops, links, calls = ops_table(report), op_kernels_table(report), torch_ops_table(report)
    rows = report.sql(
        f"""SELECT o.pid, o.start_ns, t.start_ns FROM {ops} o JOIN {links} l ON l.op_id = o.op_id
            JOIN {calls} t ON t.torch_op_id = l.torch_op_id JOIN string n ON n.id = o.name_id
            WHERE o.kind = 'kernel' AND n.value LIKE 'nccl%Kernel%' AND t.name LIKE '%c10d%'""")
    return {(int(p), int(s)): int(t) for p, s, t in rows}


def arrivals(coll: pd.DataFrame) -> pd.DataFrame:
    """Each collective call with who it waited for: ``ranks`` (how many ranks made it), ``last_pid``
    (the process that arrived last), ``wait_ns`` (last arrival - own arrival: the time this rank
    waited for the slowest; for an NCCL kernel at most its own duration), ``transfer_ns`` (own end - last arrival, at least 0: the collective's own
    time once all had arrived, where its end was recorded on the GPU). Calls that only one process
    made are kept with ``wait_ns`` 0."""
    if not len(coll):
        return coll.assign(ranks=[], last_pid=[], wait_ns=[], transfer_ns=[])
    coll = coll.assign(group_key=group_key(coll))
    keys = ["group_key", "kind", "call"]
    g = coll.groupby(keys)["start_ns"]
    last = g.transform("max")
    idx = coll.loc[g.idxmax().to_numpy(), keys + ["pid"]].rename(columns={"pid": "last_pid"})
    out = coll.merge(idx, on=keys, how="left")
    out["ranks"] = out.groupby(keys)["pid"].transform("nunique").to_numpy()
    out["wait_ns"] = (last.to_numpy() - coll["start_ns"].to_numpy()).astype(np.int64)
    gpu = out["source"] == "kernel"
    # on the GPU a rank waits inside its own kernel, which cannot have lasted less than the wait
    own = (out["end_ns"] - out["start_ns"]).to_numpy(np.int64)
    out["wait_ns"] = np.where(gpu, np.minimum(out["wait_ns"].to_numpy(np.int64), own), out["wait_ns"]).astype(np.int64)
    out["transfer_ns"] = np.where(gpu, np.maximum(out["end_ns"] - last.to_numpy(), 0), 0).astype(np.int64)
    return out


def overlap_ns(coll: pd.DataFrame, compute: pd.DataFrame | dict[int, Busy]) -> np.ndarray:
    """For each collective of ``coll`` (``pid``, ``start_ns``, ``end_ns``), the time it overlapped
    ``compute`` intervals of its own process (``pid``, ``start_ns``, ``end_ns``; may overlap each other),
    or the union of them :func:`busy_union` made."""
    union = busy_union(compute) if isinstance(compute, pd.DataFrame) else compute
    out = np.zeros(len(coll), dtype=np.int64)
    for pid, idx in coll.groupby("pid").indices.items():
        own = union.get(int(pid))
        if own is None:
            continue
        s, e, cum = own
        a = coll["start_ns"].to_numpy(np.int64)[idx]
        b = coll["end_ns"].to_numpy(np.int64)[idx]
        out[idx] = _covered(s, e, cum, b) - _covered(s, e, cum, a)
    return out


Busy = tuple[np.ndarray, np.ndarray, np.ndarray]  # a union of intervals: starts, ends, length before each


def busy_union(compute: pd.DataFrame) -> dict[int, Busy]:
    """Per process, the union of its ``compute`` intervals (``pid``, ``start_ns``, ``end_ns``): disjoint
    sorted starts and ends, and the total length of those before each (one more at the end)."""
    out = {}
    starts, ends = compute["start_ns"].to_numpy(np.int64), compute["end_ns"].to_numpy(np.int64)
    for pid, idx in compute.groupby("pid").indices.items():
        s, e = interval_union(starts[idx], ends[idx])
        out[int(pid)] = (s, e, np.concatenate([[0], np.cumsum(e - s)]))
    return out


def interval_union(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the intervals [s, e) as disjoint intervals in start order."""
    if not len(s):
        return s, e
    if len(s) > 1 and not bool((s[1:] >= s[:-1]).all()):  # mostly in start order already
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.concatenate([[True], s[1:] > reach[:-1]])
    starts = s[new]
    ends = np.maximum.reduceat(reach, np.flatnonzero(new))
    return starts, ends


def _covered(s: np.ndarray, e: np.ndarray, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the union (disjoint sorted ``s``, ``e``) that lies before each time ``t``."""
    i = np.searchsorted(s, t, "right")
    before = cum[i]
    last = np.maximum(i - 1, 0)
    inside = (i > 0) & (t < e[last])
    return before - np.where(inside, e[last] - t, 0)

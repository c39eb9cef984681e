"""Per rank and step: the step's time, the time in collectives, how much of it overlapped compute,
and the time waiting for the slowest rank; and the ``gpuscope stats`` reports made from them
(``rank_sum``, ``collective_sum``)."""

from __future__ import annotations

import weakref

import numpy as np
import pandas as pd

from ...trace.report import Report
from ..column_fetch import kept_rows
from .collectives import arrivals, bus_bandwidth, busy_union, collectives, interval_union, overlap_ns
from .ranks import rank_table
from ..steps.source import step_source, step_windows
from ..table import Column, Table

STEP_COLUMNS = ["pid", "rank", "host", "step", "start_ns", "duration_ns", "warmup", "collectives", "bytes",
                "comm_ns", "overlap_ns", "wait_ns", "last"]


_TIMED: weakref.WeakKeyDictionary[Report, pd.DataFrame] = weakref.WeakKeyDictionary()


def timed_collectives(report: Report) -> pd.DataFrame:
    """The collectives of :func:`.collectives.collectives` with their arrival skew (:func:`.arrivals`)
    and ``overlap_ns``: for NCCL kernels, the time another kernel of the process ran beside them
    (communication hidden behind compute); 0 for CPU-side calls, whose end is not recorded. An NCCL
    kernel's ``wait_ns`` keeps only the part of its wait that no other kernel of its process ran beside.
    Computed once per report (``stats`` and ``analyze`` ask for it several times); each caller gets
    its own copy."""
    if report not in _TIMED:
        _TIMED[report] = _timed_collectives(report)
    return _TIMED[report].copy()


def _timed_collectives(report: Report) -> pd.DataFrame:
    coll = arrivals(collectives(report))
    coll["overlap_ns"] = np.zeros(len(coll), dtype=np.int64)
    gpu = coll["source"] == "kernel"
    if gpu.any():
        compute = busy_union(_compute_near(report, coll[gpu]))
        coll.loc[gpu, "overlap_ns"] = overlap_ns(coll[gpu].reset_index(drop=True), compute)
        # the wait that cost the rank time: the part of it no other kernel of the rank ran beside
        # (an all-gather prefetched on its own stream spins while the layer before it computes)
        waiting = coll[gpu].assign(end_ns=coll.loc[gpu, "start_ns"] + coll.loc[gpu, "wait_ns"]).reset_index(drop=True)
        hidden = overlap_ns(waiting, compute)
        coll.loc[gpu, "wait_ns"] = (coll.loc[gpu, "wait_ns"].to_numpy(np.int64) - hidden).astype(np.int64)
    return coll


def _compute_near(report: Report, coll: pd.DataFrame) -> pd.DataFrame:
    """The compute kernels (``pid``, ``start_ns``, ``end_ns``) that overlap the span of some NCCL
    kernel of ``coll`` of their process, its wait included: the time of the others beside a
    collective is nil, so their union gives the same overlaps (a long run's 10 M kernels made a
    union of gigabytes for the few hundred thousand collectives)."""
    query = """SELECT k.pid, k.start_ns, k.end_ns FROM kernel k JOIN kernel_config c ON c.id = k.config_id
               JOIN string n ON n.id = c.name_id WHERE n.value NOT LIKE 'nccl%Kernel%'"""
    a = coll["start_ns"].to_numpy(np.int64)
    b = coll["end_ns"].to_numpy(np.int64)
    w = a + coll["wait_ns"].to_numpy(np.int64)
    lo, hi = np.minimum(np.minimum(a, b), w), np.maximum(np.maximum(a, b), w)
    spans = {p: interval_union(lo[idx], hi[idx]) for p, idx in coll.groupby("pid").indices.items()}

    def near(part: dict[str, np.ndarray]) -> np.ndarray:
        pid, start, end = (part[c].astype(np.int64, copy=False) for c in ("pid", "start_ns", "end_ns"))
        out = np.zeros(len(start), bool)
        for p, (us, ue) in spans.items():
            mine = np.flatnonzero(pid == p)
            j = np.searchsorted(us, end[mine], "left") - 1  # the last span that starts before the kernel ends
            out[mine] = (j >= 0) & (ue[np.maximum(j, 0)] > start[mine])
        return out

    # read a chunk at a time, only the kernels near a collective kept
    k = kept_rows(report, query, near)
    if k is None:  # NULL times: every kernel, as they come
        return report.df(query)
    return pd.DataFrame({c: np.asarray(k[c]).astype(np.int64, copy=False) for c in ("pid", "start_ns", "end_ns")})


def rank_steps(report: Report, coll: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per process with collectives (or a rank) and step: ``pid``, ``rank``, ``host``,
    ``step``, ``start_ns``, ``duration_ns``, ``warmup``, ``collectives`` (calls begun in the step),
    ``bytes``, ``comm_ns`` (their time: kernel time on the GPU, the calls' own time on the CPU),
    ``overlap_ns`` (of that, beside compute), ``wait_ns`` (waiting for the slowest rank to arrive),
    ``last`` (collectives of the step this rank arrived last at, of those more than one rank made)."""
    coll = timed_collectives(report) if coll is None else coll
    ranks = rank_table(report).set_index("pid")
    steps = step_windows(report, step_source(report))
    pids = set(coll["pid"].astype(int)) | set(ranks.index.astype(int))
    steps = steps[steps["pid"].isin(pids)]
    if not len(steps):
        return pd.DataFrame(columns=STEP_COLUMNS)
    out = []
    for pid, own in steps.groupby("pid", sort=True):
        own = own.sort_values("start_ns")
        mine = coll[coll["pid"] == pid]
        starts = own["start_ns"].to_numpy(np.int64)
        ends = own["end_ns"].to_numpy(np.int64)
        t = mine["start_ns"].to_numpy(np.int64)
        i = np.searchsorted(starts, t, "right") - 1
        inside = (i >= 0) & (t < ends[np.maximum(i, 0)])
        step_of = np.where(inside, i, -1)
        shared = mine["ranks"].to_numpy() > 1
        frame = pd.DataFrame({
            "i": step_of, "n": 1, "bytes": mine["bytes"].fillna(0).to_numpy(float),
            "comm_ns": (mine["end_ns"] - mine["start_ns"]).to_numpy(np.int64),
            "overlap_ns": mine["overlap_ns"].to_numpy(np.int64), "wait_ns": mine["wait_ns"].to_numpy(np.int64),
            "last": ((mine["last_pid"].to_numpy() == pid) & shared).astype(np.int64)})
        sums = frame[frame["i"] >= 0].groupby("i").sum()
        per = sums.reindex(range(len(own)), fill_value=0)
        out.append(pd.DataFrame({
            "pid": int(pid), "rank": ranks["rank"].get(pid) if len(ranks) else None,
            "host": ranks["host"].get(pid) if len(ranks) else None, "step": own["step"].to_numpy(),
            "start_ns": starts, "duration_ns": ends - starts, "warmup": own["warmup"].to_numpy(bool),
            "collectives": per["n"].to_numpy(np.int64), "bytes": per["bytes"].to_numpy(float),
            "comm_ns": per["comm_ns"].to_numpy(np.int64), "overlap_ns": per["overlap_ns"].to_numpy(np.int64),
            "wait_ns": per["wait_ns"].to_numpy(np.int64), "last": per["last"].to_numpy(np.int64)}))
    return pd.concat(out, ignore_index=True)[STEP_COLUMNS]


def _steady(frame: pd.DataFrame) -> pd.DataFrame:
    steady = frame[~frame["warmup"].astype(bool)]
    return steady if len(steady) else frame


def rank_sum(report: Report) -> Table:
    """Per rank (process): steps, mean steady step and how much longer than the fastest rank's,
    collectives per step, their time, the share of it overlapped by compute, the wait for the
    slowest rank per step, and the share of collectives it arrived last at."""
    cols = [Column("Rank", "id"), Column("PID", "id"), Column("Host"), Column("Steps", "count"),
            Column("Mean Step", "ns"), Column("vs Fastest", "percent"), Column("Collectives/Step", "number"),
            Column("Comm/Step", "ns"), Column("Overlapped", "percent"), Column("Wait/Step", "ns"),
            Column("Arrived Last", "percent")]
    name, title = "rank_sum", "Ranks: Steps, Communication and Waiting"
    per = rank_steps(report)
    if not len(per):
        why = ("No ranks or collectives in this report (a single process, or no torch.distributed): "
               "nothing to compare." if not report.count("rank") else "No steps in this report: mark them with "
               "gpuscope.step(), or record PyTorch's optimizer steps with --trace torch.")
        return Table(name, title, cols, [], [why])
    rows = []
    means = {pid: float(_steady(f)["duration_ns"].mean()) for pid, f in per.groupby("pid")}
    fastest = min(means.values())
    for pid, f in per.groupby("pid", sort=False):
        s = _steady(f)
        n = len(s)
        comm = float(s["comm_ns"].sum())
        shared = float(s["collectives"].sum())
        rank = f["rank"].iloc[0]
        rows.append((None if pd.isna(rank) else int(rank), int(pid), f["host"].iloc[0], len(f), means[pid],
                     100.0 * (means[pid] - fastest) / fastest if fastest else 0.0, shared / n if n else 0.0,
                     comm / n if n else 0.0, 100.0 * float(s["overlap_ns"].sum()) / comm if comm else None,
                     float(s["wait_ns"].sum()) / n if n else 0.0,
                     100.0 * float(s["last"].sum()) / shared if shared else 0.0))
    rows.sort(key=lambda r: (r[0] is None, r[0] if r[0] is not None else 0, r[1]))
    spread = max(means.values()) - fastest
    notes = [f"Means over the steady steps (warm-up left out); spread of the mean step across ranks: {spread / 1e6:.3f} ms. "
             "Wait/Step: time a rank waited in collectives for the last rank to arrive (arrival skew); Arrived "
             "Last: share of its collectives the others waited for it. Overlapped: share of the collectives' "
             "GPU time that other kernels ran beside (none for CPU collectives such as gloo, whose end is not "
             "recorded)."]
    return Table(name, title, cols, rows, notes)


def _group_label(name: object, desc: object) -> str | None:
    if name is None or pd.isna(name):
        return None
    return f"{desc} ({name})" if desc is not None and not pd.isna(desc) else str(name)


def collective_sum(report: Report) -> Table:
    """Per process group, collective kind and rank: calls, bytes, time, algorithm and bus bandwidth
    (NCCL kernels), and the wait for the slowest rank."""
    cols = [Column("Kind"), Column("Group"), Column("Group Size", "count"), Column("Rank", "id"), Column("PID", "id"),
            Column("Source"), Column("Calls", "count"), Column("Bytes", "bytes"), Column("Time", "ns"),
            Column("Algorithm BW", "bytes_per_s"), Column("Bus BW", "bytes_per_s"), Column("Wait", "ns"),
            Column("Algorithm")]
    name, title = "collective_sum", "Collectives by Group, Kind and Rank"
    coll = timed_collectives(report)
    if not len(coll):
        return Table(name, title, cols, [], ["No collectives in this report (NCCL kernels, c10d operators with "
                                             "--trace torch-ops, or gloo/nccl record_function ranges)."])
    world = rank_table(report)["world_size"].dropna()
    rows = []
    partial = []
    for (_, kind, pid), f in coll.groupby(["group_key", "kind", "pid"], sort=True):
        t = int((f["end_ns"] - f["start_ns"]).sum())
        gpu = f["source"].iloc[0] == "kernel"
        size = f["group_size"].dropna()
        n = int(size.max()) if len(size) else (int(f["ranks"].max()) if f["ranks"].max() > 1 else
                                               (int(world.max()) if len(world) else None))
        # bandwidth over the time after the last rank arrived (nccl-tests times ranks that start together)
        moved = f["transfer_ns"].where(f["ranks"] > 1, f["end_ns"] - f["start_ns"])
        known = f["bytes"].notna() & (moved > 0)
        b = float(f.loc[known, "bytes"].astype(float).sum())
        secs = float(moved[known].sum()) / 1e9
        algbw = b / secs if gpu and known.any() and secs > 0 else None
        busbw = bus_bandwidth(kind, b, secs, n) if algbw is not None else None
        algos = ", ".join(sorted({f"{a}/{p}" if p else str(a) for a, p in zip(f["algorithm"], f["protocol"]) if a}))
        rank = f["rank"].iloc[0]
        total = f["bytes"].dropna()
        if 0 < len(total) < len(f):
            partial.append(f"{kind} of pid {int(pid)}: {len(total):,} of {len(f):,} calls")
        rows.append((kind, _group_label(f["group"].iloc[0], f["group_desc"].iloc[0]), n,
                     None if pd.isna(rank) else int(rank), int(pid), f["source"].iloc[0], len(f),
                     float(total.astype(float).sum()) if len(total) else None, t, algbw, busbw,
                     int(f["wait_ns"].sum()), algos or None))
    rows.sort(key=lambda r: (r[0], r[1] or "", r[3] if r[3] is not None else -1, r[4]))
    notes = ["Time: NCCL kernels' GPU time (waiting for peers included), or the c10d calls' own time on the CPU "
             "(gloo runs the transfer on its own threads). Wait: arrival skew, the time this rank entered each "
             "call before the last rank did. Group: the process group's description and name (from the c10d "
             "operator; NCCL's own communicator ids are not recorded). Bytes: the collective's buffer as "
             "nccl-tests counts it (all_gather and reduce_scatter: the whole gathered buffer). Algorithm BW: bytes "
             "over the kernels' time after the last rank arrived; Bus BW: that times NCCL's factor for the kind "
             "and group size (all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, "
             "reduce, send/recv 1), comparable with the links' bandwidth."]
    if partial:
        notes.append("Bytes and bandwidth are of the calls whose c10d operator was recorded (in the operator "
                     "sample windows; --trace torch-ops records all): " + "; ".join(partial[:6])
                     + ("; ..." if len(partial) > 6 else "") + ".")
    return Table(name, title, cols, rows, notes)


REPORTS = {"rank_sum": rank_sum, "collective_sum": collective_sum}

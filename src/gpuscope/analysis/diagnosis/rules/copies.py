"""Rules on host-device copies: pageable memory, copies the host waits for, and copies serialized
with the kernels of their stream.

Each takes its share of the transfer part of the breakdown, charged to one copy: the time the
copy ran while no kernel did (*running*), and the idle time after a copy the host waited for
(*drain*, :mod:`..breakdown`; saving at most the time the host waited). Pageable copies take both;
of the other copies, the drains go to ``sync_copies`` and the running time to ``stream_overlap``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..breakdown import SLACK_NS, latest_covering
from ..context import Context, Process, data_dict, fmt_bytes, fmt_ns, per_step_text
from ..finding import Finding
from ..rule import Rule

MIN_BANDWIDTH_BYTES = 1 << 20  # copies at least this large tell the pinned bandwidth
# Host-to-device bandwidth of pinned copies by compute capability major (PCIe gen 5, 4, older), bytes/s
PINNED_BANDWIDTH = {10: 50e9, 9: 50e9, 8: 24e9}
PINNED_BANDWIDTH_OTHER = 12e9
DIRECTION = {"HtoD": "host-to-device", "DtoH": "device-to-host"}


def copy_claims(p: Process) -> pd.DataFrame:
    """The steady idle pieces charged to copies, with the copy's attributes and ``running``."""
    idle = p.steady_idle
    mine = idle[idle["culprit"] == "copy"]
    ops = p.timeline.ops
    # only the operations the pieces name: an index of every operation copied all of them (millions)
    ops = ops[ops["op_id"].isin(mine["ref"]).to_numpy(bool)].set_index("op_id")
    attrs = ops[["start_ns", "end_ns", "copy_kind", "bytes", "pageable", "is_async", "stream_id"]]
    mine = mine.join(attrs.rename(columns={"start_ns": "start_ns_op", "end_ns": "end_ns_op"}), on="ref")
    mine["running"] = (mine["start_ns"] >= mine["start_ns_op"]) & (mine["end_ns"] <= mine["end_ns_op"])
    return mine


def _steady_copies(p: Process) -> pd.DataFrame:
    ops = p.timeline.ops
    w = p.steady_windows
    return ops[(ops["kind"] == "memcpy") & (ops["start_ns"] >= w["start_ns"].min()) & (ops["start_ns"] < w["end_ns"].max())]


def _waiting_line(ctx: Context, p: Process, copies: pd.DataFrame) -> str | None:
    """The program line of the synchronizations that waited for these copies (the host was in one
    when a copy ended, or started one right after: ``.to()`` and ``.cpu()`` wait after copying), if
    recorded; the most frequent one."""
    calls, sites = p.timeline.calls, ctx.timelines.sites
    if not len(calls) or not len(sites) or not len(copies):
        return None
    ends = copies["end_ns"].to_numpy(np.int64)
    found = latest_covering(calls["start_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64),
                            ends + SLACK_NS, slack=2 * SLACK_NS)
    picked = calls.iloc[found[found >= 0]]
    picked = picked[picked["source"] == "site"]
    if not len(picked):
        return None
    rows = sites.iloc[picked["ref"].to_numpy(int)]
    return str((rows["location"] + " " + rows["function"]).mode().iloc[0]).strip()


def _bandwidth(frame: pd.DataFrame) -> float:
    d = float((frame["end_ns"] - frame["start_ns"]).sum())
    return float(frame["bytes"].sum()) * 1e9 / d if d else 0.0


def pinned_bandwidth(ctx: Context, direction: str) -> tuple[float, str]:
    """The bandwidth pinned copies of ``direction`` reach: measured in this report when it has large
    enough pinned copies, else a typical value for the GPU's PCIe generation; and where it came from."""
    rows = ctx.report.sql(
        """SELECT sum(bytes), sum(end_ns - start_ns) FROM memcpy WHERE copy_kind = ? AND bytes >= ?
           AND (src_kind = 'Pinned' OR dst_kind = 'Pinned')""", [direction, MIN_BANDWIDTH_BYTES])
    nbytes, ns = rows[0]
    if nbytes and ns:
        return float(nbytes) * 1e9 / float(ns), "measured on this run's pinned copies"
    cc = ctx.report.sql("SELECT max(compute_capability) FROM device")[0][0]
    try:
        major = int(str(cc).split(".")[0])
    except ValueError:
        major = 0
    return PINNED_BANDWIDTH.get(major, PINNED_BANDWIDTH_OTHER), "typical for this GPU's PCIe generation"


class PageableCopies(Rule):
    name = "pageable_copies"
    description = ("Copies from or to pageable host memory: the driver stages them through a pinned buffer, so "
                   "they are slower and block the host; pinned memory and non_blocking copies are not.")

    def evaluate(self, ctx: Context) -> list[Finding]:
        out = []
        for p in ctx.processes:
            claims = copy_claims(p)
            claims = claims[claims["pageable"].astype(bool)]
            copies = _steady_copies(p)
            for direction, mine in claims.groupby("copy_kind", observed=True):
                running = p.per_step(float(mine.loc[mine["running"], "ns"].sum()))
                drained = mine[~mine["running"]]
                drain = min(p.per_step(float(drained["ns"].sum())), p.wait_ns(drained))
                these = copies[(copies["copy_kind"] == direction) & copies["pageable"]]
                bw = _bandwidth(these)
                pinned, source = pinned_bandwidth(ctx, str(direction))
                ns = running * max(0.0, 1 - bw / pinned) + drain
                if p.share(ns) < ctx.min_share:
                    continue
                line = _waiting_line(ctx, p, these)
                name = DIRECTION.get(str(direction), str(direction))
                out.append(Finding(
                    rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
                    title=f"Pageable {name} copies: {per_step_text(p, running + drain)} with the GPU idle",
                    evidence=[
                        f"{len(these) / p.n_steps:.1f} copies per step, {fmt_bytes(float(these['bytes'].sum()) / p.n_steps)} "
                        f"per step, at {bw / 1e9:.1f} GB/s; pinned copies reach about {pinned / 1e9:.0f} GB/s ({source})",
                        f"no kernel ran for {fmt_ns(running)} per step while they copied, and for {fmt_ns(drain)} "
                        "after them while the host waited and then launched",
                    ],
                    location=line or "the copies' .to()/.copy_() calls",
                    fix=("Use pinned host memory and asynchronous copies: DataLoader(pin_memory=True) or "
                         "tensor.pin_memory() (a reused pinned buffer), then .to(device, non_blocking=True)"
                         + ("; for results, copy into a pinned buffer with non_blocking=True and read it after an "
                            "event." if direction == "DtoH" else ".")),
                    data=data_dict(running_ns=running, drain_ns=drain, bytes_per_step=float(these["bytes"].sum()) / p.n_steps,
                                   bandwidth=bw, pinned_bandwidth=pinned),
                ))
        return out


class SyncCopies(Rule):
    name = "sync_copies"
    description = ("Copies and memsets the host waits for (synchronous calls, or a wait right after the copy): "
                   "the GPU's queue drains until the host launches again.")

    def evaluate(self, ctx: Context) -> list[Finding]:
        out = []
        for p in ctx.processes:
            claims = copy_claims(p)
            drains = claims[~claims["pageable"].astype(bool) & ~claims["running"]]
            idle = p.steady_idle
            by_op = set(np.flatnonzero(p.timeline.calls["source"].to_numpy(object) == "op"))
            memsets = idle[(idle["culprit"] == "call") & idle["ref"].isin(by_op)]
            both = pd.concat([drains[["call", "ns"]], memsets[["call", "ns"]]])
            ns = min(p.per_step(float(both["ns"].sum())), p.wait_ns(both))
            if p.share(ns) < ctx.min_share:
                continue
            copies = _steady_copies(p)
            waited = copies[copies["op_id"].isin(drains["ref"])]
            evidence = [f"after these the GPU sat idle {per_step_text(p, ns)} while the host waited and then launched"]
            if len(waited):
                kinds = ", ".join(waited["copy_kind"].value_counts().index)
                sync_calls = int((waited["is_async"] == False).sum())  # noqa: E712
                evidence.insert(0, f"{len(waited) / p.n_steps:.1f} {kinds} copies per step of "
                                   f"{fmt_bytes(float(waited['bytes'].median()))} each, waited for by the host"
                                + (f" ({sync_calls} with synchronous calls)" if sync_calls else ""))
            if len(memsets):
                evidence.append(f"{memsets['ref'].nunique() / p.n_steps:.1f} synchronous memsets per step")
            line = _waiting_line(ctx, p, waited) if len(waited) else None
            out.append(Finding(
                rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
                title=f"Synchronous copies: the host waits for each, GPU idle {per_step_text(p, ns)}",
                evidence=evidence, location=line or "synchronous copies",
                fix=("Make the copy asynchronous and use its result later: copy into a pinned buffer with "
                     ".copy_(src, non_blocking=True) (or .to('cpu', non_blocking=True)), record a torch.cuda.Event, "
                     "and synchronize on that event only when the data is needed (e.g. in the next step); use "
                     "cudaMemcpyAsync/cudaMemsetAsync rather than the synchronous calls."),
                data=data_dict(drain_ns=ns, copies_per_step=len(waited) / p.n_steps),
            ))
        return out


class StreamOverlap(Rule):
    name = "stream_overlap"
    description = ("Copies on the same stream as the kernels run while no kernel does; on a separate stream, "
                   "issued ahead of use, they would overlap the kernels.")

    def evaluate(self, ctx: Context) -> list[Finding]:
        out = []
        for p in ctx.processes:
            claims = copy_claims(p)
            mine = claims[~claims["pageable"].astype(bool) & claims["running"]]
            ops = p.timeline.ops
            # distinct first: one Python integer per kernel cost seconds on a long run
            kernel_streams = set(pd.unique(ops.loc[ops["kind"] == "kernel", "stream_id"].dropna().astype(int)).tolist())
            mine = mine[mine["stream_id"].isin(kernel_streams)]
            busy = p.breakdown.mean_parts()
            busy_ns = sum(v for k, v in busy.items() if k.startswith("busy_"))
            running = p.per_step(float(mine["ns"].sum()))
            ns = min(running, busy_ns)
            if p.share(ns) < ctx.min_share:
                continue
            copies = _steady_copies(p)
            these = copies[copies["op_id"].isin(mine["ref"])]
            streams = ", ".join(str(int(s)) for s in sorted(these["stream_id"].dropna().unique()))
            where = ctx.top_launch_range(these["op_id"].to_numpy())
            out.append(Finding(
                rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
                title=f"Copies serialized with compute on stream {streams}: {per_step_text(p, running)} "
                      "with no kernel running",
                evidence=[f"{len(these) / p.n_steps:.1f} copies per step ({fmt_bytes(float(these['bytes'].sum()) / p.n_steps)}) "
                          f"on stream {streams}, which also runs the kernels",
                          f"no kernel ran for {fmt_ns(running)} per step while they copied; kernels keep the GPU "
                          f"busy {fmt_ns(busy_ns)} per step, enough to hide {fmt_ns(ns)}"],
                location=f"launched in {where}" if where else f"copies on stream {streams}",
                fix=("Prefetch on a side stream: issue the next batch's copies on a torch.cuda.Stream() ahead of use "
                     "(from pinned memory, non_blocking=True), and make the compute stream wait on an event "
                     "(torch.cuda.current_stream().wait_stream(copy_stream)); call tensor.record_stream() for "
                     "tensors used across streams."),
                data=data_dict(running_ns=running, saving_ns=ns),
            ))
        return out


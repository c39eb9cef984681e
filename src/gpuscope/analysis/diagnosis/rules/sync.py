"""Host synchronizations inside the step loop, by the program line that made them.

A synchronization costs the GPU what the breakdown charges to it (:mod:`..breakdown`, host
synchronization): the idle time from when the queue ran dry while the host waited, until the host
had launched new work. Removing the wait lets the host queue the next work while the GPU still
runs, so that host work overlaps the GPU's; the step gets shorter by that idle time, but by no more
than the host spent waiting (beyond that the host itself is the bottleneck). Waits for copies of at
least 64 kB belong to the copy rules.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..breakdown import SCALAR_BYTES
from ..context import Context, Process, data_dict, fmt_bytes, fmt_ns, per_step_text
from ..finding import Finding
from ..rule import Rule

DEVICE_SYNCS = ("cudaDeviceSynchronize", "cudaThreadSynchronize", "cuCtxSynchronize", "ContextSynchronize")
BEFORE_NS = 2_000_000  # a copy that started this shortly before the wait may be what it waited for

_WHAT = {
    "read": ("reads a GPU value on the host",
             "Keep the value on the GPU: accumulate losses and metrics in a tensor and read them every N steps or "
             "once per epoch; replace data-dependent host decisions (nonzero, masked indexing, `if tensor:`) with "
             "fixed-shape GPU operations (torch.where, masks)."),
    "device": ("synchronizes the whole device",
               "Remove torch.cuda.synchronize() from the step; time with CUDA events "
               "(torch.cuda.Event(enable_timing=True)) and synchronize once at the end."),
    "copy": ("waits for a copy",
             "Copy with non_blocking=True (from/to pinned memory) and use the data later in the step or in the "
             "next one, after an event (torch.cuda.Event.record / synchronize) says it arrived."),
    "other": ("waits for the GPU",
              "Move the wait out of the step, or after the next step's work is queued (so that the GPU has work "
              "while the host waits); wait on a specific event rather than the whole stream or device."),
}


def _kind(api: str, copy_kind: str | None, nbytes: float | None) -> str:
    if not isinstance(copy_kind, str):  # no copy waited for (NaN from the join)
        copy_kind = None
    if api in DEVICE_SYNCS:
        return "device"
    if copy_kind == "DtoH" and (nbytes or 0) < SCALAR_BYTES:
        return "read"
    if copy_kind:
        return "copy"
    return "other"


def _waited_copies(p: Process, calls: pd.DataFrame) -> pd.DataFrame:
    """Per call, the copy it waited for: the last one to start before the call returned, if it started
    at most BEFORE_NS before the call and ended by the call's end (else NaN). Copies carry their GPU
    start as launch time when API calls were not recorded, so the GPU times decide."""
    copies = p.timeline.ops[p.timeline.ops["kind"] == "memcpy"].sort_values("start_ns")
    starts = copies["start_ns"].to_numpy(np.int64)
    ends = copies["end_ns"].to_numpy(np.int64)
    c_start, c_end = calls["start_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64)
    kinds = np.full(len(calls), None, dtype=object)
    sizes = np.full(len(calls), np.nan)
    if len(starts):
        i = np.searchsorted(starts, c_end, "right") - 1
        j = np.maximum(i, 0)
        ok = (i >= 0) & (starts[j] >= c_start - BEFORE_NS) & (ends[j] <= c_end)
        kinds[ok] = copies["copy_kind"].to_numpy(object)[j[ok]]
        sizes[ok] = copies["bytes"].to_numpy(float)[j[ok]]
    return pd.DataFrame({"copy_kind": kinds, "bytes": sizes})


def mid_step_waits(ctx: Context, p: Process) -> tuple[float, str]:
    """The host's waits for the GPU in the middle of the steady steps, with work of the same step
    launched before and after them: (calls per step, the line that made most of them, "" where not
    recorded). A CUDA graph cannot hold such a wait, nor the host's decision on the value it read;
    one at the end of the step leaves the work before it capturable whole."""
    calls = p.timeline.calls
    w = p.steady_windows
    if not len(calls) or not len(w) or not p.breakdown.has_steps:
        return 0.0, ""
    w_start, w_end = w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)
    c_start, c_end = calls["start_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64)
    step = np.searchsorted(w_start, c_start, "right") - 1
    inside = (step >= 0) & (c_start < w_end[np.maximum(step, 0)])
    if not inside.any():  # no wait in the steady steps (most runs): the launches are not sorted
        return 0.0, ""
    launch = p.timeline.ops["launch_ns"].to_numpy(np.int64)
    if not (launch[1:] >= launch[:-1]).all():  # mostly in order already: a merge of the runs, in a copy
        launch = np.sort(launch, kind="stable")
    # the step's first and last launches: the wait has one of the step's launches before it and one
    # after it (a wait before the first belongs with the step before: the step's marks fell between)
    last = np.searchsorted(launch, w_end, "left") - 1
    last_launch = np.where(last >= 0, launch[np.maximum(last, 0)], np.iinfo(np.int64).min)
    first = np.searchsorted(launch, w_start, "left")
    first_launch = np.where(first < len(launch), launch[np.minimum(first, len(launch) - 1)], np.iinfo(np.int64).max)
    at = np.maximum(step, 0)
    mid = inside & (c_end < last_launch[at]) & (c_start > first_launch[at])
    if not mid.any():
        return 0.0, ""
    where = ""
    sites = ctx.timelines.sites
    if len(sites):
        refs = calls["ref"].to_numpy()[mid & (calls["source"] == "site").to_numpy(bool)].astype(int)
        if len(refs):
            where = str(pd.Series(sites["location"].to_numpy(object)[refs]).mode().iloc[0])
    return float(mid.sum()) / p.n_steps, where


class HostSync(Rule):
    name = "host_sync"
    description = ("Host synchronizations in the step (.item(), .cpu(), nonzero, torch.cuda.synchronize()) "
                   "that drain the GPU's queue, by the Python line that made them.")

    def evaluate(self, ctx: Context) -> list[Finding]:
        sites = ctx.timelines.sites
        out = []
        for p in ctx.processes:
            calls = p.timeline.calls
            if not len(calls):
                continue
            calls = calls.assign(**_waited_copies(p, calls))
            if len(sites):
                is_site = calls["source"] == "site"
                refs = calls["ref"].where(is_site, 0).astype(int)
                calls["location"] = np.where(is_site, sites["location"].to_numpy(object)[refs], None)
                calls["function"] = np.where(is_site, sites["function"].to_numpy(object)[refs], "")
            else:
                calls["location"], calls["function"] = None, ""
            calls["location"] = calls["location"].fillna("(line not recorded)")
            calls["kind"] = [_kind(a, c, b) for a, c, b in zip(calls["api"], calls["copy_kind"], calls["bytes"])]
            idle = p.steady_idle
            charged = idle[(idle["culprit"] == "call") & (idle["cause"] == "idle_sync")]
            charged = charged.join(calls[["source", "location", "function"]], on="ref")
            charged = charged[charged["source"].isin(["site", "sync"])]
            w = p.steady_windows
            in_steps = calls[(calls["start_ns"] >= w["start_ns"].min()) & (calls["start_ns"] < w["end_ns"].max())]
            for (location, function), mine in charged.groupby(["location", "function"], sort=False):
                idle_ns = p.per_step(float(mine["ns"].sum()))
                waited = min(p.own(idle_ns), p.wait_ns(mine))
                ns = p.gpu_gain(waited)
                if p.share(ns) < ctx.min_share:
                    continue
                at = in_steps[(in_steps["location"] == location) & (in_steps["function"] == function)]
                kind = at["kind"].mode().iloc[0] if len(at) else "other"
                what, fix = _WHAT[kind]
                apis = ", ".join(at["api"].value_counts().index[:2]) if len(at) else ""
                wait = float((at["end_ns"] - at["start_ns"]).mean()) if len(at) else 0.0
                evidence = [f"{len(at) / p.n_steps:.1f} calls per step ({apis}), the host waiting {fmt_ns(wait)} each",
                            f"after them the GPU sat idle {per_step_text(p, idle_ns)} until new work was launched"]
                if p.own_text(idle_ns):
                    evidence.append(p.own_text(idle_ns))
                if waited < p.own(idle_ns):
                    evidence.append(f"estimate: the {fmt_ns(waited)} per step the host spent waiting; the rest of the idle "
                                    "time is host work the GPU would still wait for")
                if p.power_text(waited):
                    evidence.append(p.power_text(waited))
                if kind in ("read", "copy") and len(at):
                    evidence.append(f"each waited for a {at['copy_kind'].mode().iloc[0]} copy of "
                                    f"{fmt_bytes(float(at['bytes'].median()))}")
                if location == "(line not recorded)":
                    evidence.append("this report has no sync_site rows, so the line is unknown "
                                    "(gpuscope records it with --trace cuda)")
                where = f"{location} {function}".strip()
                out.append(Finding(
                    rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
                    title=f"Host sync at {where}: {what}", evidence=evidence,
                    location=where, fix=fix,
                    data=data_dict(idle_ns=idle_ns, saving_ns=ns, calls_per_step=len(at) / p.n_steps, wait_ns=wait, kind=kind),
                ))
        return out

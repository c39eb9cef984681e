"""What torch.profiler says each module launched: kernel counts per module, forward and backward.

Independent of gpuscope: read from a torch.profiler Chrome trace recorded with Python stacks.
A forward kernel belongs to the innermost ``nn.Module: X_k`` event around the runtime call that
launched it. A backward kernel belongs to the module of the forward op that created its autograd
node: the launching call sits in a backward op with a sequence number, and the forward op with
that sequence number sits in a module event. Module instances are named as torch.profiler names
them (class and index in order of first call).
"""

from __future__ import annotations

import bisect
import gzip
import json
from collections import Counter, defaultdict
from typing import Any


def _load(path: str) -> list[dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:  # type: ignore[operator]
        return json.load(fh)["traceEvents"]


class _Intervals:
    """Events of one thread, to find the innermost one containing a time."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = sorted(events, key=lambda e: e["ts"])
        self.starts = [e["ts"] for e in self.events]

    def innermost(self, t: float) -> dict[str, Any] | None:
        i = bisect.bisect_right(self.starts, t) - 1
        best = None
        while i >= 0:  # events nest, so walk back to the first one that still contains t
            e = self.events[i]
            if e["ts"] + e["dur"] >= t and (best is None or e["ts"] > best["ts"]):
                return e
            i -= 1
        return best

    def containing(self, t: float) -> list[dict[str, Any]]:
        i = bisect.bisect_right(self.starts, t)
        return [e for e in self.events[:i] if e["ts"] + e["dur"] >= t]


def module_calls(path: str) -> list[str]:
    """Return the module events ("Linear_3") of the trace in the order they started."""
    events = _load(path)
    mods = [e for e in events if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ")]
    return [e["name"][len("nn.Module: "):] for e in sorted(mods, key=lambda e: e["ts"])]


def kernel_counts(path: str) -> dict[str, Counter[str]]:
    """Return {"forward": Counter(module -> kernels), "backward": ...} from a torch.profiler trace."""
    events = _load(path)
    by_tid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    ops_by_tid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    launches: dict[int, dict[str, Any]] = {}
    kernels = []
    for e in events:
        cat = e.get("cat")
        if cat == "python_function" and e["name"].startswith("nn.Module: "):
            by_tid[e["tid"]].append(e)
        elif cat == "cpu_op":
            ops_by_tid[e["tid"]].append(e)
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = e
        elif cat == "kernel":
            kernels.append(e)
    modules = {tid: _Intervals(evs) for tid, evs in by_tid.items()}
    ops = {tid: _Intervals(evs) for tid, evs in ops_by_tid.items()}
    forward_op_by_seq: dict[int, dict[str, Any]] = {}
    for tid, evs in ops_by_tid.items():
        if tid not in modules:
            continue
        for op in sorted(evs, key=lambda e: -e["dur"]):  # outermost op of a sequence number first
            seq = op.get("args", {}).get("Sequence number")
            if seq is not None and seq not in forward_op_by_seq and "Backward" not in op["name"]:
                forward_op_by_seq[seq] = op
    out: dict[str, Counter[str]] = {"forward": Counter(), "backward": Counter(), "unattributed": Counter()}
    for k in kernels:
        launch = launches.get(k["args"].get("correlation"))
        if launch is None:
            out["unattributed"]["(no launch)"] += 1
            continue
        tid, t = launch["tid"], launch["ts"]
        if tid in modules:
            m = modules[tid].innermost(t)
            out["forward" if m else "unattributed"][_label(m) if m else "(main thread)"] += 1
            continue
        seqs = [op["args"].get("Sequence number") for op in ops[tid].containing(t)] if tid in ops else []
        fwd = next((forward_op_by_seq[s] for s in seqs if s in forward_op_by_seq), None)
        m = modules[fwd["tid"]].innermost(fwd["ts"]) if fwd is not None else None
        out["backward" if m else "unattributed"][_label(m) if m else "(backward, no module)"] += 1
    return out


def _label(event: dict[str, Any]) -> str:
    return event["name"][len("nn.Module: "):]

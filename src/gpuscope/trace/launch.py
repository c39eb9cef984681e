"""Where a GPU operation was launched, in SQL: shared by the analyses and by trimming to capture windows.

An operation's launch point is, in order of preference: the API call that launched it (same
correlation id, ``--trace cuda-api``), CUPTI's queued time of a kernel (where latency timestamps
were on), or its GPU start pulled back between its *anchors*: the last host call with a smaller
correlation id and the first with a larger one whose times are known (launch anchors and graph
launches in ``launch_call``, synchronization sites in ``sync_site``). Correlation ids come from one
counter, so the operation was launched between those two calls; when it started at once its GPU
start is its launch (give or take the launch latency), and when it waited in a queue its launch
is at most the later anchor. gpuscope makes an anchor right before each range boundary it takes a
time for (capture/cupti/launch_anchors.py), so operations fall on the right side of each boundary.
"""

from __future__ import annotations

ANCHORS = ("(SELECT pid, correlation_id, start_ns FROM launch_call "
           "UNION ALL SELECT pid, correlation_id, start_ns FROM sync_site)")


def anchor_joins(t: str) -> str:
    """The joins that give operation table alias ``t`` its anchors ``lo`` and ``hi``."""
    return (f" ASOF LEFT JOIN {ANCHORS} lo ON lo.pid = {t}.pid AND {t}.correlation_id > lo.correlation_id"
            f" ASOF LEFT JOIN {ANCHORS} hi ON hi.pid = {t}.pid AND {t}.correlation_id < hi.correlation_id")


def anchored_start(t: str) -> str:
    """``t.start_ns`` pulled back before the later anchor and kept after the earlier one (1 ns
    inside each: an anchor's time is the boundary it marks, and the operation is on one side)."""
    return f"greatest(lo.start_ns + 1, least({t}.start_ns, hi.start_ns - 1))"

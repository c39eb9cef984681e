"""Launch anchors as the program hands them over: int64 triples (time, thread, correlation id) on
CLOCK_MONOTONIC, one ``anchor_log`` row per flush (capture/cupti/launch_anchors.py), made into
``launch_call`` rows here, in the launcher, with numpy: a flush of thousands of anchors costs the
program one copy of their bytes, not a Python object each."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..capture.cupti.launch_anchors import ANCHOR_API  # the call each anchor makes


def frame(pid: int, rows: list[tuple[Any, ...]], api_name_id: int) -> pd.DataFrame:
    """``launch_call`` rows of the ``anchor_log`` rows ``(clock offset, bytes)`` of process ``pid``."""
    parts = []
    for offset_ns, blob in rows:
        triples = np.frombuffer(bytes(blob), dtype=np.int64)
        triples = triples[: len(triples) // 3 * 3].reshape(-1, 3)
        if len(triples):
            t = triples[:, 0] + int(offset_ns)
            parts.append(pd.DataFrame({"start_ns": t, "end_ns": t, "tid": triples[:, 1],
                                       "correlation_id": triples[:, 2]}))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        {"start_ns": [], "end_ns": [], "tid": [], "correlation_id": []}, dtype=np.int64)
    out["api_name_id"] = np.int32(api_name_id)
    out["pid"] = np.int64(pid)
    return out

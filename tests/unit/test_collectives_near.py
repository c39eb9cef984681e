"""The collectives' overlap with compute and their hidden wait, from the compute kernels near them
only (rank_summaries._compute_near): the same as from the union of every compute kernel."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from gpuscope.analysis.distributed.collectives import arrivals, busy_union, collectives, overlap_ns
from gpuscope.analysis.distributed.summaries import _compute_near, _timed_collectives
from gpuscope.trace.report import Report


@pytest.mark.parametrize("name", ["nccl_ddp_slow_rank", "nccl_ddp_big_batch", "dist4_fsdp"])
def test_overlaps_from_the_kernels_near_the_collectives(recorded: Callable[[str], Path], name: str) -> None:
    with Report.open(recorded(name)) as report:
        coll = arrivals(collectives(report))
        gpu = (coll["source"] == "kernel").to_numpy(bool)
        every = report.df("""SELECT k.pid, k.start_ns, k.end_ns FROM kernel k JOIN kernel_config c ON c.id = k.config_id
                             JOIN string n ON n.id = c.name_id WHERE n.value NOT LIKE 'nccl%Kernel%'""")
        near = _compute_near(report, coll[gpu])
        got = _timed_collectives(report)
    assert gpu.any() and 0 < len(near) < len(every)  # some compute kernels left out, and some kept
    g = coll[gpu].reset_index(drop=True)
    union = busy_union(every)
    want_overlap = overlap_ns(g, union)
    want_hidden = overlap_ns(g.assign(end_ns=g["start_ns"] + g["wait_ns"]), union)
    assert want_overlap.sum() > 0
    assert np.array_equal(got.loc[gpu, "overlap_ns"].to_numpy(np.int64), want_overlap)
    assert np.array_equal(got.loc[gpu, "wait_ns"].to_numpy(np.int64), g["wait_ns"].to_numpy(np.int64) - want_hidden)
    pd.testing.assert_frame_equal(got.drop(columns=["overlap_ns", "wait_ns"]), coll.drop(columns=["wait_ns"]))

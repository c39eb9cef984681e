"""Jobs recorded on four GPUs of one host (H200, NCCL 2.28, ``tests/device/four_gpus.sh``): a small
transformer trained with FSDP2 and with a 2 x 2 mix of tensor parallelism (pairs 0-1 and 2-3) and
data parallelism (0-2 and 1-3), 12 steps each under gpuscope's default collectors (the overhead
probe switched each rank's collection off for three steps, each rank at its own moment); with a
rank whose data loading sleeps 5 ms per batch, and with an uneven split of the MLP between the two
ranks of each tensor-parallel pair.

What the same jobs measured untraced (two rounds each, H100 x4): the sleep costs the tensor-parallel
job 4.6-5.1 ms per step (15.6-16.3 ms without it, 20.3-21.4 ms with it), the FSDP job 0.2-3.9 ms
(the GPU is the bottleneck there); the uneven split costs nothing measurable. Profiled, the steps
are launch-bound and the ranks wait for each other's launch lag too (8.8 ms per step on the
balanced tensor-parallel job, 19 ms on the balanced FSDP job): a rank finding needs work of the
rank's own beyond the others' (:mod:`gpuscope.analysis.diagnosis.rank_work`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from gpuscope.analysis.distributed.collectives import collectives
from gpuscope.analysis.diagnosis import diagnose
from gpuscope.trace.report import Report

JOBS = ["dist4_fsdp", "dist4_tp", "dist4_tp_slow_rank", "dist4_tp_big_rank", "dist4_fsdp_slow_rank"]
MS = 1_000_000


def _ranks(report: Report) -> dict[int, int]:
    return {int(pid): int(rank) for pid, rank in report.sql("SELECT pid, rank FROM rank")}


@pytest.mark.parametrize("job", JOBS)
def test_every_rank_is_in_one_report_and_no_rank_is_called_hung(recorded: Callable[[str], Path], job: str) -> None:
    """Every job finished: no rank may be said to have missed a collective. Before calls were
    matched step by step, the three steps each rank recorded nothing (at its own moment) shifted
    the numbering, and ``hung_rank`` findings said a rank 'never reached' a call."""
    with Report.open(recorded(job)) as report:
        assert sorted(_ranks(report).values()) == [0, 1, 2, 3]
        assert report.sql("SELECT DISTINCT world_size, backend FROM rank") == [(4, "nccl")]
        diag = diagnose(report)
    assert not [f for f in diag.findings if f.rule == "hung_rank"]


@pytest.mark.parametrize("job", ["dist4_tp", "dist4_tp_slow_rank", "dist4_tp_big_rank"])
def test_tensor_and_data_parallel_groups_are_told_apart(recorded: Callable[[str], Path], job: str) -> None:
    """The all-reduces of a step go to two groups of two: the tensor-parallel pair and the
    data-parallel pair. Operators (and so groups) were recorded only in sample windows; the other
    steps' kernels take the group of their place in the step."""
    with Report.open(recorded(job)) as report:
        ranks = _ranks(report)
        coll = collectives(report)
    kernels = coll[coll["source"] == "kernel"]
    assert set(kernels["kind"]) == {"all_reduce"}
    assert (kernels["group_size"] == 2).mean() > 0.9
    groups = {ranks[int(pid)]: set(f["group"].dropna()) for pid, f in kernels.groupby("pid")}
    assert all(len(g) == 2 for g in groups.values())
    tp = groups[0] & groups[1]
    dp = groups[0] & groups[2]
    assert len(tp) == 1 and len(dp) == 1 and tp != dp
    assert groups[2] & groups[3] and not (groups[2] & groups[3]) & tp  # the other pair has its own group
    assert groups[1] & groups[3] and not (groups[1] & groups[3]) & dp


@pytest.mark.parametrize("job", ["dist4_fsdp", "dist4_fsdp_slow_rank"])
def test_fsdp_gathers_and_scatters_over_all_four_ranks(recorded: Callable[[str], Path], job: str) -> None:
    with Report.open(recorded(job)) as report:
        coll = collectives(report)
    kernels = coll[(coll["source"] == "kernel") & coll["kind"].isin(["all_gather", "reduce_scatter"])]
    assert len(kernels) > 400
    assert set(kernels["group_size"].dropna()) == {4}
    assert set(kernels["algorithm"]) == {"RING"}
    # every rank gathers and scatters about as often (each recorded 9 or 10 of its 12 steps)
    per_rank = kernels.groupby(["pid", "kind"]).size().unstack()
    assert len(per_rank) == 4 and (per_rank["all_gather"] >= 80).all() and (per_rank["reduce_scatter"] >= 45).all()


def test_the_fsdp_straggler_is_named_first(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("dist4_fsdp_slow_rank")) as report:
        diag = diagnose(report)
    top = diag.findings[0]
    assert top.rule == "straggler" and top.title.startswith("Rank 3 ")


def test_the_tensor_parallel_straggler_is_named_first_with_its_data_loading(recorded: Callable[[str], Path]) -> None:
    """Under the profiler the job is launch-bound: in each pair one rank arrives last at every
    collective by a fraction of a millisecond (its launches lag), on the balanced job too, and those
    waits add up to more than the planted sleep. The straggler is the rank with work of its own
    beyond the others' (its DataLoader's 5 ms before its first launch), and it saves what it makes
    the others wait beyond the waits every rank causes, at most that extra work."""
    with Report.open(recorded("dist4_tp_slow_rank")) as report:
        diag = diagnose(report)
    top = diag.findings[0]
    assert top.rule == "straggler" and top.title.startswith("Rank 2 ")
    assert "data loading" in top.location and top.data["cause_part"] == "idle_data"
    assert 0.7 * 4.6 * MS < top.saving_ns < 1.3 * 5.1 * MS  # measured untraced: 4.6-5.1 ms per step
    assert [f.rule for f in diag.findings].count("straggler") == 1
    assert not [f for f in diag.findings if f.rule == "load_imbalance"]


def test_the_fsdp_straggler_estimate_is_what_removing_the_sleep_saves(recorded: Callable[[str], Path]) -> None:
    """The others wait 22 ms per step for the sleeping rank under the profiler (it also launches
    slower); the saving is bounded by its extra host time per step, the 5 ms sleep (measured
    untraced: 0.2-3.9 ms, the GPU being the bottleneck there)."""
    with Report.open(recorded("dist4_fsdp_slow_rank")) as report:
        diag = diagnose(report)
    top = diag.findings[0]
    assert top.rule == "straggler" and "data loading" in top.location
    assert 3 * MS < top.saving_ns < 6 * MS


@pytest.mark.parametrize("job", ["dist4_fsdp", "dist4_tp"])
def test_nothing_planted_gives_no_rank_finding(recorded: Callable[[str], Path], job: str) -> None:
    """Profiled, the balanced jobs wait 19 ms (FSDP: rank 0 launches slower) and 8.8 ms (tensor
    parallel: launch lag inside each pair) per step; untraced every rank steps alike. No rank does
    work of its own beyond the noise among the ranks, so no rank finding."""
    with Report.open(recorded(job)) as report:
        diag = diagnose(report)
    assert not [f for f in diag.findings if f.rule in ("straggler", "load_imbalance")]


def test_an_uneven_split_in_a_launch_bound_job_is_no_rank_finding(recorded: Callable[[str], Path]) -> None:
    """The 3:1 MLP split runs 0.9 ms more compute per step on ranks 1 and 3, but the step is launch-bound
    (measured untraced: no cost): their collectives seldom sat queued behind that compute, so what it
    held up stays under the rank findings' threshold."""
    with Report.open(recorded("dist4_tp_big_rank")) as report:
        diag = diagnose(report)
    assert not [f for f in diag.findings if f.rule in ("straggler", "load_imbalance")]


def test_a_costly_uneven_split_is_the_top_finding_with_what_evening_it_saves(recorded: Callable[[str], Path]) -> None:
    """The MLP split 15:1 in each tensor-parallel pair with 32 x 1024 tokens per rank, where the
    matmuls are most of the step (H100 x4, 2026-11-27): untraced, evening the split to 8:8 took the
    step from 76.1-76.4 ms to 53.4-53.5 ms (22.6-23.0 ms saved, two rounds each). Ranks 0 and 2 hold
    the large halves; the saving is their compute beyond the mean of all ranks."""
    with Report.open(recorded("dist4_tp_heavy_split_15_1")) as report:
        diag = diagnose(report)
    top = diag.findings[0]
    assert top.rule == "load_imbalance" and top.data["heavy_ranks"] == [0, 2]
    assert 0.7 * 22.6 * MS <= top.saving_ns <= 1.3 * 23.0 * MS
    assert not [f for f in diag.findings if f.rule == "straggler"]


def test_the_even_split_of_the_same_job_has_no_rank_finding(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("dist4_tp_heavy_split_8_8")) as report:
        diag = diagnose(report)
    assert not [f for f in diag.findings if f.rule in ("straggler", "load_imbalance")]


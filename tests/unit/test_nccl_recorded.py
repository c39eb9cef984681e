"""Data-parallel jobs recorded on two H100s with NCCL (tests/device/workloads/ddp_nccl.py under
``torchrun --nproc_per_node=2``, each rank on its own GPU): a rank that sleeps 5 ms per step, a rank
with a 4x batch, and an FSDP job with nothing planted."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.distributed.summaries import collective_sum, rank_sum
from gpuscope.trace.report import Report


def _ranks(report: Report) -> dict[int, int]:
    return {int(pid): int(rank) for pid, rank in report.sql("SELECT pid, rank FROM rank")}


def test_the_sleeping_rank_is_the_top_finding_with_its_cause(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("nccl_ddp_slow_rank")) as report:
        ranks = _ranks(report)
        assert sorted(ranks.values()) == [0, 1]
        assert set(report.sql("SELECT DISTINCT backend FROM rank")) == {("nccl",)}
        diag = diagnose(report)
    top = diag.findings[0]
    assert top.rule == "straggler" and top.title.startswith("Rank 1 ")
    assert any("CPU work" in e for e in top.evidence)  # the sleep launches nothing
    # the other rank waits about the 5 ms the straggler sleeps (plus its slower relaunch)
    assert 4e6 < top.saving_ns < 8e6


def test_the_bigger_batch_is_found_as_slower_kernels_on_its_rank(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("nccl_ddp_big_batch")) as report:
        diag = diagnose(report)
    straggler = next(f for f in diag.findings if f.rule == "straggler")
    assert straggler.title.startswith("Rank 0 ")
    assert any("slower kernels" in e and "bigger batch" in e for e in straggler.evidence)


def test_fsdp_collectives_are_recognized_and_it_analyzes(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("nccl_fsdp")) as report:
        kinds = {k for (k,) in report.sql(
            """SELECT DISTINCT s.value FROM kernel k JOIN kernel_config c ON c.id = k.config_id
               JOIN string s ON s.id = c.name_id WHERE s.value LIKE 'ncclDevKernel%'""")}
        assert any("AllGather" in k for k in kinds) and any("ReduceScatter" in k for k in kinds)
        ranks = rank_sum(report).column("Rank")
        collectives = collective_sum(report).column("Kind")
        diag = diagnose(report)  # a sync whose line also waited for no copy once made this fail
    assert sorted(ranks) == [0, 1]
    assert {"all_gather", "reduce_scatter"} <= set(collectives)
    assert diag.findings


def test_a_long_ddp_job_has_no_false_hang_and_one_finding_per_fix(recorded: Callable[[str], Path]) -> None:
    # 300 steps: rank 1 recorded the c10d operators of its start-up collectives, rank 0 did not (they
    # fell outside its operator sample windows); matched by group on one side only, rank 1 seemed to wait
    # seconds for a rank 0 that "never entered" an all-gather, and each rank's findings came twice
    from gpuscope.analysis.distributed.collectives import arrivals, collectives

    with Report.open(recorded("nccl_ddp_300_steps")) as report:
        coll = collectives(report)
        diag = diagnose(report)
    assert (arrivals(coll)["ranks"] == 2).all()
    rules = [f.rule for f in diag.findings]
    assert "hung_rank" not in rules
    assert len(rules) == len(set(rules))  # one finding per fix, not one per rank
    launch = next(f for f in diag.findings if f.rule == "launch_bound")
    assert len(launch.data["ranks"]) == 2 and launch.saving_ns == min(launch.data["ranks"].values())
    assert diag.findings[0].share < 1.0


def test_an_fsdp_straggler_is_the_top_finding_with_its_rank(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("nccl_fsdp_slow_rank")) as report:
        diag = diagnose(report)
    # the sleep shows twice: as the straggler the other rank waits for, and as the GPU idle on its own
    # rank while the host sleeps; both come first, and the straggler's saving is the 5 ms sleep
    # (its own extra host time), not the 8.4 ms the other rank waits under the profiler
    straggler = next(f for f in diag.findings if f.rule == "straggler")
    assert straggler in diag.findings[:2] and straggler.title.startswith("Rank 1 ")
    assert any("CPU work" in e for e in straggler.evidence)
    assert 4e6 < straggler.saving_ns < 6.5e6


def test_sampled_c10d_operators_give_their_kernels_bytes_by_launch(recorded: Callable[[str], Path]) -> None:
    # operators are recorded in sample windows, so only a few of the 908 all-reduces per rank have one;
    # those few get their bytes from the operator running when the kernel was launched
    with Report.open(recorded("nccl_ddp_300_steps")) as report:
        table = collective_sum(report)
    rows = [r for r in table.records() if r["Kind"] == "all_reduce"]
    assert len(rows) == 2 and all(r["Calls"] == 908 for r in rows)
    assert all(r["Bytes"] and 50e9 < r["Algorithm BW"] < 900e9 for r in rows)  # two H100s over NVLink
    assert any("of 908 calls" in n for n in table.notes)

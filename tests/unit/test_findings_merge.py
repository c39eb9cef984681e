"""One finding per fix across the ranks of a job."""

from __future__ import annotations

from gpuscope.analysis.diagnosis.context import fmt_ns
from gpuscope.analysis.diagnosis.finding import Finding, merge_ranks


def _f(rule: str, pid: int, saving: float, fix: str = "graph it", one_time: bool = False) -> Finding:
    return Finding(rule, f"{rule} on {pid}", saving, saving / 10e6, [], "here", fix, pid=pid, one_time=one_time)


def test_the_same_fix_on_every_rank_is_one_finding_counted_at_the_smallest_saving() -> None:
    ranks = {10: 0, 11: 1, 12: 2}
    out = merge_ranks([_f("launch_bound", 10, 3e6), _f("launch_bound", 11, 2e6), _f("launch_bound", 12, 4e6)],
                      ranks, fmt_ns)
    assert len(out) == 1 and out[0].pid == 11 and out[0].saving_ns == 2e6
    assert out[0].data["ranks"] == {10: 3e6, 11: 2e6, 12: 4e6}
    assert "found on 3 ranks" in out[0].evidence[-1] and "per step" in out[0].evidence[-1]
    warm = merge_ranks([_f("warmup", 10, 5e9, one_time=True), _f("warmup", 11, 6e9, one_time=True)], ranks, fmt_ns)
    assert len(warm) == 1 and "once" in warm[0].evidence[-1]


def test_stragglers_other_fixes_and_processes_without_a_rank_stay_apart() -> None:
    ranks = {10: 0, 11: 1}
    findings = [_f("straggler", 10, 1e6), _f("straggler", 11, 2e6),  # about one rank against the others
                _f("launch_bound", 10, 1e6, fix="graph it"), _f("launch_bound", 11, 1e6, fix="fuse it"),
                _f("host_sync", 10, 1e6), _f("host_sync", 99, 1e6)]  # pid 99: no rank
    out = merge_ranks(findings, ranks, fmt_ns)
    assert sorted((f.rule, f.pid) for f in out) == sorted((f.rule, f.pid) for f in findings)
    assert all("ranks" not in f.data for f in out)

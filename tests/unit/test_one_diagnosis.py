"""One diagnosis for both sides of a report: one rule list, one pass (analysis/diagnosis/engine.py),
each rule reading the sides it names, and a fix that exists on both sides found by one rule under
one name, on recorded reports with GPU work and without."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.diagnosis.engine import GPU_REASON
from gpuscope.analysis.diagnosis.finding import Finding
from gpuscope.analysis.diagnosis.rule import CPU, GPU, Rule
from gpuscope.analysis.diagnosis.rules import RULES, rule_names
from gpuscope.experiment.fixes import fixes_for
from gpuscope.trace.report import Report

GPU_REPORT = "client_dataloader_cnn"  # a GPU training fed by a DataLoader with too few workers
CPU_REPORT = "cpu_dataloader_starved"  # the same fault without a GPU: num_workers=0, Python in the Dataset


class _Seen(Rule):
    """A rule that records the side of each context it was evaluated on, and finds nothing."""

    name = "seen"
    description = "records the sides it ran on"
    needs = ()
    sides: ClassVar[tuple[str, ...]] = (GPU, CPU)

    def __init__(self, sides: tuple[str, ...]) -> None:
        self.sides = sides  # type: ignore[misc]
        self.ran: list[str] = []

    def evaluate(self, ctx: Any) -> list[Finding]:
        self.ran.append(ctx.side)
        return []


def test_one_rule_list_one_name_per_fix() -> None:
    names = rule_names()
    assert len(names) == len(set(names))
    assert all(set(r.sides) <= {GPU, CPU} and r.sides for r in RULES)
    both = {r.name for r in RULES if set(r.sides) == {GPU, CPU}}
    assert {"data_loader", "straggler"} <= both
    # no rule is written twice under a side's prefix: a CPU-side rule has no GPU twin of the same fix
    assert not any(n.startswith("cpu_") and n[4:] in names for n in names)


def test_each_rule_runs_on_the_sides_it_names(recorded: Callable[[str], Path]) -> None:
    gpu_only, cpu_only, either = _Seen((GPU,)), _Seen((CPU,)), _Seen((GPU, CPU))
    for name in (GPU_REPORT, CPU_REPORT):
        with Report.open(recorded(name)) as report:
            diag = diagnose(report, rules=[gpu_only, cpu_only, either])
        skipped = {s.rule: s.reason for s in diag.skipped}
        if name == CPU_REPORT:  # a rule of the GPU side only is named as not checked, with why
            assert skipped == {"seen": GPU_REASON}
        else:  # a rule of the CPU side only is left out where the GPU side's rules judge its fix
            assert skipped == {}
    assert (gpu_only.ran, cpu_only.ran, either.ran) == ([GPU], [CPU], [GPU, CPU])


def test_the_data_loader_fix_is_one_rule_on_either_side(recorded: Callable[[str], Path]) -> None:
    found = {}
    for name in (GPU_REPORT, CPU_REPORT):
        with Report.open(recorded(name)) as report:
            diag = diagnose(report)
        top = diag.findings[0]
        assert top.rule == "data_loader", (name, [f.rule for f in diag.findings])
        assert "num_workers=" in top.fix and top.data["workers"] >= 1
        assert [f.name for f in fixes_for(top)] == ["dataloader_workers"]
        found[name] = top
    # each side measures its own part: GPU idle behind the waits, or the waits in the loop's wall time
    assert "data_idle_ns" in found[GPU_REPORT].data and "rest_ns" in found[CPU_REPORT].data


def test_on_the_gpu_side_the_loops_wait_is_modelled_as_on_the_cpu_side(recorded: Callable[[str], Path]) -> None:
    from gpuscope.analysis.diagnosis.cpu_context import CpuContext
    from gpuscope.analysis.diagnosis.rules.data_loader import loop_model

    with Report.open(recorded(GPU_REPORT)) as report:
        top = diagnose(report).findings[0]
        cpu = CpuContext(report)
        loop = loop_model(cpu, cpu.processes[0])
    assert loop is not None and loop.data["in_process"]
    # the workers and the Dataset's line come from the loop's side; the saving is GPU idle time they remove
    assert top.data["workers"] == loop.workers and top.data["in_process"] is True
    assert f"num_workers={loop.workers}," in top.fix and "pin_memory=True" in top.fix and "__getitem__" in top.location
    assert any("loaded in the loop's own process" in e for e in top.evidence)
    assert top.saving_ns <= min(loop.saving, top.data["data_idle_ns"]) + 1


def test_a_loop_in_another_thread_keeps_the_gpu_sides_estimate(recorded: Callable[[str], Path]) -> None:
    # Lightning's fit runs in a thread of its own here: the main thread's samples show no Dataset, so the
    # loop's side cannot tell where batches load, and the GPU side's estimate stands (measured: workers 39%)
    with Report.open(recorded("client_lightning_mlp")) as report:
        f = next(f for f in diagnose(report).findings if f.rule == "data_loader")
    assert "in_process" not in f.data and "prefetch_factor=4" in f.fix
    assert 0.30 <= f.share <= 0.40


def test_a_report_with_both_sides_breaks_its_steps_down_on_both(recorded: Callable[[str], Path]) -> None:
    """Where PyTorch's ranges were recorded beside GPU work, the diagnosis gives the host's parts of
    the steps (the CPU side's breakdown, computed by the CPU side's own code) beside the GPU's; a
    report without those ranges gets none, and every output carries it."""
    import json

    from gpuscope.analysis.diagnosis.cpu_breakdown import CPU_PARTS
    from gpuscope.analysis.diagnosis.cpu_context import CpuContext
    from gpuscope.reporters import diagnosis_formats

    formats = diagnosis_formats()
    with Report.open(recorded("client_tv_resnet50_amp")) as r:
        d = diagnose(r)
        assert d.processes and len(d.host) == 1
        host = d.host[0]
        mean = host.mean_parts()
        assert abs(sum(mean[k] for k in CPU_PARTS) - mean["duration_ns"]) < 1e-6 * mean["duration_ns"]
        assert mean["cpu_forward"] > 0 and mean["cpu_backward"] > 0 and mean["cpu_optimizer"] > 0
        (alone,) = CpuContext(r).processes  # the CPU side's context on its own gives the same parts
        assert alone.breakdown.mean_parts() == mean
        table = d.host_table()
        assert table is not None and table.name == "host_step_breakdown"
        assert table.column("Per Step")[-1] == mean["duration_ns"]
        doc = json.loads(formats["json"](d))
        assert doc["host"]["processes"][0]["mean_ns"]["cpu_forward"] == round(mean["cpu_forward"])
        assert "Host Step-Time Breakdown" in formats["table"](d)
        assert "## Host side of the steps" in formats["markdown"](d)
    with Report.open(recorded("mlp_default")) as r:  # kernels and steps, no PyTorch ranges: all "other Python"
        d = diagnose(r)
        assert d.processes and d.host == [] and d.host_table() is None
        assert "host" not in json.loads(formats["json"](d))


def test_a_host_side_that_fails_is_said_in_a_note() -> None:
    """The host's breakdown is an addition: where it fails, the diagnosis says so in a note, and the
    GPU side's breakdown and findings stand without it."""
    from gpuscope.analysis.diagnosis.cpu_diagnosis import host_side

    class Broken:
        notes: ClassVar[list[str]] = []

        @property
        def cpu_side(self) -> Any:
            return 1 / 0

    ctx = Broken()
    assert host_side(ctx) == ([], "")
    assert ctx.notes and ctx.notes[0].startswith("The host side's breakdown failed (ZeroDivisionError")

"""The diagnosis of a run whose module ranges were recorded in some steps only (the default where
CUPTI records the GPU's work: capture/python/module_steps.py) against the same run with them in every
step: recorded fixtures rewritten as the sampled capture writes them (tests/sampled_modules.py:
the nested module ranges of the other steps dropped, their outermost call kept as a ``model``
range) give the same findings, in the same order, with the same shares and locations.

One difference is known and allowed: a below-roofline finding's efficiency. The roofline carries the
work of the operators whose shapes were sampled to the kernels of other steps by their module range
(roofline/work/carried.py); a kernel of a step without layers has the model's call as its range,
so its work is carried by the kernel's work key alone (ResNet-50 AMP: one kernel at 15% of its
roofline instead of 20%, the finding's share within a point)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sampled_modules import sample_module_ranges  # noqa: E402

from gpuscope.analysis.diagnosis import diagnose  # noqa: E402
from gpuscope.analysis.diagnosis.cpu_diagnosis import diagnose_cpu  # noqa: E402
from gpuscope.analysis.ranges.layers import layer_sum  # noqa: E402
from gpuscope.capture.python.module_steps import ModuleSteps  # noqa: E402
from gpuscope.trace.report import Report  # noqa: E402

POLICY = ModuleSteps(first=2, every=3)  # a third of the steps keep their layers: the fixtures are short
GPU = ["client_hf_bert_infer", "client_tv_resnet50_amp", "client_hf_gpt2_train", "client_nanogpt_compiled",
       "program_mlp_adam", "client_lightning_mlp", "client_sdpa_explicit_mask"]
CPU = ["cpu_infer_hot_line", "cpu_balanced"]


def _findings(path: Path, cpu: bool) -> list[tuple[str, float, str]]:
    with Report.open(path) as report:
        found = (diagnose_cpu if cpu else diagnose)(report).findings
    return [(f.rule, f.share, f.title) for f in found]


def _pair(recorded: Callable[[str], Path], name: str, tmp_path: Path) -> tuple[Path, Path]:
    whole = recorded(name)
    sampled = tmp_path / f"{name}.sampled.gpuscope"
    sampled.write_bytes(whole.read_bytes())
    steps, kept = sample_module_ranges(sampled, POLICY)
    assert 0 < kept < steps
    return whole, sampled


@pytest.mark.parametrize("name", GPU + CPU)
def test_sampled_module_ranges_give_the_same_findings(name: str, recorded: Callable[[str], Path],
                                                      tmp_path: Path) -> None:
    whole, sampled = _pair(recorded, name, tmp_path)
    cpu = name.startswith("cpu_")
    before, after = _findings(whole, cpu), _findings(sampled, cpu)
    assert before, "the fixture has findings to compare"
    assert [f[0] for f in after] == [f[0] for f in before]
    for (rule, share, title), (_, share2, title2) in zip(before, after):
        assert share2 == pytest.approx(share, abs=0.01), rule
        if rule != "below_roofline":
            assert title2 == title, rule


@pytest.mark.parametrize("name", ["client_hf_bert_infer", "program_mlp_adam"])
def test_without_the_outermost_calls_the_launch_bound_share_moves(name: str, recorded: Callable[[str], Path],
                                                                  tmp_path: Path) -> None:
    """The ``model`` ranges are what keeps it: dropped too, PyTorch's own time between launches in the
    steps without layers reads as the program's, and the launch-bound share falls."""
    whole, sampled = _pair(recorded, name, tmp_path)
    con = duckdb.connect(str(sampled))
    con.execute("DELETE FROM nvtx_range WHERE category = 'model'")
    con.close()
    share = {rule: s for rule, s, _ in _findings(whole, False)}["launch_bound"]
    bare = {rule: s for rule, s, _ in _findings(sampled, False)}["launch_bound"]
    assert bare < share - 0.02


def _layers(path: Path) -> tuple[dict[str, Any], list[str]]:
    with Report.open(path) as report:
        table = layer_sum(report)
    return {r["Name"]: r for r in table.records()}, list(table.notes)


def test_the_layer_table_of_a_sampled_run_has_no_model_rows(recorded: Callable[[str], Path], tmp_path: Path) -> None:
    whole, sampled = _pair(recorded, "client_hf_bert_infer", tmp_path)
    rows, notes = _layers(sampled)
    full, _ = _layers(whole)
    assert set(rows) <= set(full)  # the outermost calls' ranges make no row of their own
    assert any("module ranges were recorded in" in n for n in notes)
    modules = [k for k in full if full[k].get("Kind") == "module"]
    top = max(modules, key=lambda k: full[k]["GPU Self"])
    assert rows[top]["Share"] == pytest.approx(full[top]["Share"], abs=0.2)  # of the steps with layers
    assert rows[top]["Calls"] < full[top]["Calls"]


def test_the_summary_says_its_layers_are_of_some_steps(recorded: Callable[[str], Path], tmp_path: Path) -> None:
    from gpuscope.analysis.overview import overview

    whole, sampled = _pair(recorded, "client_hf_bert_infer", tmp_path)
    notes = {}
    for key, path in (("whole", whole), ("sampled", sampled)):
        with Report.open(path) as report:
            layers = overview(report).top_layers
        assert layers is not None and layers.rows
        notes[key] = layers.notes
    assert notes["whole"] == []
    assert len(notes["sampled"]) == 1 and "recorded in 30 of 84 steps" in notes["sampled"][0]

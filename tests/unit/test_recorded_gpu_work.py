"""The work model and the diagnosis rules on real H100 recordings.

``gemm_conv``: tests/device/workloads/gemm_conv.py profiled with ``-t cuda,nvtx,torch,torch-ops``, every
kernel launch then measured by Nsight Compute (``gpuscope kernels --ncu``); its ncu CSV is kept
beside it. ``diagnosis_*``: the planted runs of bench/diagnosis.py (tests/workloads/).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from conftest import FIXTURES
from gpuscope.analysis.diagnosis import diagnose
from gpuscope.trace import ncu_import as ncu
from gpuscope.trace.report import Report

_spec = importlib.util.spec_from_file_location(
    "roofline_check", Path(__file__).parents[1] / "device" / "roofline_check.py")


def _compare_ops():
    pytest.importorskip("torch")  # the device script imports torch at the top
    mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.compare_ops


def test_model_flops_match_ncu_counts_within_two_percent(recorded) -> None:
    path = recorded("gemm_conv")
    with Report.open(path) as r:
        stored = r.count("kernel_metric")
    if not stored:  # import ncu's CSV as `gpuscope kernels --import` does
        with Report.open(path) as r:
            matched = ncu.match(r, ncu.parse_csv((FIXTURES / "gemm_conv.ncu.csv").read_text()))
        ncu.store(path, matched)
    rows = _compare_ops()(path)
    kinds = {r["kind"] for r in rows}
    assert {"matmul", "conv"} <= kinds
    assert {r["op"] for r in rows} >= {"aten::addmm", "aten::mm", "aten::bmm", "aten::convolution",
                                       "aten::convolution_backward"}
    for r in rows:
        assert r["all_kernels_profiled"], r
        assert abs(r["ratio"] - 1) <= 0.02, r


PLANTED = {
    "sync_item": "host_sync",
    "pageable_copy": "pageable_copies",
    "slow_dataloader": "data_loader",
    "launch_bound": "launch_bound",
    "fp32_gemm": "no_tensor_cores",
    "small_gemms": "small_gemms",
    "cpu_preprocess": "hot_line",
    "sync_d2h": "sync_copies",
    "first_compile": "startup",
}


@pytest.mark.parametrize("workload", sorted(PLANTED))
def test_the_planted_problem_is_the_top_finding(recorded, workload: str) -> None:
    with Report.open(recorded(f"diagnosis_{workload}")) as r:
        d = diagnose(r)
    assert d.findings, workload
    assert d.findings[0].rule == PLANTED[workload]
    assert d.findings[0].saving_ns > 0


def test_a_host_sync_finding_names_its_line(recorded) -> None:
    with Report.open(recorded("diagnosis_sync_item")) as r:
        top = diagnose(r).findings[0]
    assert "sync_item.py:" in str(top.location)

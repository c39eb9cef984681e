"""The nsys-style summaries on a recorded H200 report, against facts and independent arithmetic.

The fixture is tests/device/workloads/mlp.py (8 x Linear(1024)+ReLU, SGD) run for 1 warm-up and 3
timed steps with ``--trace cuda,cuda-api``, so 4 training steps in all. The counts below follow from
that model by hand; the statistics are recomputed here with pandas, independently of the SQL.
"""

from __future__ import annotations

import pandas as pd
import pytest

from gpuscope.analysis.ops.cuda_summaries import (
    REPORTS, cuda_api_sum, cuda_gpu_kern_sum, cuda_gpu_mem_size_sum, cuda_gpu_mem_time_sum, cuda_gpu_sum,
    cuda_kern_exec_sum,
)
from gpuscope.trace.report import Report

STEPS = 4
LAYERS = 8


def _stats(values: pd.Series) -> tuple[int, int, float, float, int, int, float]:
    std = values.std(ddof=1) if len(values) > 1 else 0.0
    return (int(values.sum()), len(values), values.mean(), values.median(), int(values.min()),
            int(values.max()), std)


def _check_row(row: tuple, expected: tuple) -> None:
    total, n, mean, med, lo, hi, sd = row
    e_total, e_n, e_mean, e_med, e_lo, e_hi, e_sd = expected
    assert (total, n, lo, hi) == (e_total, e_n, e_lo, e_hi)
    assert mean == pytest.approx(e_mean) and med == pytest.approx(e_med) and sd == pytest.approx(e_sd)


def _count(table, fragment: str) -> int:
    names = table.column("Name")
    rows = [r for r, n in zip(table.rows, names) if fragment in n]
    assert len(rows) == 1, f"{fragment!r} matches {len(rows)} names"
    return rows[0][2]


def test_kernel_counts_follow_from_the_model(mlp_api: Report) -> None:
    kern = cuda_gpu_kern_sum(mlp_api)
    assert sum(kern.column("Instances")) == 246
    assert len(kern.rows) == 16
    # forward GEMM per layer and step; weight-gradient GEMM per layer; input-gradient GEMM for all
    # layers but the first (its input needs no gradient)
    assert _count(kern, "gemm_f32f32_f32f32_f32_tn_n") == LAYERS * STEPS
    assert _count(kern, "gemm_f32f32_f32f32_f32_nt_n") == LAYERS * STEPS
    assert _count(kern, "nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel") == (LAYERS - 1) * STEPS
    assert _count(kern, "threshold_kernel_impl") == LAYERS * STEPS  # ReLU backward
    assert _count(kern, "launch_clamp_scalar") == LAYERS * STEPS  # ReLU forward
    assert _count(kern, "multi_tensor_apply_kernel") == STEPS  # SGD's foreach update
    assert _count(kern, "MeanOps") == STEPS  # the loss
    assert kern.column("Time") == sorted(kern.column("Time"), reverse=True)
    assert sum(kern.column("Time")) == pytest.approx(100.0)


def test_kernel_statistics_match_independent_arithmetic(mlp_api: Report) -> None:
    k = mlp_api.kernels()
    kern = cuda_gpu_kern_sum(mlp_api)
    for row in kern.rows:
        _check_row(row[1:8], _stats(k.loc[k["name"] == row[8], "duration_ns"]))
    assert kern.rows[0][0] == pytest.approx(100 * kern.rows[0][1] / k["duration_ns"].sum())


def test_api_summary(mlp_api: Report) -> None:
    a = mlp_api.api_calls()
    api = cuda_api_sum(mlp_api)
    names = api.column("Name")
    assert names[0] == "cudaDeviceGetStreamPriorityRange"  # the lazy CUDA context creation
    calls = dict(zip(names, api.column("Num Calls")))
    assert calls["cudaLaunchKernel"] + calls["cudaLaunchKernelExC"] == 246  # one per kernel
    assert calls["cudaMemcpyAsync"] == 23  # one per recorded memcpy
    assert calls["cudaMemsetAsync"] == 5
    assert sum(api.column("Num Calls")) == len(a)  # no driver call was made inside a runtime call
    for row in api.rows:
        _check_row(row[1:8], _stats(a.loc[a["name"] == row[8], "duration_ns"]))


def test_memory_operations(mlp_api: Report) -> None:
    m = mlp_api.memcpys()
    by_time = cuda_gpu_mem_time_sum(mlp_api)
    assert dict(zip(by_time.column("Operation"), by_time.column("Count"))) == {
        "[CUDA memcpy Host-to-Device]": 18,
        "[CUDA memcpy Device-to-Device]": 4,
        "[CUDA memset]": 5,
        "[CUDA memcpy Device-to-Host]": 1,
    }
    by_size = cuda_gpu_mem_size_sum(mlp_api)
    htod = m[m["copy_kind"] == "HtoD"]["bytes"]
    _check_row(by_size.rows[0][:7], _stats(htod))
    # the workload's two copies of the 256 x 1024 fp32 batch: one pageable, one pinned
    x = m[(m["copy_kind"] == "HtoD") & (m["bytes"] == 256 * 1024 * 4)]
    assert sorted(x["src_kind"]) == ["Pageable", "Pinned"]
    # .item() copies the 4-byte sum into pinned host memory
    d2h = m[m["copy_kind"] == "DtoH"]
    assert list(d2h["bytes"]) == [4] and list(d2h["dst_kind"]) == ["Pinned"]


def test_gpu_summary_is_kernels_and_memops_together(mlp_api: Report) -> None:
    gpu = cuda_gpu_sum(mlp_api)
    cats = {}
    for row in gpu.rows:
        cats[row[8]] = cats.get(row[8], 0) + row[2]
    assert cats == {"CUDA_KERNEL": 246, "MEMORY_OPER": 28}
    kernel_total = sum(cuda_gpu_kern_sum(mlp_api).column("Total Time"))
    mem_total = sum(cuda_gpu_mem_time_sum(mlp_api).column("Total Time"))
    assert sum(gpu.column("Total Time")) == kernel_total + mem_total


def test_kernel_exec_summary(mlp_api: Report) -> None:
    table = cuda_kern_exec_sum(mlp_api)
    k = mlp_api.kernels()
    a = mlp_api.api_calls()
    j = k.merge(a, on=["pid", "correlation_id"], suffixes=("_k", "_a"))
    assert sum(table.column("Count")) == len(j) == 246
    j["queue"] = j["start_ns_k"] - j["end_ns_a"]
    j["total"] = j[["end_ns_a", "end_ns_k"]].max(axis=1) - j["start_ns_a"]
    top = table.records()[0]
    sel = j[(j["name_k"] == top["Kernel Name"]) & (j["name_a"] == top["API Name"])]
    assert top["Count"] == len(sel)
    assert top["QCount"] == int((sel["queue"] >= 0).sum())
    assert top["KAvg"] == pytest.approx(sel["duration_ns_k"].mean())
    assert top["AMed"] == pytest.approx(sel["duration_ns_a"].median())
    assert top["TMax"] == sel["total"].max()
    assert table.column("TAvg") == sorted(table.column("TAvg"), reverse=True)


def test_reports_without_api_calls_say_how_to_get_them(recorded) -> None:
    with Report.open(recorded("mlp_default")) as r:
        assert cuda_api_sum(r).rows == []
        assert cuda_api_sum(r).notes == [
            "No CUDA API calls in this report: CUDA API calls (cuda_api_sum, API time in "
            "cuda_kern_exec_sum): add --trace cuda-api."
        ]
        assert cuda_kern_exec_sum(r).rows == []
        assert sum(cuda_gpu_kern_sum(r).column("Instances")) == 246  # the same program's kernels


def test_every_report_is_registered() -> None:
    from gpuscope.analysis import STATS_REPORTS, stats_reports
    from gpuscope.analysis.cpu.summaries import REPORTS as CPU_REPORTS
    from gpuscope.analysis.ranges.summaries import REPORTS as RANGE_REPORTS

    assert tuple(REPORTS) == (
        "cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
        "cuda_gpu_sum", "cuda_kern_exec_sum",
    )
    assert tuple(RANGE_REPORTS) == ("nvtx_sum", "nvtx_gpu_proj_sum", "layer_sum", "step_sum")
    assert tuple(CPU_REPORTS) == ("cpu_hotspots", "cpu_hotspots_lines", "cpu_thread_sum", "host_sum")
    assert STATS_REPORTS == tuple(stats_reports())
    assert STATS_REPORTS[:14] == tuple(REPORTS) + tuple(RANGE_REPORTS) + tuple(CPU_REPORTS)

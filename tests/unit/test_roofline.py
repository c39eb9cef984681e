"""The roofline of the hand-made report of roofline_builder, every number worked out by hand.

Ceilings: DRAM 1 TB/s, FP32 10 TFLOP/s, BF16 tensor 100 TFLOP/s, TF32 tensor 50 TFLOP/s.

| kernel | time | FLOPs | bytes | roof time | efficiency | bound |
| nvjet (bf16 mm 1000^3) | 40 µs | 2e9 | 6e6 | max(2e9/1e14 = 20 µs, 6 µs) = 20 µs | 0.5 | compute |
| sgemm ffma (fp32 mm) | 250 µs | 2e9 | 12e6 | max(200 µs, 12 µs) | 0.8 | compute |
| add (fp32 1000x1000) | 24 µs each | 1e6 | 12e6 | max(0.1 µs, 12 µs) | 0.5 | memory |
| relu (100 elements) | 5 µs | 100 | 800 | 0.8 ns | 0.00016 | latency |
| splitKreduce (beside the bf16 mm), mystery (no operator) | 10, 7 µs | - | - | - | - | unknown |
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest
from conftest import GOLDEN
from report_builder import ReportBuilder
from roofline_builder import CEILINGS, add_device, add_torch_op, install_torch_ops_contract, roofline_report

from gpuscope.analysis.roofline.ceilings import Ceilings, ceilings_table, for_device, for_report, save
from gpuscope.analysis.roofline.points import (
    POINT_COLUMNS, kernel_points, layer_points, roofline_layer_sum, roofline_sum, step_point,
)
from gpuscope.errors import GpuscopeError
from gpuscope.reporters import FORMATS
from gpuscope.trace.report import Report

NVJET = "nvjet_sm90_tst_128x256_64x4_bz_TNT"
SGEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_ffma_kernel"
ADD = "vectorized_elementwise_kernel<add>"
RELU = "vectorized_elementwise_kernel<relu>"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    install_torch_ops_contract()
    return tmp_path / "cache"


@pytest.fixture
def roof(tmp_path: Path, cache: Path) -> Iterator[Report]:
    with roofline_report(tmp_path / "roof.gpuscope") as r:
        yield r


def _row(points, name, layer="any"):  # type: ignore[no-untyped-def]
    rows = points[points["name"] == name]
    if layer != "any":
        rows = rows[rows["layer"].isna()] if layer is None else rows[rows["layer"] == layer]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_kernel_points_have_the_contract_columns(roof: Report) -> None:
    points = kernel_points(roof)
    assert list(points.columns[:12]) == ["name", "kernels", "time_ns", "flops", "bytes", "intensity",
                                         "achieved_flops_per_s", "achieved_bytes_per_s", "attainable_flops_per_s",
                                         "efficiency", "headroom_ns", "bound"]
    assert {"tensor_cores", "layer"} <= set(points.columns)
    assert set(points["bound"]) <= {"compute", "memory", "latency", "unknown"}
    assert set(points["tensor_cores"]) <= {"used", "eligible-unused", "n/a"}
    assert points["efficiency"].dropna().between(0, 1).all()


def test_compute_bound_gemms(roof: Report) -> None:
    points = kernel_points(roof)
    bf = _row(points, NVJET)
    assert (bf.kernels, bf.time_ns, bf.flops, bf.bytes) == (1, 40_000, 2e9, 6e6)
    assert bf.intensity == pytest.approx(2e9 / 6e6)
    assert bf.achieved_flops_per_s == pytest.approx(5e13)
    assert bf.attainable_flops_per_s == pytest.approx(1e14)
    assert bf.efficiency == pytest.approx(0.5)
    assert bf.headroom_ns == pytest.approx(20_000)
    assert (bf.bound, bf.tensor_cores, bf.precision, bf.layer) == ("compute", "used", "bf16", "Net.fc")
    sg = _row(points, SGEMM)
    assert sg.efficiency == pytest.approx(0.8) and sg.attainable_flops_per_s == pytest.approx(1e13)
    assert (sg.bound, sg.tensor_cores, sg.layer) == ("compute", "eligible-unused", "Net.head")


def test_memory_and_latency_bound_elementwise(roof: Report) -> None:
    points = kernel_points(roof)
    add = _row(points, ADD, "Net.fc")
    assert add.intensity == pytest.approx(1 / 12)
    assert add.attainable_flops_per_s == pytest.approx(1e12 / 12)  # intensity x bandwidth
    assert add.achieved_bytes_per_s == pytest.approx(0.5e12)
    assert (add.efficiency, add.bound, add.tensor_cores) == (pytest.approx(0.5), "memory", "n/a")
    assert _row(points, ADD, None).layer is None  # the second add ran outside every module
    relu = _row(points, RELU)
    assert relu.efficiency == pytest.approx(0.8 / 5000) and relu.bound == "latency"


def test_helper_kernels_and_kernels_without_operator_are_unknown(roof: Report) -> None:
    points = kernel_points(roof)
    for name in ("cublasLt::splitKreduce_kernel", "mystery_kernel"):
        row = _row(points, name)
        assert row.bound == "unknown" and row.flops != row.flops  # NaN: no work
    # the whole product's work went to the GEMM kernel, none to the split-K reduction beside it
    assert _row(points, NVJET).flops == 2e9


def test_rows_are_ranked_by_headroom_then_unknown_by_time(roof: Report) -> None:
    t = roofline_sum(roof)
    assert t.column("Name") == [SGEMM, ADD, NVJET, RELU, "cublasLt::splitKreduce_kernel", "mystery_kernel"]
    rec = {r["Name"]: r for r in t.records()}
    assert rec[ADD]["Instances"] == 2 and rec[ADD]["Headroom"] == pytest.approx(24_000)
    assert rec[SGEMM]["Time"] == pytest.approx(100 * 250 / 360)
    assert rec[SGEMM]["Efficiency"] == pytest.approx(80.0)
    assert any("Ceilings: Test GPU, measured" in n for n in t.notes)
    assert any(n.startswith("4.7% of the time") for n in t.notes)  # (10 + 7) / 360 µs


def test_layer_points_add_roof_times_of_different_precisions(roof: Report) -> None:
    layers = layer_points(roof).set_index("name")
    fc = layers.loc["Net.fc"]  # bf16 mm 20 µs + add 0.1 µs at the compute roofs; 18 MB at the DRAM roof
    assert fc.time_ns == 74_000 and fc.efficiency == pytest.approx(20.1 / 74)
    assert (fc.bound, fc.tensor_cores, fc.precision) == ("compute", "used", "bf16+fp32")
    head = layers.loc["Net.head"]
    assert head.efficiency == pytest.approx(200.00001 / 255)
    outside = layers.loc["(not in a module)"]
    assert outside.time_ns == 31_000 and outside.efficiency == pytest.approx(12 / 31) and outside.bound == "memory"
    assert roofline_layer_sum(roof).column("Name") == ["Net.head", "Net.fc", "(not in a module)"]


def test_step_point_covers_the_kernels_launched_in_steps(roof: Report) -> None:
    point, what = step_point(roof)
    assert what == "one step (mean of 1)" and point is not None
    assert point["time_ns"] == 353_000  # everything but the mystery kernel, launched after the step
    assert point["flops"] == pytest.approx(4.0020001e9)
    assert point["efficiency"] == pytest.approx(220.20001 / 353)


def test_golden_roofline_sum(roof: Report, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the whole table: fitting it to a terminal is tested apart
    for fmt, suffix in (("table", "txt"), ("csv", "csv"), ("json", "json")):
        text = FORMATS[fmt]([roofline_sum(roof)])
        golden = GOLDEN / f"roofline_sum.{suffix}"
        if os.environ.get("GPUSCOPE_UPDATE_GOLDEN"):
            golden.write_text(text)
        assert text == golden.read_text(), fmt


def test_tf32_kernels_use_the_tf32_roof(tmp_path: Path, cache: Path) -> None:
    save(CEILINGS)
    b = ReportBuilder(tmp_path / "tf32.gpuscope")
    add_device(b)
    add_torch_op(b, "aten::mm", 1000, 2000, [[1000, 1000], [1000, 1000]], ["float32", "float32"], [[1000, 1000]])
    b.kernel("sm80_xmma_gemm_tf32f32_tf32f32_f32_nn_n_tilesize128x128x16", 5000, 85_000, tid=1, launch=1500)
    with b.open() as r:
        row = kernel_points(r).iloc[0]
    assert (row.precision, row.tensor_cores, row.bound) == ("tf32", "used", "compute")
    assert row.efficiency == pytest.approx(40 / 80)  # 2e9 FLOP at 50 TFLOP/s = 40 µs, in 80 µs


def test_report_without_operators_has_an_empty_roofline(mlp_api: Report) -> None:
    assert kernel_points(mlp_api).empty and list(kernel_points(mlp_api).columns) == POINT_COLUMNS
    t = roofline_sum(mlp_api)
    assert t.rows == [] and "--trace torch-ops" in t.notes[0]


def test_datasheet_ceilings_without_a_calibration(cache: Path) -> None:
    c = for_device("NVIDIA H100 80GB HBM3")
    assert c.dram_bytes_per_s == 3.35e12 and c.flops["tensor_bf16"] == pytest.approx(989.4e12)
    assert set(c.sources.values()) == {"datasheet"}
    assert for_device("NVIDIA H100 PCIe").dram_bytes_per_s == 2.0e12
    assert for_device("NVIDIA A100-SXM4-80GB").flops["tensor_tf32"] == 156e12
    assert "tensor_fp8" not in for_device("NVIDIA A100-SXM4-40GB").flops


def test_calibration_is_filled_in_from_the_datasheet(cache: Path) -> None:
    save(Ceilings("NVIDIA H200", dram_bytes_per_s=4.3e12, flops={"tensor_bf16": 800e12},
                  sources={"dram": "measured", "tensor_bf16": "measured"}))
    c = for_device("NVIDIA H200")
    assert c.dram_bytes_per_s == 4.3e12 and c.flops["tensor_bf16"] == 800e12
    assert c.sources["tensor_fp8"] == "datasheet" and c.flops["tensor_fp8"] == pytest.approx(4 * 494.7e12)
    table = ceilings_table(c).records()
    bf16 = next(r for r in table if r["Ceiling"] == "BF16 tensor")
    assert bf16["Source"] == "measured" and bf16["Of Datasheet"] == pytest.approx(100 * 800 / 989.4)


def test_unknown_gpu_takes_the_device_records_bandwidth(cache: Path) -> None:
    c = for_device("NVIDIA Imaginary 9000", dram_bytes_per_s=1.5e12)
    assert c.dram_bytes_per_s == 1.5e12 and c.sources == {"dram": "device"} and c.peak("fp32", False) is None


def test_report_device_is_found(roof: Report) -> None:
    assert for_report(roof).device == "Test GPU"


def test_damaged_cache_says_how_to_fix_it(cache: Path) -> None:
    save(CEILINGS)
    (cache / "ceilings" / "Test-GPU.json").write_text("{not json")
    with pytest.raises(GpuscopeError, match="--calibrate"):
        for_device("Test GPU")


def test_a_kernel_faster_than_its_roof_is_shown_as_it_is_and_flagged(tmp_path: Path, cache: Path) -> None:
    """2e9 FLOP of bf16 in 10 µs is 200 TFLOP/s against a 100 TFLOP/s roof: 200%, not 100%, and a
    note says the roof or the work model is wrong for that row."""
    save(CEILINGS)
    b = ReportBuilder(tmp_path / "over.gpuscope")
    add_device(b)
    add_torch_op(b, "aten::mm", 1000, 2000, [[1000, 1000], [1000, 1000]], ["bfloat16", "bfloat16"], [[1000, 1000]])
    b.kernel(NVJET, 5000, 15_000, tid=1, launch=1500)
    with b.open() as r:
        row = kernel_points(r).iloc[0]
        table = roofline_sum(r)
    assert row.efficiency == pytest.approx(2.0)
    assert row.headroom_ns == 0
    assert any("ran faster than the roof" in n and "200%" in n for n in table.notes), table.notes

"""Nsight Compute results: parsing ncu's CSV, matching launches to a report's kernels, storing them,
and the metrics and FLOPs derived from them (fixture: tests/fixtures/ncu_raw_sample.csv, in the
layout of ``ncu --csv --page raw --print-units base --print-kernel-base mangled``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

import pytest
from conftest import FIXTURES
from roofline_builder import MANGLED, install_torch_ops_contract, roofline_report

from gpuscope.analysis.roofline.kernel_metrics import kernel_metrics, kernel_metrics_table, profile_selection
from gpuscope.analysis.roofline.work.measured import launch_metrics
from gpuscope.analysis.roofline.work.kernels import kernel_work
from gpuscope.capture.process import ncu_replay as runner
from gpuscope.errors import GpuscopeError
from gpuscope.trace import ncu_import as ncu
from gpuscope.trace.report import Report

SAMPLE = FIXTURES / "ncu_raw_sample.csv"
NVJET = "nvjet_sm90_tst_128x256_64x4_bz_TNT"
ADD = "vectorized_elementwise_kernel<add>"


@pytest.fixture
def measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Report]:
    """The roofline test report with the sample's metrics stored in it."""
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    install_torch_ops_contract()
    path = tmp_path / "m.gpuscope"
    with roofline_report(path) as r:
        matched = ncu.match(r, ncu.parse_csv(SAMPLE.read_text()))
    ncu.store(path, matched)
    with Report.open(path) as r:
        yield r


def test_raw_page_is_parsed_with_units_and_thousands_separators() -> None:
    launches = ncu.parse_csv(SAMPLE.read_text())
    assert [x.id for x in launches] == [0, 1, 2, 3, 4, 5]
    first = launches[0]
    assert (first.pid, first.kernel) == (48211, NVJET)
    assert first.metrics["gpu__time_duration.sum"] == (41216.0, "nsecond")
    assert first.metrics["sm__ops_path_tensor_src_bf16_dst_fp32.sum"] == (2e9, "")
    assert first.metrics["launch__registers_per_thread"] == (168.0, "register/thread")
    assert "l1tex__t_sector_hit_rate.pct" not in first.metrics  # "n/a"


def test_details_page_and_scaled_units() -> None:
    text = "\n".join([
        "==PROF== Connected to process 7 (/usr/bin/python3)",
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Section Name",'
        '"Metric Name","Metric Unit","Metric Value"',
        '"0","7","python3","h","k1","1","7","Command line profiler metrics","gpu__time_duration.sum","usecond","1.50"',
        '"0","7","python3","h","k1","1","7","Command line profiler metrics","dram__bytes.sum","Mbyte","2,000.00"',
        '"1","7","python3","h","k2","1","7","Command line profiler metrics","gpu__time_duration.sum","msecond","2"',
        '"1","7","python3","h","k2","1","7","Command line profiler metrics","launch__func_cache_config","",'
        '"CachePreferNone"',
    ])
    launches = ncu.parse_csv(text)
    assert launches[0].metrics == {"gpu__time_duration.sum": (1500.0, "nsecond"), "dram__bytes.sum": (2e9, "byte")}
    assert launches[1].metrics == {"gpu__time_duration.sum": (2e6, "nsecond")}


def test_unit_scaling() -> None:
    assert ncu.to_base(3, "Gbyte/second") == (3e9, "byte/second")
    assert ncu.to_base(2, "Kinst") == (2000, "inst")
    assert ncu.to_base(40, "%") == (40, "%")


def test_text_that_is_not_ncu_csv_is_refused() -> None:
    with pytest.raises(GpuscopeError, match="not an Nsight Compute CSV"):
        ncu.parse_csv("hello\nworld\n")


def test_function_names() -> None:
    assert ncu.function_name("void at::native::vectorized_elementwise_kernel<4, at::native::Add<float>>(int, "
                             "at::native::Add<float>)") == "vectorized_elementwise_kernel"
    assert ncu.function_name("nvjet_sm90_tst_128x256") == "nvjet_sm90_tst_128x256"


def test_launches_match_by_mangled_name_in_launch_order(measured: Report) -> None:
    rows = measured.sql(
        "SELECT n.value, m.launch, m.ncu_id FROM kernel_metric m JOIN string n ON n.id = m.name_id "
        "WHERE m.metric = 'gpu__time_duration.sum' ORDER BY m.ncu_id")
    assert rows == [(NVJET, 0, 0), ("cublasLt::splitKreduce_kernel", 0, 1), (ADD, 0, 2),
                    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_ffma_kernel", 0, 3), (ADD, 1, 4)]


def test_unmatched_launches_are_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    with roofline_report(tmp_path / "u.gpuscope") as r:
        m = ncu.match(r, ncu.parse_csv(SAMPLE.read_text()))
    assert (m.kernels, m.launches, m.unmatched) == (4, 5, ["_Z13unknownKernelPf"])


def test_flops_from_instruction_and_tensor_counters(measured: Report) -> None:
    per = launch_metrics(measured).set_index("ncu_id")
    # nvjet: 2e9 tensor ops in bf16, 1e6 FFMA (2 each) and 1e6 FMUL in fp32
    assert per.loc[0, "flops_bf16"] == 2e9 and per.loc[0, "flops_fp32"] == 3e6
    assert per.loc[0, "tensor_flops"] == 2e9 and per.loc[0, "flops"] == 2.003e9
    assert per.loc[3, "flops_fp32"] == 2e9 and per.loc[3, "tensor_flops"] == 0  # the FFMA GEMM
    assert per.loc[2, "dram_bytes"] == 8_000_512 + 4_000_256
    assert per.loc[0, "tensor_pct"] == pytest.approx(68.52)
    assert per.loc[0, "bound"] == "compute"  # SM 71% over memory 22%
    assert per.loc[2, "bound"] == "memory"
    assert per.loc[1, "bound"] == "memory" and per.loc[1, "occupancy_limiter"] == "registers"


def test_metrics_per_kernel_and_model_comparison(measured: Report) -> None:
    df = kernel_metrics(measured).set_index("name")
    assert df.loc[ADD, "profiled"] == 2 and df.loc[ADD, "duration_ns"] == pytest.approx((23808 + 23840) / 2)
    assert df.loc[NVJET, "model_flops"] == 2e9  # the work model agrees with the counters within 0.15%
    assert df.loc["cublasLt::splitKreduce_kernel", "model_flops"] != df.loc["cublasLt::splitKreduce_kernel",
                                                                           "model_flops"]  # NaN: no model
    table = kernel_metrics_table(measured)
    assert table.column("Name")[0] == "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_ffma_kernel"  # most report time
    assert dict(zip(table.column("Name"), table.column("Precision")))[NVJET] == "bf16 100%"


def test_measured_metrics_fill_kernels_without_a_model(measured: Report) -> None:
    work = kernel_work(measured).set_index("name")
    split = work.loc["cublasLt::splitKreduce_kernel"]
    assert split.source == "ncu" and split.flops == 1e6 and split.bytes == 4_194_304 + 2_000_000
    nvjet = work.loc[NVJET]
    assert nvjet.source == "model" and nvjet.tensor_cores == "used"


def test_selection_of_top_kernels_counts_launches_until_each_has_enough(measured: Report) -> None:
    regex, base, count = profile_selection(measured, top=2, regex=None, per_kernel=3)
    assert base == "mangled"
    assert regex == "^(" + "|".join(sorted(["sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_ffma_kernel",
                                            MANGLED[ADD]])) + ")$"
    assert count == 3  # the report has 1 GEMM and 2 adds: all of them, never enough for 3 each
    regex, base, count = profile_selection(measured, top=None, regex="relu|nvjet", per_kernel=1)
    assert (regex, base, count) == ("relu|nvjet", "demangled", 2)
    with pytest.raises(GpuscopeError, match="no kernel"):
        profile_selection(measured, top=None, regex="^nothing$", per_kernel=1)


def test_ncu_command_line() -> None:
    cmd = runner.command("ncu", ["python3", "train.py", "--x"], Path("/tmp/r.ncu.csv"), ["gpu__time_duration.sum"],
                         regex="^(a|b)$", name_base="mangled", count=6, nvtx=["fwd/"])
    assert cmd[:9] == ["ncu", "--csv", "--page", "raw", "--print-units", "base", "--print-kernel-base", "mangled",
                       "--target-processes"]
    assert cmd[-3:] == ["python3", "train.py", "--x"]
    assert ["--kernel-name-base", "mangled", "--kernel-name", "regex:^(a|b)$"] == cmd[cmd.index("--kernel-name-base"):
                                                                                         cmd.index("--kernel-name") + 2]
    assert "--launch-count" in cmd and cmd[cmd.index("--launch-count") + 1] == "6"
    assert cmd[cmd.index("--nvtx"):cmd.index("--nvtx") + 3] == ["--nvtx", "--nvtx-include", "fwd/"]


def test_ncu_failures_become_one_line() -> None:
    assert runner.failure("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", 1) == runner.NOT_PERMITTED
    assert runner.failure("==PROF== Disconnected\n==WARNING== No kernels were profiled.\n", 0).startswith(
        "ncu profiled no kernel")
    assert runner.failure("==ERROR== Failed to find metric foo__bar", 1) == "ncu failed: Failed to find metric foo__bar"
    assert runner.failure(SAMPLE.read_text(), 0) is None


def test_metrics_ncu_does_not_know_are_not_asked_for() -> None:
    chosen = runner.select_metrics({"gpu__time_duration", "sm__ops_path_tensor_src_bf16_dst_fp32"})
    assert chosen == ["gpu__time_duration.sum", "sm__ops_path_tensor_src_bf16_dst_fp32.sum"]
    assert runner.select_metrics(None) == runner.METRICS


def test_older_reports_cannot_store_metrics(tmp_path: Path, recorded) -> None:  # type: ignore[no-untyped-def]
    path = recorded("mlp_api")  # schema version 2
    with pytest.raises(GpuscopeError, match="schema version"):
        ncu.store(path, ncu.Matched([(1, 0, 0, "gpu__time_duration.sum", 1.0, "nsecond")], 1, 1, []))


def test_random_number_and_fill_kernels_have_the_bytes_they_write_and_no_flops(recorded) -> None:  # type: ignore[no-untyped-def]
    """ncu counts the float instructions of a random-number kernel (Box-Muller) as FLOPs, and its DRAM
    bytes miss what it wrote (still in L2 at its end): such kernels get no FLOPs, no tensor-core state,
    and the bytes of the tensor their operator writes; a workspace init inside a convolution's
    backward, whose size nothing says, gets no work model (the H100 recording with ncu metrics,
    gemm_conv)."""
    import json

    from gpuscope.analysis.ranges.operators import torch_ops_table
    from gpuscope.analysis.roofline.work.kernels import kernel_work

    with Report.open(recorded("gemm_conv")) as r:
        kw = kernel_work(r)
        calls = r.df(f"SELECT name, out_shapes, scalars, dtypes FROM {torch_ops_table(r)} "
                     "WHERE name IN ('aten::randn', 'aten::uniform_')")
    writers = kw[kw["name"].str.contains("distribution_|FillFunctor|init_device_workspace")]
    assert len(writers) == 14 and (writers["flops"].fillna(0) == 0).all()
    assert (writers["tensor_cores"] == "n/a").all()
    # every randn and uniform_ here makes a bf16 tensor: 2 bytes an element (from the calls, by hand)
    for op in ("aten::randn", "aten::uniform_"):
        written = sum(2 * math.prod(json.loads(o)[0]) for o in calls.loc[calls["name"] == op, "out_shapes"])
        mine = kw[kw["op_name"] == op]
        assert len(mine) == 4 and mine["name"].str.contains("distribution_").all()
        assert mine["bytes"].sum() == written and (mine["precision"] == "bf16").all()
    assert kw.loc[kw["op_name"] == "aten::randn", "bytes"].sum() == 33_554_432
    fills = kw[kw["name"].str.contains("FillFunctor")]
    assert (fills["op_name"] == "aten::ones_like").all() and (fills["bytes"] == 4).all()  # a 0-d float32
    workspace = kw[kw["name"].str.contains("init_device_workspace")]
    assert len(workspace) == 3 and workspace[["flops", "bytes"]].isna().all().all()
    gemms = kw[kw["name"].str.contains("nvjet")]
    assert (gemms["flops"] > 1e9).all(), "matrix products keep their work"


def test_bf16_kernels_measured_through_the_half_counters_are_named_bf16(recorded) -> None:  # type: ignore[no-untyped-def]
    """ncu's hfma/hadd/hmul counters take BF16 and FP16 instructions alike; in gemm_conv (all bf16)
    every kernel whose name says BFloat16 has its half FLOPs as bf16, in the measured launches and in
    the roofline's precision."""
    from gpuscope.analysis.roofline.work.kernels import kernel_work

    with Report.open(recorded("gemm_conv")) as r:
        per = launch_metrics(r)
        kw = kernel_work(r)
    bf16_named = per["name"].str.contains("BFloat16") & ~per["name"].str.contains("Half")
    assert bf16_named.sum() >= 10
    assert (per.loc[bf16_named, "flops_fp16"] == 0).all()
    assert (per.loc[bf16_named, "flops_bf16"] > 0).any()
    adds = per[per["name"].str.contains("gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16>")]
    assert len(adds) == 3 and (adds["flops_bf16"] > 0).all()
    assert (adds["flops_bf16"] + adds["flops_fp32"] == adds["flops"]).all()  # moved, none lost
    assert "fp16" not in set(kw["precision"].dropna())
    measured = kw[kw["source"] == "ncu"]
    assert len(measured) and (measured.loc[measured["name"].str.contains("BFloat16"), "precision"] != "fp16").all()


def test_half_precision_from_kernel_names() -> None:
    from gpuscope.analysis.roofline.work.measured import half_precision

    assert half_precision("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>>") == "bf16"
    assert half_precision("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc") == "bf16"
    assert half_precision("__nv_bfloat16 kernel") == "bf16"
    assert half_precision("void at::native::reduce_kernel<c10::Half, float>") == "fp16"
    assert half_precision("sm80_xmma_gemm_f16f16_f16f32_f32_tn_n") == "fp16"
    assert half_precision("ampere_fp16_s16816gemm_fp16_128x128") == "fp16"
    assert half_precision("void at::native::elementwise_kernel<float>") is None
    assert half_precision("convert c10::BFloat16 to c10::Half") is None  # names both


def test_a_kernel_named_neither_takes_bf16_from_its_operator(recorded) -> None:  # type: ignore[no-untyped-def]
    """A kernel measured with half FLOPs whose name says neither BF16 nor FP16 is labelled by its
    operator's tensors: bf16 under a bf16 convolution, fp16 left as measured under a float32 sum."""
    import pandas as pd

    from gpuscope.analysis.ranges.operators import torch_ops_table
    from gpuscope.analysis.roofline.work.kernels import _half_from_operator

    with Report.open(recorded("gemm_conv")) as r:
        ops = torch_ops_table(r)
        conv = r.sql(f"SELECT min(torch_op_id) FROM {ops} WHERE name = 'aten::convolution'")[0][0]
        fsum = r.sql(f"SELECT min(torch_op_id) FROM {ops} WHERE name = 'aten::sum' AND dtypes = '[\"float32\"]'")[0][0]
        frame = pd.DataFrame({"name": ["my_kernel", "my_kernel", "kernel<c10::Half>"],
                              "torch_op_id": pd.array([conv, fsum, conv], dtype="Int64"),
                              "precision": ["fp16", "fp16", "fp16"]})
        _half_from_operator(r, frame, ops, pd.Series(True, index=frame.index))
    assert list(frame["precision"]) == ["bf16", "fp16", "fp16"]

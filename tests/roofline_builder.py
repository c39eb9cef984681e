"""A hand-made report for the roofline tests: PyTorch operators with shapes, their kernels, module
ranges and a step, on a device with round ceilings (cached as a calibration in a temporary dir).

Every number the tests expect follows from the table below by hand (see test_roofline.py).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

from report_builder import ReportBuilder

from gpuscope.analysis.roofline.ceilings import Ceilings, save
from gpuscope.trace.report import Report

DEVICE = "Test GPU"
# 1 TB/s DRAM, 10 TFLOP/s FP32 on CUDA cores, 100 TFLOP/s BF16 on tensor cores
CEILINGS = Ceilings(DEVICE, dram_bytes_per_s=1e12, l2_bytes_per_s=4e12,
                    flops={"fp32": 10e12, "tensor_bf16": 100e12, "tensor_tf32": 50e12},
                    sources={"dram": "measured", "l2": "measured", "fp32": "measured",
                             "tensor_bf16": "measured", "tensor_tf32": "measured"},
                    measured_at="2026-01-01T00:00:00Z")

MM = ([[1000, 1000], [1000, 1000]], [[1000, 1000]])  # shapes, out_shapes
ADD = ([[1000, 1000], [1000, 1000]], [[1000, 1000]])

# (operator, start, end, shapes, dtypes, out_shapes, [(kernel, launch, gpu start, gpu end)])
OPS: list[tuple[str, int, int, list[Any], list[Any], list[Any], list[tuple[str, int, int, int]]]] = [
    ("aten::mm", 10_000, 20_000, MM[0], ["bfloat16", "bfloat16"], MM[1],
     [("nvjet_sm90_tst_128x256_64x4_bz_TNT", 11_000, 100_000, 140_000),
      ("cublasLt::splitKreduce_kernel", 12_000, 140_000, 150_000)]),
    ("aten::add", 21_000, 22_000, ADD[0], ["float32", "float32"], ADD[1],
     [("vectorized_elementwise_kernel<add>", 21_500, 150_000, 174_000)]),
    ("aten::mm", 30_000, 31_000, MM[0], ["float32", "float32"], MM[1],
     [("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_ffma_kernel", 30_500, 200_000, 450_000)]),
    ("aten::relu", 32_000, 33_000, [[100]], ["float32"], [[100]],
     [("vectorized_elementwise_kernel<relu>", 32_500, 450_000, 455_000)]),
    ("aten::add", 40_000, 41_000, ADD[0], ["float32", "float32"], ADD[1],
     [("vectorized_elementwise_kernel<add>", 40_500, 460_000, 484_000)]),
]
MANGLED = {  # the kernels' names as CUPTI gives them (and as ncu prints them with mangled names)
    "cublasLt::splitKreduce_kernel": "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0EfffLb1ELb0ELb0ELb0EEEvNS_18"
                                     "cublasSplitKParamsIT4_EEPKT2_PKT3_PT5_PKT6_SH_PKT7_PSC_PSF_PSI_",
    "vectorized_elementwise_kernel<add>": "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5"
                                          "arrayIPcLm3EEEEviT0_T1_",
}
LOOSE_KERNELS = [("mystery_kernel", 50_000, 500_000, 507_000)]  # launched outside every operator
RANGES = [("Net.fc", 9_000, 23_000, "forward"), ("Net.head", 29_000, 34_000, "forward")]
STEP_MARK = 45_000  # the end of the only step: the mystery kernel comes after it


def add_torch_op(b: ReportBuilder, name: str, start: int, end: int, shapes: list[Any], dtypes: list[Any],
                 out_shapes: list[Any], scalars: dict[str, Any] | None = None, tid: int = 1) -> None:
    """Insert one ``torch_op`` row."""
    b.writer.con.execute(
        "INSERT INTO torch_op VALUES (?, ?, ?, ?, ?, NULL, ?, ?, ?, ?)",
        [start, end, b.pid, tid, b.writer.intern(name), json.dumps(shapes), json.dumps(dtypes),
         json.dumps(out_shapes), json.dumps(scalars or {})],
    )


def add_device(b: ReportBuilder, name: str = DEVICE) -> None:
    b.writer.con.execute(
        "INSERT INTO device (pid, id, name, compute_capability, memory_bandwidth_kbps) VALUES (?, 0, ?, '9.0', ?)",
        [b.pid, name, 2_000_000_000])


def roofline_report(path: Path, **meta: Any) -> Report:
    """Write the report of OPS and cache CEILINGS for its device (in the cache that
    ``GPUSCOPE_CACHE_DIR`` names: set it first); return the report opened."""
    save(CEILINGS)
    b = ReportBuilder(path)
    add_device(b)
    for name, start, end, shapes, dtypes, outs, kernels in OPS:
        add_torch_op(b, name, start, end, shapes, dtypes, outs)
        for kname, launch, gs, ge in kernels:
            b.kernel(kname, gs, ge, tid=1, launch=launch)
    for kname, launch, gs, ge in LOOSE_KERNELS:
        b.kernel(kname, gs, ge, tid=1, launch=launch)
    for name, start, end, category in RANGES:
        b.range(name, start, end, 1, source="torch", category=category)
    b.mark("step", STEP_MARK, 1)
    for name, mangled in MANGLED.items():
        b.writer.con.execute("UPDATE kernel_config SET mangled_id = ? WHERE name_id = ?",
                             [b.writer.intern(mangled), b.writer.intern(name)])
    return b.open(**meta)


def install_torch_ops_contract() -> None:
    """Make ``gpuscope.analysis.ranges.operators`` available: the real module where it exists, otherwise a
    small stand-in with the same contract (innermost operator on the launching thread)."""
    try:
        import gpuscope.analysis.ranges.operators  # noqa: F401
        return
    except ImportError:
        pass
    from gpuscope.analysis.ops.attribution import ops_table, temp_table

    def torch_ops_table(report: Report) -> str:
        return temp_table(report, "test_torch_ops", """
            SELECT row_number() OVER (ORDER BY t.pid, t.start_ns, t.tid) AS torch_op_id, t.pid, t.tid,
                   t.start_ns, t.end_ns, s.value AS name, t.seq, t.shapes, t.dtypes, t.out_shapes, t.scalars,
                   0 AS depth, CAST(NULL AS BIGINT) AS parent_id
            FROM torch_op t JOIN string s ON s.id = t.name_id""")

    def op_kernels_table(report: Report) -> str:
        t = torch_ops_table(report)
        return temp_table(report, "test_op_kernels", f"""
            SELECT o.op_id, arg_max(t.torch_op_id, t.start_ns) AS torch_op_id
            FROM {ops_table(report)} o JOIN {t} t
              ON t.pid = o.pid AND (o.tid IS NULL OR t.tid = o.tid)
             AND t.start_ns <= o.launch_ns AND o.launch_ns <= t.end_ns
            GROUP BY o.op_id""")

    module = types.ModuleType("gpuscope.analysis.ranges.operators")
    module.torch_ops_table = torch_ops_table  # type: ignore[attr-defined]
    module.op_kernels_table = op_kernels_table  # type: ignore[attr-defined]
    sys.modules["gpuscope.analysis.ranges.operators"] = module
    import gpuscope.analysis

    gpuscope.analysis.ranges.operators = module  # type: ignore[attr-defined]

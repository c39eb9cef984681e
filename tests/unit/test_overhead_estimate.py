"""The arithmetic of the overhead estimate on hand-made reports: the sampler's time holding the GIL,
the flush thread, PyTorch operators recorded and passed through at the per-operator costs the
process measured, CUPTI's cost per recorded launch, and what the line says it can not see."""

from __future__ import annotations

import json
from pathlib import Path

from report_builder import ReportBuilder

from gpuscope.analysis.steps.overhead import CUPTI_NS_PER_RECORD, OverheadPart, collection_overhead
from gpuscope.reporters.overview import overhead_line


def _collector(b: ReportBuilder, name: str, records: int, callback_ns: int, detail: dict | str) -> None:
    text = detail if isinstance(detail, str) else json.dumps(detail)
    b.writer.con.execute("INSERT INTO collector VALUES (100, ?, ?, 0, ?, 0, ?)", [name, records, callback_ns, text])


def test_cpu_default_parts(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "cpu.gpuscope")
    for i in range(6):
        b.range(f"M.{i}", 100 * i, 100 * i + 50, 1, category="forward")
    _collector(b, "sampler", 1_700, 360_000_000, {"held_ns": 315_000_000, "interval_ns": 1_000_000})
    _collector(b, "flush", 0, 16_000_000, "")
    # torch-shapes: 164 operators recorded in its window, 98 passed through while it waited
    _collector(b, "torch-shapes", 164, 0, {"ops": 164, "waited_ops": 98, "ns_per_op_recorded": 6_000,
                                           "ns_per_op_passed": 4_000, "windows": 1})
    _collector(b, "ranges", 6, 0, {"ranges": 6, "ns_per_range": 700, "ns_per_module_call": 2_000,
                                   "ns_per_module_call_with_backward": 24_000})
    with b.open(wall_ns=4_000_000_000) as r:
        o = collection_overhead(r)
    operators = 164 * 6_000 + 98 * 4_000
    assert o.parts == [
        OverheadPart("Python sampler", 315_000_000),  # the time holding the GIL, not the thread's CPU time
        OverheadPart("flush thread", 16_000_000),
        OverheadPart("PyTorch operators", operators, estimated=True),
        OverheadPart("PyTorch hooks", 6 * 2_000, estimated=True),
    ]
    assert o.total_ns == 315_000_000 + 16_000_000 + operators + 12_000
    assert o.not_measured == []
    assert o.unseen == ["the report writer beside the program (it competes for the cores)"]
    assert overhead_line(o) == (
        "Collection overhead: not measured (no overhead probe timed the program with collection off). What gpuscope "
        "times, a lower bound: 332.4 ms in the program (8.3% of 4.000 s wall): Python sampler 315.0 ms, flush thread "
        "16 ms, PyTorch operators ~1.38 ms, PyTorch hooks ~12 µs; not included: the report writer beside the "
        "program (it competes for the cores)")


def test_every_operator_recorded_and_processes_add_up(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "ops.gpuscope")
    b.writer.con.execute("INSERT INTO process (pid, ppid, start_ns, clock) VALUES (101, 100, 0, 'cupti')")
    b.writer.con.execute("INSERT INTO collector VALUES (100, 'torch-ops', 378, 0, 0, 0, ?)",
                         [json.dumps({"ops": 378, "ns_per_op_recorded": 15_000, "ns_per_op_passed": 9_000})])
    b.writer.con.execute("INSERT INTO collector VALUES (101, 'torch-ops', 10, 0, 0, 0, ?)",
                         [json.dumps({"ops": 10, "ns_per_op_recorded": 20_000})])
    b.writer.con.execute("INSERT INTO collector VALUES (101, 'sampler', 5, 0, 900, 0, ?)",
                         [json.dumps({"held_ns": 1_000})])
    with b.open(wall_ns=1_000_000_000) as r:
        o = collection_overhead(r)
    # no longer "0 ns" for 378 recorded operators
    assert OverheadPart("PyTorch operators", 378 * 15_000 + 10 * 20_000, estimated=True) in o.parts
    assert OverheadPart("Python sampler", 1_000) in o.parts


def test_operators_without_costs_are_not_measured(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "old.gpuscope")
    _collector(b, "torch-ops", 50, 0, {"ops": 50})
    _collector(b, "torch-shapes", 0, 0, {"ops": 0, "waited_ops": 0})  # nothing seen: nothing to estimate
    _collector(b, "sampler", 10, 0, "not json")
    with b.open(wall_ns=10) as r:
        o = collection_overhead(r)
    assert o.parts == [] and o.not_measured == ["PyTorch operators"]
    assert "(PyTorch operators: not measured in this report)" in overhead_line(o)


def test_cupti_cost_per_recorded_launch(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "gpu.gpuscope")
    for i in range(5):
        b.kernel("k", 1000 * i, 1000 * i + 500, tid=1, launch=1000 * i - 200)
    b.memcpy(9000, 9500, tid=1, launch=8800)
    with b.open(wall_ns=1_000_000) as r:
        o = collection_overhead(r)
    assert OverheadPart("CUPTI in CUDA calls", 6 * CUPTI_NS_PER_RECORD, estimated=True) in o.parts
    assert o.unseen[0].startswith("CUPTI's cost per CUDA call on this machine")


def test_cupti_cost_per_launch_as_each_process_measured_it(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "measured.gpuscope")
    b.writer.con.execute("INSERT INTO process (pid, ppid, start_ns, clock) VALUES (101, 100, 0, 'cupti')")
    for i in range(4):
        b.kernel("k", 1000 * i, 1000 * i + 500, tid=1, launch=1000 * i - 200)
    b.memcpy(9000, 9500, tid=1, launch=8800)
    for i in range(3):
        b.kernel("k", 1000 * i, 1000 * i + 500, tid=2, launch=1000 * i - 200, pid=101)
    _collector(b, "cupti", 5, 0, "kinds=kernel,memcpy copied_buffers=0 anchors=on ns_per_launch=2400")
    with b.open(wall_ns=1_000_000) as r:
        o = collection_overhead(r)
    # process 100 measured 2.4 µs a launch; process 101 measured nothing: the H100 constant, said as unseen
    assert OverheadPart("CUPTI in CUDA calls", 5 * 2_400 + 3 * CUPTI_NS_PER_RECORD, estimated=True) in o.parts
    assert any(u.startswith("CUPTI's cost per CUDA call on this machine") for u in o.unseen)
    b3 = ReportBuilder(tmp_path / "paths.gpuscope")
    for i in range(3):
        b3.kernel("triton_poi_fused_add_0", 1000 * i, 1000 * i + 500, tid=1, launch=1000 * i - 200)
    b3.kernel("elementwise_kernel", 5000, 5500, tid=1, launch=4800)
    b3.memcpy(9000, 9500, tid=1, launch=8800)
    _collector(b3, "cupti", 5, 0, "kinds=kernel ns_per_launch=500 ns_per_runtime_launch=1400")
    with b3.open(wall_ns=1_000_000) as r:
        o = collection_overhead(r)
    # Triton's kernels at the driver's cost, PyTorch's kernel and the copy at the runtime's
    assert OverheadPart("CUPTI in CUDA calls", 3 * 500 + 2 * 1_400, estimated=True) in o.parts
    b2 = ReportBuilder(tmp_path / "all-measured.gpuscope")
    b2.kernel("k", 0, 500, tid=1, launch=-200)
    _collector(b2, "cupti", 1, 0, "kinds=kernel ns_per_launch=0")  # measured, and nothing seen
    with b2.open(wall_ns=1_000_000) as r:
        o = collection_overhead(r)
    assert OverheadPart("CUPTI in CUDA calls", 0, estimated=True) in o.parts
    assert not any("on this machine" in u for u in o.unseen)
    assert "CUPTI's start (attaching, and the program's kernels loaded under it)" in o.unseen


def test_profiling_share_of_launch_overhead() -> None:
    from gpuscope.analysis.steps.overhead import CollectionOverhead, profiling_share_ns

    # per-call parts (estimated) over the steps: 60 ms over 1 s of steps; measured parts over the wall: 20 ms
    # over 10 s. A 2 ms step: 60e6 * 2e6 / 1e9 + 20e6 * 2e6 / 10e9 = 120 µs + 4 µs
    o = CollectionOverhead(10_000_000_000, [OverheadPart("CUPTI in CUDA calls", 50_000_000, estimated=True),
                                            OverheadPart("PyTorch hooks", 10_000_000, estimated=True),
                                            OverheadPart("CUPTI buffers", 20_000_000)])
    assert profiling_share_ns(o, 1_000_000_000, 2_000_000, 500_000) == 124_000
    assert profiling_share_ns(o, 1_000_000_000, 2_000_000, 100_000) == 100_000  # never more than the part
    assert profiling_share_ns(o, 0, 2_000_000, 500_000) == 0  # no steps
    assert profiling_share_ns(o, 1_000_000_000, 2_000_000, 0) == 0  # no launch overhead
    o.wall_ns = None
    assert profiling_share_ns(o, 1_000_000_000, 2_000_000, 500_000) == 120_000


def test_the_diagnosis_says_how_much_launch_overhead_is_profilings(mlp_api: object) -> None:
    from gpuscope.analysis.diagnosis import diagnose
    from gpuscope.analysis.steps.overhead import collection_overhead, profiling_share_ns

    d = diagnose(mlp_api)  # type: ignore[arg-type]
    (p,) = d.processes
    mean = p.mean_parts()
    own = profiling_share_ns(collection_overhead(mlp_api), int(p.steps["duration_ns"].sum()),  # type: ignore[arg-type]
                             mean["duration_ns"], mean["idle_launch"])
    assert 0 < own < mean["idle_launch"]
    (note,) = [n for n in d.notes if "profiling's own" in n]
    assert note.startswith(f"Process {p.pid}: of the kernel launch overhead (961.8 µs per step), about 34.1 µs is "
                           "profiling's own")

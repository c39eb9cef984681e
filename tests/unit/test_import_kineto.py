"""``gpuscope import`` of PyTorch profiler (Kineto) traces: what the source holds arrives in the report.

Counts and total times are computed independently here, from the whole JSON read with the standard
library, and compared with the imported report's tables.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES
from import_helpers import load_json, shared

from gpuscope.analysis.roofline.points import roofline_sum
from gpuscope.analysis.steps.table import step_sum
from gpuscope.analysis.roofline.work.model import op_work_json
from gpuscope.trace.importers import import_trace
from gpuscope.trace.report import Report

KINETO_TRACES = [
    "hta-critical_path--alexnet--benchmark_result_2869224_1695835535_trace.json.gz",
    "hta-nccl_parser_config--nccl_data.json.gz",
    "hta-trace_diff--control--control.json.gz",
    "hta-trace_filter--sampled_rank-0.json.gz",
    "hta-triton_example--triton_example.json.gz",
    "tracelens-h100--Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens-h100--gaunernst_bert-small-uncased__1016001.json.gz",
]
GPT_TRACE = FIXTURES / "gpt_eager.torch_trace.json.gz"


def _ns(us: float) -> int:
    return round(us * 1000)


def _source_facts(path: Path) -> dict[str, object]:
    events = load_json(path)["traceEvents"]
    by_cat: dict[str, list[dict]] = {}
    for ev in events:
        by_cat.setdefault(ev.get("cat"), []).append(ev)
    kernels = by_cat.get("kernel", [])
    launches = {e["args"].get("correlation") for c in ("cuda_runtime", "cuda_driver") for e in by_cat.get(c, [])}
    return {
        "unlaunched": sum(1 for e in kernels if e["args"].get("correlation") not in launches),
        "kernels": len(kernels),
        "kernel_ns": sum(_ns(e["dur"]) for e in kernels),
        "kernel_names": Counter(e["name"] for e in kernels),
        "memcpy": len(by_cat.get("gpu_memcpy", [])),
        "memcpy_bytes": sum(e["args"].get("bytes", 0) for e in by_cat.get("gpu_memcpy", [])),
        "memset": len(by_cat.get("gpu_memset", [])),
        "api": len(by_cat.get("cuda_runtime", [])) + len(by_cat.get("cuda_driver", [])),
        "ops": len(by_cat.get("cpu_op", [])),
        "profiler_steps": sum(1 for e in by_cat.get("user_annotation", []) if e["name"].startswith("ProfilerStep#")),
    }


def _imported(path: Path, tmp_path: Path) -> Report:
    out = tmp_path / "imported.gpuscope"
    import_trace(path, out)
    return Report.open(out)


@pytest.mark.parametrize("name", KINETO_TRACES)
def test_counts_and_times_equal_the_source(name: str, tmp_path: Path) -> None:
    path = shared(f"kineto/{name}")
    facts = _source_facts(path)
    with _imported(path, tmp_path) as r:
        assert r.count("kernel") == facts["kernels"]
        assert r.sql("SELECT sum(end_ns - start_ns) FROM kernel")[0][0] == facts["kernel_ns"]
        names = Counter(dict(r.sql("SELECT n.value, count(*) FROM kernel k JOIN kernel_config c ON c.id = k.config_id "
                                   "JOIN string n ON n.id = c.name_id GROUP BY 1")))
        assert names == facts["kernel_names"]
        assert r.count("memcpy") == facts["memcpy"]
        assert (r.sql("SELECT coalesce(sum(bytes), 0) FROM memcpy")[0][0]) == facts["memcpy_bytes"]
        assert r.count("memset") == facts["memset"]
        assert r.count("api_call") == facts["api"]
        assert r.count("torch_op") == facts["ops"]
        # kernels join the API call that launched them by correlation id (where the trace has it)
        unlaunched = r.sql("SELECT count(*) FROM kernel k WHERE NOT EXISTS (SELECT 1 FROM api_call a "
                           "WHERE a.pid = k.pid AND a.correlation_id = k.correlation_id)")[0][0]
        assert unlaunched == facts["unlaunched"]
        steps = [row for row in step_sum(r).rows if str(row[1]).isdigit()]
        if facts["profiler_steps"]:
            assert len(steps) == facts["profiler_steps"]
        assert r.meta["imported_from"]["format"] == "pytorch-profiler"


def test_rank_world_size_and_devices(tmp_path: Path) -> None:
    path = shared("kineto/hta-nccl_parser_config--nccl_data.json.gz")
    with _imported(path, tmp_path) as r:
        assert (r.meta["rank"], r.meta["world_size"]) == (0, 2)
        devices = r.devices()
        assert len(devices) == 8 and set(devices["name"]) == {"NVIDIA A100-PG509-200"}
        assert set(devices["sm_count"]) == {108} and set(devices["compute_capability"]) == {"8.0"}


def test_shapes_give_flops(tmp_path: Path) -> None:
    """Operators with input shapes reach the work model: the addmm of BERT's linear layers gets
    2·M·N·K + M·N operations, and the roofline has rows."""
    path = shared("kineto/tracelens-h100--gaunernst_bert-small-uncased__1016001.json.gz")
    with _imported(path, tmp_path) as r:
        shapes, dtypes, outs, scalars = r.sql(
            "SELECT shapes, dtypes, out_shapes, scalars FROM torch_op t JOIN string n ON n.id = t.name_id "
            "WHERE n.value = 'aten::addmm' AND shapes LIKE '[[512], [141, 512], [512, 512]%' LIMIT 1")[0]
        assert json.loads(dtypes)[:3] == ["bfloat16"] * 3 and json.loads(shapes)[3:] == [None, None]
        work = op_work_json("aten::addmm", shapes, dtypes, outs, scalars)
        assert work is not None and work.flops == 2 * 141 * 512 * 512 + 141 * 512
        table = roofline_sum(r)
        assert table.rows, table.notes
        assert "torch_ops" not in r.not_recorded()
        # memory events became counters
        assert r.sql("SELECT count(*) FROM host_counter WHERE name = 'gpu0.memory_allocated_bytes'")[0][0] > 0


def test_recorded_trace_matches_capture_of_the_same_program(recorded, tmp_path: Path) -> None:
    """The torch.profiler trace and gpuscope's capture of the same small GPT (separate runs):
    the same kernels per step and GPU busy time per step, the same device."""
    with _imported(GPT_TRACE, tmp_path) as imp, Report.open(recorded("gpt_eager")) as cap:
        ours = [row for row in step_sum(imp).rows if str(row[1]).isdigit()]
        theirs = [row for row in step_sum(cap).rows if str(row[1]).isdigit() and row[7] != "yes"]
        assert len(ours) == 5  # five optimizer steps in the profiler's window
        assert {row[6] for row in ours} == {row[6] for row in theirs} == {197}
        busy_imp = sorted(row[4] for row in ours)[2]
        busy_cap = sorted(row[4] for row in theirs)[len(theirs) // 2]
        assert abs(busy_imp / busy_cap - 1) < 0.02
        names = lambda r: {n for (n,) in r.sql("SELECT DISTINCT n.value FROM kernel k JOIN kernel_config c "  # noqa: E731
                                               "ON c.id = k.config_id JOIN string n ON n.id = c.name_id")}
        assert names(imp) <= names(cap)
        assert imp.devices()["name"].tolist() == cap.devices()["name"].tolist()
        # module events (with_modules) became forward ranges named by their nesting
        blocks = {n for (n,) in imp.sql("SELECT DISTINCT s.value FROM nvtx_range r JOIN string s ON s.id = r.name_id "
                                        "WHERE r.category = 'forward' AND s.value LIKE 'GPT.Sequential_0.Block_%' "
                                        "AND s.value NOT LIKE '%.%.%.%'")}
        assert blocks == {f"GPT.Sequential_0.Block_{i}" for i in range(4)}
        assert "torch_ops" in imp.not_recorded()  # recorded without record_shapes
        from gpuscope.analysis.overview import overview

        said = list(overview(imp).not_recorded.values())  # each lack said once, though filed under two keys
        assert len(said) == len(set(said)) and any(s.startswith("operator input shapes") for s in said)


def test_a_thread_written_as_a_negative_number_gets_a_lane_named_by_its_unsigned_id(tmp_path: Path) -> None:
    from gpuscope.analysis.timeline.tracks import build_index

    # PyTorch's profiler writes some CUPTI threads' ids as signed 32-bit numbers
    events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": -1029147072,
               "ts": 1000.5, "dur": 2.25, "args": {"correlation": 1, "cbid": 211}},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1003.0, "dur": 4.5,
               "args": {"correlation": 1, "device": 0, "stream": 7}}]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}],
                                 "traceEvents": events}))
    import_trace(trace, tmp_path / "t.gpuscope")
    with Report.open(tmp_path / "t.gpuscope") as report:
        labels = [t.label for t in build_index(report).tracks]
    assert "Thread 3265820224: CUDA API" in labels, labels
    assert not any("-" in label.split(":")[0] for label in labels), labels

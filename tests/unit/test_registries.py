"""The registries the command line and the agent read: collectors, output and export formats, and the
one definition of steps that step_sum and the diagnosis share."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.steps.table import step_sum
from gpuscope.capture import collectors
from gpuscope.capture.cupti.activity import CuptiCollector
from gpuscope.capture.cupti.callbacks import CallbackHub, TimedCalls
from gpuscope.capture.cupti.graph_launches import GraphLaunches
from gpuscope.capture.cupti.launch_anchors import CallbackAnchors
from gpuscope.capture.cupti.sync_sites import SyncSites
from gpuscope.capture.python.cuda_memory import CudaMemory
from gpuscope.capture.python.torch_memory import TorchMemory
from gpuscope.capture.python.nvtx_python import NvtxPackage
from gpuscope.capture.python.ranges import RangeRecorder
from gpuscope.capture.python.ranks import RankRecorder
from gpuscope.capture.python.sampler import Sampler
from gpuscope.capture.python.torch_hooks import TorchHooks
from gpuscope.capture.python.torch_ops import TorchOps
from gpuscope.reporters import DIAGNOSIS_FORMATS, FORMATS, diagnosis_formats
from gpuscope.trace import chrome, schema
from gpuscope.trace.exports import EXPORTS, writer
from gpuscope.trace.report import Report


def test_every_trace_option_records_tables_of_the_schema() -> None:
    tables = set(schema.TABLES)
    for option in collectors.TRACES:
        assert set(option.tables) <= tables, option.name
        assert option.side in ("process", "launcher", "none")
        assert all(n in collectors.BY_NAME for n in option.implies)
    assert list(collectors.KNOWN_TRACES) == [t.name for t in collectors.TRACES]
    assert set(collectors.DEFAULT_TRACE) <= set(collectors.BY_NAME)


def test_not_recorded_comes_from_the_registry() -> None:
    assert list(collectors.not_recorded(collectors.DEFAULT_TRACE)) == ["cuda_api", "torch_backward", "torch_ops",
                                                                        "cpu", "memory"]
    assert list(collectors.not_recorded([])) == ["cuda", "cuda_api", "nvtx", "torch", "torch_ops", "cpu",
                                                    "memory"]
    shapes = collectors.not_recorded(["torch", "torch-shapes"])["torch_ops"]
    assert "sample windows" in shapes
    assert collectors.not_recorded(["torch", "torch-backward", "torch-ops"]).get("torch_backward") is None


def test_defaults_without_a_gpu_and_in_a_block() -> None:
    assert collectors.cpu_only(collectors.DEFAULT_TRACE) == ["torch", "host", "torch-shapes", "cpu"]
    assert collectors.in_process(["cuda", "host", "torch", "nvml"]) == ["cuda", "torch"]


@pytest.mark.parametrize("cls", [CuptiCollector, CallbackHub, TimedCalls, SyncSites, GraphLaunches, CallbackAnchors,
                                 RangeRecorder, RankRecorder, NvtxPackage, Sampler, TorchHooks, TorchOps, TorchMemory,
                                 CudaMemory])
def test_every_in_process_recorder_follows_the_collector_protocol(cls: type) -> None:
    for method in ("set_collecting", "take_rows"):
        assert callable(getattr(cls, method, None)), f"{cls.__name__}.{method}"


def test_range_recorder_as_a_collector() -> None:
    rec = RangeRecorder()
    rec.set_collecting(False)
    assert rec.on is False
    rec.set_collecting(True)
    rec.push("a")
    rec.pop()
    rows = rec.take_rows()
    assert list(rows) == ["range"] and len(rows["range"]) == 1
    assert rec.take_rows() == {}


def test_output_and_export_formats_are_registries() -> None:
    assert list(diagnosis_formats()) == list(DIAGNOSIS_FORMATS)
    assert writer("chrome") is chrome.write
    assert list(FORMATS) == ["table", "csv", "json"]


def _choices(command: str) -> list[str]:
    """The -f choices ``gpuscope COMMAND --help`` lists."""
    out = subprocess.run([sys.executable, "-m", "gpuscope", command, "--help"], capture_output=True, text=True,
                         check=True).stdout
    braces = out[out.index("-f {") + 4:]
    return braces[: braces.index("}")].split(",")


def test_the_command_line_lists_the_registries() -> None:
    for command in ("stats", "kernels", "roofline"):
        assert _choices(command) == list(FORMATS), command
    assert _choices("analyze") == list(DIAGNOSIS_FORMATS)
    assert _choices("export") == list(EXPORTS)


@pytest.mark.parametrize("name", ["capture_steps", "diagnosis_launch_bound", "cpu_balanced", "program_compiled_mlp"])
def test_step_sum_and_the_diagnosis_have_the_same_steps(recorded: Callable[[str], Path], name: str) -> None:
    with Report.open(recorded(name)) as report:
        means = {row[0]: float(row[3]) for row in step_sum(report).rows if row[1] == "mean"}
        processes = [p for p in diagnose(report).processes if p.has_steps]
        assert processes and means
        for p in processes:
            assert p.mean_parts()["duration_ns"] == pytest.approx(means[p.pid], abs=1.0)


def test_a_distributed_job_without_a_gpu_records_every_operator() -> None:
    """The collectives of a gloo job are known from c10d operators only, so torchrun, mpirun and srun
    get torch-ops instead of operator samples."""
    default = collectors.DEFAULT_TRACE
    for cmd in (["torchrun", "--nproc_per_node", "2", "train.py"],
                ["/usr/bin/python3", "-m", "torch.distributed.run", "train.py"], ["srun", "python", "x.py"]):
        assert collectors.is_distributed(cmd), cmd
        assert collectors.cpu_only(default, True) == ["torch", "host", "torch-ops", "cpu"]
    assert not collectors.is_distributed(["python", "train.py", "--out", "x", "torchrun"])  # a late argument
    assert not collectors.is_distributed(["python", "train.py"])

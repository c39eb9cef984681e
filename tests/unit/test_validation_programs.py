"""The validation programs of tests/workloads (ordinary scripts with candidate fixes, measured by
bench/diagnosis.py on a GPU): their declarations are well-formed, they look like user scripts (no
profiler import, no step marks), and every variant runs at tiny sizes on the CPU.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest

from gpuscope.analysis.diagnosis.rules import rule_names

pytest.importorskip("torch")  # the programs import torch at the top

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "tests" / "workloads"
KNOWN_RULES = set(rule_names())  # a fix names the diagnosis rules whose finding proposes it
COMPILING = {"compiled_mlp", "elementwise_chain", "compiled_graphs_infer"}  # torch.compile: tens of seconds on a CPU


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _bench() -> ModuleType:
    return _load(ROOT / "bench" / "diagnosis.py", "bench_diagnosis")


def _programs() -> list[str]:
    return sorted(_bench().PROGRAMS)


@pytest.fixture(scope="module", autouse=True)
def _workloads_on_path() -> Iterator[None]:
    sys.path.insert(0, str(WORKLOADS))
    yield
    sys.path.remove(str(WORKLOADS))


def _program(name: str) -> Any:
    if str(WORKLOADS) not in sys.path:
        sys.path.insert(0, str(WORKLOADS))
    return _load(WORKLOADS / f"{name}.py", f"validation_{name}").PROGRAM


def test_there_are_at_least_13_programs_and_the_bench_knows_each() -> None:
    names = _programs()
    assert len(names) >= 13
    on_disk = {p.stem for p in WORKLOADS.glob("*.py") if "PROGRAM = Program(" in p.read_text()}
    assert on_disk == set(names)


@pytest.mark.parametrize("name", _programs())
def test_declaration_is_well_formed(name: str) -> None:
    prog = _program(name)
    assert prog.name == name and prog.description
    names = [v.name for v in prog.variants]
    assert len(names) == len(set(names)) and all(n.isidentifier() for n in names)
    base = prog.as_written
    assert base.name == "as_written" and not base.rules and not base.work_changing and not base.needs_cuda
    assert prog.fixes or prog.nothing_to_fix
    for fix in prog.fixes:
        assert fix.rules, f"{name}.{fix.name} names no rule"
        assert set(fix.rules) <= KNOWN_RULES, f"{name}.{fix.name}: unknown rules {set(fix.rules) - KNOWN_RULES}"
        assert fix.description
        if fix.work_changing:
            assert fix.samples != base.samples, f"{name}.{fix.name} changes the work but not the samples"
        else:
            assert fix.samples == base.samples
    assert prog.iterations >= prog.warmup + 50  # at least 50 steady iterations in the plain run
    assert prog.measure_iterations > 0 and prog.marks in ("none", "optimizer")


@pytest.mark.parametrize("name", [*_programs(), "harness"])
def test_programs_look_like_user_scripts(name: str) -> None:
    text = (WORKLOADS / f"{name}.py").read_text()
    assert "gpuscope" not in text
    assert "nvtx" not in text


@pytest.fixture
def torch_flags() -> Iterator[None]:
    import torch

    saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark, torch.get_num_threads())
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cudnn.benchmark = saved[1]
    torch.set_num_threads(saved[2])


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("name", [n for n in _programs() if n not in COMPILING])
def test_every_variant_runs_on_the_cpu(name: str, torch_flags: None) -> None:
    import torch

    from harness import Setup, measure

    prog = _program(name)
    torch.set_num_threads(1)
    doc = measure(prog, Setup(torch.device("cpu"), quick=True), rounds=2, iterations=2, warmup=1)
    assert doc["program"] == name and list(doc["variants"]) == [v.name for v in prog.variants]
    for v in prog.variants:
        timing = doc["variants"][v.name]
        if v.needs_cuda:
            assert "skipped" in timing
        else:
            assert len(timing["round_s"]) == 2 and timing["median_s"] > 0
            assert timing["rules"] == list(v.rules) and timing["samples_per_iteration"] == v.samples

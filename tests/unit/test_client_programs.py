"""The client programs of tests/workloads/clients (ordinary scripts on the libraries users run:
transformers, torchvision, Lightning, JAX, CuPy, Triton, PyTorch itself), each with candidate fixes
declared through the shared harness: their declarations are well-formed and name known diagnosis
rules, importing them never needs their library, and each whose library is installed runs at tiny
sizes on the CPU (``--device cpu --quick``) in a process of its own, reporting a positive steady
time per iteration. A program whose library is missing is skipped, and so are those that compile
with ``torch.compile`` (minutes on a small CPU); the GPU-only ones (CuPy, Triton) must say in one
line that they skip the CPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpuscope.analysis.diagnosis.rules import rule_names

pytest.importorskip("torch")  # the harness imports torch at the top

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "tests" / "workloads" / "clients"
KNOWN_RULES = set(rule_names())
TIMEOUT_S = 120  # per program run
# compiled with torch.compile as written: minutes on a small CPU, so not run here
COMPILED = {"nanogpt_compiled", "nanogpt_reduce_overhead", "compiled_graph_break"}


def _programs() -> list[str]:
    return sorted(p.stem for p in CLIENTS.glob("*.py") if "PROGRAM = Program(" in p.read_text())


def _text(name: str) -> str:
    return (CLIENTS / f"{name}.py").read_text()


def _libraries(name: str) -> list[str]:
    """Top-level modules a program asks for with ``need(...)`` (its own, or those of the program it builds on)."""
    text = _text(name)
    libs = re.findall(r'need\("([\w.]+)"', text)
    for base in re.findall(r"^from (\w+) import", text, re.MULTILINE):
        if base != "harness" and (CLIENTS / f"{base}.py").exists():
            libs += re.findall(r'need\("([\w.]+)"', (CLIENTS / f"{base}.py").read_text())
    return sorted({lib.split(".")[0] for lib in libs})


def _load(name: str) -> ModuleType:
    for path in (str(CLIENTS.parent), str(CLIENTS)):
        if path not in sys.path:
            sys.path.insert(0, path)
    spec = importlib.util.spec_from_file_location(f"client_{name}", CLIENTS / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_at_least_16_programs_on_at_least_6_libraries() -> None:
    names = _programs()
    assert len(names) >= 16
    libs = {lib for n in names for lib in _libraries(n)} | {"torch"}
    assert len(libs) >= 6, libs


@pytest.mark.parametrize("name", _programs())
def test_declaration_is_well_formed(name: str) -> None:
    prog = _load(name).PROGRAM
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


@pytest.mark.parametrize("name", _programs())
def test_programs_look_like_user_scripts(name: str) -> None:
    text = _text(name)
    assert "gpuscope" not in text and "nvtx" not in text
    assert text.startswith('"""') and 'if __name__ == "__main__":\n    main(PROGRAM)' in text


def _run(name: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / f"{name}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, str(CLIENTS / f"{name}.py"), "--device", "cpu", "--quick", "--iterations", "3",
           "--warmup", "1", "--timing-out", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, cwd=ROOT), out


@pytest.mark.parametrize("name", _programs())
def test_runs_on_the_cpu(name: str, tmp_path: Path) -> None:
    missing = [lib for lib in _libraries(name) if importlib.util.find_spec(lib) is None]
    gpu_only = "gpu_only(setup" in _text(name)
    if missing and not gpu_only:
        pytest.skip(f"{', '.join(missing)} not installed")
    if name in COMPILED:
        pytest.skip("torch.compile takes minutes on a small CPU")
    proc, out = _run(name, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if gpu_only:
        assert "skipped on the CPU" in proc.stdout and not out.exists()
        return
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["program"] == name and doc["variant"] == "as_written"
    assert doc["steady_s_per_iteration"] > 0 and doc["iterations_timed"] == 2 and doc["warmup"] == 1


def test_the_bench_knows_every_client_program() -> None:
    spec = importlib.util.spec_from_file_location("bench_diagnosis_clients", ROOT / "bench" / "diagnosis.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert set(bench.CLIENTS) == set(_programs())

"""The pipeline's direction, checked on the source: no module imports a later stage, and no imports loop.

Stages, first to last: the shared base (top-level modules such as errors, annotation, spool, units),
capture, trace, analysis, reporters, run, cli, and the package itself (``gpuscope/__init__.py``, the
Python API). A module may import its own stage and the stages before it. Every import counts: at
module level, inside functions (lazy imports) and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "gpuscope"

STAGES = ["base", "capture", "trace", "analysis", "experiment", "reporters", "run", "cli", "api"]
BASE_MODULES = {"errors", "annotation", "spool", "units", "version", "safe_text"}
API_MODULES = {"__init__", "__main__", "notebook"}  # notebook: the Python API of a loaded report


def _modules(root: Path = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Return every module of the package: dotted name -> (file, whether it is a package's __init__)."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


def _targets(name: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    """Return the gpuscope modules an import statement names (a name imported from a package that
    is itself a module counts as that module)."""
    if isinstance(node, ast.Import):
        found = [a.name for a in node.names]
    else:
        if node.level:
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        found = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
    out = []
    for target in found:
        while target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in known and target != name:
            out.append(target)
    return out


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Return module -> the gpuscope modules it imports anywhere in its source."""
    modules = _modules(root)
    known = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, (path, is_package) in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name].update(_targets(name, is_package, node, known))
    return graph


def stage_of(module: str) -> str:
    """Return the pipeline stage of a gpuscope module, or raise for one no stage claims."""
    parts = module.split(".")
    if len(parts) == 1:
        return "api"
    head = parts[1]
    if head in STAGES:
        return head
    if len(parts) == 2 and head in BASE_MODULES:
        return "base"
    if len(parts) == 2 and head in API_MODULES:
        return "api"
    raise AssertionError(f"{module} belongs to no stage: put it in one, or list it in BASE_MODULES")


def back_edges(graph: dict[str, set[str]]) -> list[str]:
    """Return 'a -> b' for every import of a later stage than the importer's."""
    out = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if STAGES.index(stage_of(target)) > STAGES.index(stage_of(module)):
                out.append(f"{module} ({stage_of(module)}) -> {target} ({stage_of(target)})")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the import loops: each strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_stage() -> None:
    for module in import_graph():
        stage_of(module)


def test_no_import_runs_back_up_the_pipeline() -> None:
    assert back_edges(import_graph()) == []


def test_no_imports_loop() -> None:
    assert cycles(import_graph()) == []


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "gpuscope" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "gpuscope"


def test_the_check_sees_lazy_relative_and_type_checking_imports(tmp_path: Path) -> None:
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "errors.py": "",
        "capture/__init__.py": "",
        "capture/agent.py": "def f():\n    from ..analysis import steps\n",
        "trace/__init__.py": "",
        "trace/writer.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..cli import main\n",
        "analysis/__init__.py": "",
        "analysis/steps.py": "from . import windows\nfrom ..errors import E\n",
        "analysis/windows.py": "import gpuscope.analysis.steps as s\n",
        "cli/__init__.py": "from .main import run\n",
        "cli/main.py": "from gpuscope.trace import writer\n",
    })
    graph = import_graph(pkg)
    assert graph["gpuscope.analysis.steps"] == {"gpuscope.analysis.windows", "gpuscope.errors"}
    assert back_edges(graph) == [
        "gpuscope.capture.agent (capture) -> gpuscope.analysis.steps (analysis)",
        "gpuscope.trace.writer (trace) -> gpuscope.cli.main (cli)",
    ]
    assert cycles(graph) == [["gpuscope.analysis.steps", "gpuscope.analysis.windows"],
                             ["gpuscope.cli.main", "gpuscope.trace.writer"]]


def test_a_module_outside_every_stage_is_named(tmp_path: Path) -> None:
    pkg = _write(tmp_path, {"__init__.py": "", "helpers.py": ""})
    with pytest.raises(AssertionError, match="gpuscope.helpers belongs to no stage"):
        stage_of("gpuscope.helpers")
    assert set(import_graph(pkg)) == {"gpuscope", "gpuscope.helpers"}


# --- Inside analysis: the packages and the imports docs/architecture.md draws between them ---

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
ANALYSIS_SHARED = {"table", "column_fetch", "heap"}  # any analysis package may import these modules
ANALYSIS_TOP = {"__init__", "overview", "frames"}  # these modules may import any analysis package


def drawn_packages(text: str) -> dict[str, set[str]]:
    """Return package -> the packages it may import, from the block between the 'analysis packages'
    markers: a line ``name -> a, b,`` (the list continued on the next lines while it ends with a
    comma); two spaces or more end the list, and what follows describes the package."""
    block = text.split("<!-- analysis packages: begin -->", 1)[1].split("<!-- analysis packages: end -->", 1)[0]
    out: dict[str, set[str]] = {}
    current = None
    continues = False
    for line in block.splitlines():
        head = re.match(r"\s*([a-z_]+)\s+->(.*)$", line)
        if head:
            current, rest = head.group(1), head.group(2)
            out[current] = set()
        elif continues and current is not None and line.strip():
            rest = line
        else:
            continues = False
            continue
        if head and (rest.startswith("  ") or not rest.strip()):  # nothing listed: the description follows
            rest = ""
        chunk = re.split(r"\s{2,}", rest.strip())[0] if rest.strip() else ""
        listed = re.fullmatch(r"[a-z_]+(?:, ?[a-z_]+)*,?", chunk)
        targets = chunk if listed else ""
        out[current] |= {t.strip() for t in targets.split(",") if t.strip()}
        continues = targets.endswith(",")
    return out


def package_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Return (importer, imported) for every import between two analysis parts: a package, or one of
    the modules directly in analysis/ (table, column_fetch, heap, __init__, overview, frames)."""
    def part(module: str) -> str | None:
        parts = module.split(".")
        if parts[:2] != ["gpuscope", "analysis"]:
            return None
        return "__init__" if len(parts) == 2 else parts[2]

    out = set()
    for module, targets in graph.items():
        a = part(module)
        for target in targets:
            b = part(target)
            if a and b and a != b:
                out.add((a, b))
    return out


def against_drawing(edges: set[tuple[str, str]], drawn: dict[str, set[str]]) -> list[str]:
    """Return 'a -> b' for each import between analysis parts that the drawing does not allow."""
    out = []
    for a, b in sorted(edges):
        if a in ANALYSIS_TOP or b in ANALYSIS_SHARED:
            continue
        if b not in drawn.get(a, set()):
            out.append(f"{a} -> {b}")
    return out


def test_the_drawing_lists_every_analysis_package_and_nothing_else() -> None:
    drawn = drawn_packages(ARCHITECTURE.read_text())
    packages = {p.name for p in (PACKAGE / "analysis").iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in (PACKAGE / "analysis").glob("*.py")}
    assert set(drawn) == packages
    assert modules == ANALYSIS_SHARED | ANALYSIS_TOP
    for name, targets in drawn.items():
        assert targets <= packages, f"{name} may import {targets - packages}, which are no packages"


def test_analysis_imports_follow_the_drawing() -> None:
    drawn = drawn_packages(ARCHITECTURE.read_text())
    assert against_drawing(package_edges(import_graph()), drawn) == []


def test_the_drawing_has_no_loop() -> None:
    drawn = drawn_packages(ARCHITECTURE.read_text())
    assert cycles({f"gpuscope.analysis.{a}": {f"gpuscope.analysis.{b}" for b in bs} for a, bs in drawn.items()}) == []


def test_an_import_against_the_drawing_is_named(tmp_path: Path) -> None:
    text = ("<!-- analysis packages: begin -->\n"
            "    ops     ->                 operations\n"
            "    steps   -> ops             steps\n"
            "    diff    -> ops, steps,     comparing\n"
            "               memory\n"
            "    memory  ->                 peaks\n"
            "<!-- analysis packages: end -->\n")
    drawn = drawn_packages(text)
    assert drawn == {"ops": set(), "steps": {"ops"}, "diff": {"ops", "steps", "memory"}, "memory": set()}
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "analysis/__init__.py": "from .steps import source\n",
        "analysis/table.py": "",
        "analysis/ops/__init__.py": "",
        "analysis/ops/rows.py": "from ..table import Table\n",
        "analysis/steps/__init__.py": "",
        "analysis/steps/source.py": "from ..ops import rows\n",
        "analysis/memory/__init__.py": "",
        "analysis/memory/peak.py": "def f():\n    from ..steps.source import x\n",
        "analysis/ops/sync.py": "from gpuscope.analysis.diff import compare\n",
        "analysis/diff/__init__.py": "",
        "analysis/diff/compare.py": "from ..memory import peak\n",
    })
    assert against_drawing(package_edges(import_graph(pkg)), drawn) == ["memory -> steps", "ops -> diff"]

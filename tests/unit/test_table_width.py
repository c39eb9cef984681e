"""Every report of ``gpuscope stats`` fits the width it is laid out for: a CPU run, a GPU run with every
CUDA record kind, a multi-rank FSDP run and an imported PyTorch profiler trace, at 80 and 120 columns.
Numbers stay whole, and what is left out is said under the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES, unpack_fixture
from gpuscope.analysis import stats_reports
from gpuscope.analysis.table import Column, Table
from gpuscope.analysis.diagnosis import diagnose
from gpuscope.reporters import FORMATS, diagnosis_formats
from gpuscope.reporters.terminal import format_table, render, render_present
from gpuscope.trace.importers import import_trace
from gpuscope.trace.report import Report

WIDTHS = (80, 120)
RECORDED = ("cpu_train_small", "mlp_api", "nccl_fsdp")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("width")


@pytest.fixture(scope="module")
def every_table(scratch: Path) -> dict[str, list[Table]]:
    """The tables of every stats report, per report (computed once: rendering is what is tested)."""
    paths = {name: unpack_fixture(name, scratch) for name in RECORDED}
    paths["imported"] = scratch / "imported.gpuscope"
    import_trace(FIXTURES / "gpt_eager.torch_trace.json.gz", paths["imported"])
    tables = {}
    for name, path in paths.items():
        with Report.open(path) as report:
            tables[name] = [fn(report) for fn in stats_reports().values()]
    return tables


@pytest.mark.parametrize("width", WIDTHS)
def test_no_line_is_wider_than_the_width(every_table: dict[str, list[Table]], width: int) -> None:
    for name, tables in every_table.items():
        for table in tables:
            wide = [line for line in render([table], width).splitlines() if len(line) > width]
            assert not wide, f"{name} {table.name} at {width}: {wide[0]!r} is {len(wide[0])} wide"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_diagnosis_fits(every_table: dict[str, list[Table]], scratch: Path, monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    for name in ("cpu_train_small", "mlp_api"):
        with Report.open(scratch / f"{name}.gpuscope") as report:
            text = diagnosis_formats()["table"](diagnose(report))
        wide = [line for line in text.splitlines() if len(line) > width]
        assert not wide, f"analyze {name} at {width}: {wide[0]!r}"
        assert "Process " in text and "  Process " in text  # the notes are there, wrapped under the table


def test_the_wide_tables_were_tested(every_table: dict[str, list[Table]]) -> None:
    # the tables this file is about must have rows in some report, else the test above proves little
    with_rows = {t.name for tables in every_table.values() for t in tables if t.rows}
    assert {"roofline_sum", "cuda_kern_exec_sum", "op_sum", "layer_sum", "nvtx_gpu_proj_sum",
            "collective_sum", "rank_sum", "cpu_hotspots"} <= with_rows
    kern_exec = next(t for t in every_table["mlp_api"] if t.name == "cuda_kern_exec_sum")
    assert len(render([kern_exec], 2000).splitlines()[2]) > 250  # it is wide when given the room


def test_machine_formats_stay_whole(every_table: dict[str, list[Table]]) -> None:
    tables = every_table["mlp_api"]
    kern_exec = next(t for t in tables if t.name == "cuda_kern_exec_sum")
    longest = max((r[-1] for r in kern_exec.rows), key=len)
    assert len(longest) > 60 and longest in FORMATS["csv"](tables) and "KStdDev" in FORMATS["json"](tables)
    text = format_table(kern_exec, 80)
    assert longest not in text and "KStdDev" not in text.splitlines()[2]


def _wide_table() -> Table:
    columns = [Column("Time", "percent"), Column("Total Time", "ns"), Column("Avg", "ns"), Column("Med", "ns"),
               Column("Min", "ns"), Column("Max", "ns"), Column("StdDev", "ns"), Column("Name")]
    row = (12.5, 123_456_789_012, 1_234_567, 1_234_567, 1_234_567, 1_234_567, 1_234_567,
           "void at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>>(int, float*)")
    return Table("cuda_gpu_kern_sum", "Kernels", columns, [row])


def test_columns_go_in_the_stated_order_and_are_named() -> None:
    lines = format_table(_wide_table(), 80).splitlines()
    header = lines[2].split()
    assert header == ["Time", "Total", "Time", "Avg", "Med", "Min", "Name"]
    assert "Left out to fit 80 columns: StdDev, Max (csv and json have every column)." in lines[-1]
    name = lines[4].split("  ")[-1]
    assert "..." in name and name.startswith("void at::native") and name.endswith("(int, float*)")
    assert "123.457 s" in lines[4]  # numbers are never cut
    assert format_table(_wide_table(), 300).splitlines()[2].split()[-2:] == ["StdDev", "Name"]


def test_stats_prints_the_tables_with_rows_and_names_the_others(every_table: dict[str, list[Table]]) -> None:
    tables = every_table["cpu_train_small"]
    text = render_present(tables, 120)
    empty = [t.name for t in tables if not t.rows]
    assert "cuda_kern_exec_sum" in empty and "nvtx_sum" not in empty
    for t in tables:
        assert (f"({t.name})\n" in text) == bool(t.rows)
    tail = " ".join(text.split("\n\n")[-1].split())
    assert tail == f"Nothing to show in this report for {', '.join(empty)} (gpuscope stats -r NAME says why)."


def test_stats_command_fits_and_keeps_named_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from import_helpers import gpuscope_cli

    report = unpack_fixture("cpu_train_small", tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    every = gpuscope_cli("stats", str(report), cwd=tmp_path)
    named = gpuscope_cli("stats", str(report), "-r", "cuda_api_sum", cwd=tmp_path)
    assert every.returncode == 0 and max(len(line) for line in every.stdout.splitlines()) <= 80
    tail = " ".join(every.stdout.split("\n\n")[-1].split())
    assert "No CUDA API calls" not in every.stdout and "cuda_api_sum," in tail
    assert named.returncode == 0 and "No CUDA API calls in this report" in named.stdout

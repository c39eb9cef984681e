"""The end-of-run page, tables that fit, hotspots about the program's code, and advice that agrees
with the numbers, on recorded reports and small tables."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpuscope.analysis.cpu.summaries import HostSummary, cpu_hotspots, cpu_hotspots_lines
from gpuscope.analysis.cpu.profile import IMPORTS, SampleRate, rate_note, user_path
from gpuscope.analysis.table import Column, Table
from gpuscope.reporters import FORMATS
from gpuscope.reporters.terminal import elide, format_table
from gpuscope.run.summary import end_of_run
from gpuscope.trace.report import Report

LONG = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"


def test_a_table_fits_its_width_with_names_elided_in_the_middle_and_whole_in_csv() -> None:
    table = Table("t", "T", [Column("Time", "ns"), Column("GPU", "ns"), Column("Name")],
                  [(1000, None, LONG), (20, None, "short")], ["a note " * 30])
    text = format_table(table, width=70)
    assert max(len(line) for line in text.splitlines()) <= 70
    row = text.splitlines()[4]
    assert "void at::native::" in row and "1ul> >" in row and "..." in row  # both ends kept
    assert "GPU" not in text  # a column empty for every row is left out
    assert LONG in FORMATS["csv"]([table]) and LONG in FORMATS["json"]([table])
    assert elide("abcdefghij", 7) == "ab...ij" and elide("short", 7) == "short"
    assert format_table(Table("e", "Empty", [Column("Name")], [], ["nothing here"])) == "Empty (e)\n  nothing here\n"


def test_hotspot_stacks_drop_gpuscope_fold_libraries_and_put_imports_apart() -> None:
    user = ("step", "/home/me/train.py", 12)
    lib = ("__call__", "/venv/lib/python3.11/site-packages/torch/_ops.py", 800)
    own = ("_record", "/venv/lib/python3.11/site-packages/gpuscope/capture/python/torch_ops.py", 90)
    outer = ("<module>", "/home/me/train.py", 40)
    assert user_path([lib, own, lib, user, outer], libraries=False) == [user, outer]
    assert user_path([lib, own, lib, user, outer], libraries=True) == [lib, lib, user, outer]
    importing = ("_find_and_load", "<frozen importlib._bootstrap>", 1)
    assert user_path([lib, importing, outer], libraries=False) == [IMPORTS]
    assert user_path([lib], libraries=False) == [lib]  # no program frame: the library frame stays


def test_recorded_hotspots_rank_program_lines_by_cpu_time(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("cpu_balanced")) as r:
        lines = cpu_hotspots_lines(r).records()
        funcs = cpu_hotspots(r).records()
        with_libs = cpu_hotspots(r, libraries=True).records()
    assert [x["CPU Self"] for x in lines] == sorted((x["CPU Self"] for x in lines), reverse=True)
    assert all(x["CPU Self"] <= x["Wall Self"] + 1 for x in lines)  # CPU time never exceeds wall time
    assert not [x for x in funcs if "/gpuscope/" in x["File"]]
    assert not [x for x in funcs if "site-packages" in x["File"] and x["CPU Self"] > 0.05e9]  # folded
    assert [x for x in with_libs if "site-packages/torch" in x["File"]]  # shown with --libraries
    assert sum(1 for x in lines if x["Function"] == IMPORTS[0]) == 1
    assert abs(sum(x["Wall Self"] for x in funcs) - sum(x["Wall Self"] for x in with_libs)) < 1e6  # same time


def test_the_page_is_short_and_prints_no_empty_table(recorded: Callable[[str], Path]) -> None:
    cpu = end_of_run(recorded("cpu_balanced"), set(), diagnosis=True)
    gpu = end_of_run(recorded("program_mlp_adam"), set(), diagnosis=True)
    for page in (cpu, gpu):
        # lines wrap at the terminal's width (120 here) rather than run past it: a page of 40 long lines is about 50
        assert len(page.splitlines()) <= 50, page
        assert "  1. " in page and "Heaviest lines of the program" in page and "Imports and start-up, apart" in page
        assert "No " not in page  # no table that says it has nothing
    assert "Heaviest kernels" not in cpu and "add --trace cuda" not in cpu
    assert "Heaviest kernels" in gpu and "Heaviest layers" in gpu and "600 steps found" in " ".join(gpu.split())
    assert "Step time (step 4.28 ms" in gpu and "CPU step time" in cpu
    with_stats = end_of_run(recorded("cpu_balanced"), set(), diagnosis=True, stats=True)
    assert "(cuda_gpu_kern_sum)" in with_stats and "(host_sum)" in with_stats  # --stats prints every report


def test_core_advice_agrees_with_the_numbers_beside_it() -> None:
    idle = HostSummary(cores=2, process_cpu_percent=50, machine_cpu_percent=30, peak_rss_bytes=1e8,
                       max_threads=4, span_s=10)
    assert "under-using" in idle.advice()
    assert "under-using" not in HostSummary(2, 50, 30, 1e8, 4, span_s=0.14).advice()  # too short to say
    busy = HostSummary(2, 50, 97.5, 1e8, 4, span_s=10).advice()
    assert "under-using" not in busy and "other programs" in busy


def test_the_sampling_rate_is_stated_when_it_falls_short() -> None:
    assert rate_note([SampleRate(1, 1000.0, 990.0, 2_000_000)]) is None
    note = rate_note([SampleRate(7, 1000.0, 115.0, 230_000_000)])
    assert note is not None and "115/s of 1,000/s" in note and "230 ms" in note

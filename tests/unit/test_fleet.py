"""Many reports at once: the fleet summaries on DuckDB and on Dask give the same answers; a report
given twice counts once; reports of different runs keep their rows apart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from gpuscope.analysis.distributed.fleet.engines import parse_engine, run_dask, run_duckdb
from gpuscope.analysis.distributed.fleet.queries import QUERIES
from gpuscope.analysis.distributed.fleet.sources import open_sources, runs_differ
from gpuscope.errors import GpuscopeError
from rank_reports import MS, nccl_straggler


@pytest.fixture
def reports(tmp_path: Path) -> list[Path]:
    """Two nodes of one run (2 and 3 ranks) and a report of another program."""
    paths = [tmp_path / "node0.gpuscope", tmp_path / "node1.gpuscope", tmp_path / "other.gpuscope"]
    nccl_straggler(paths[0]).close()
    nccl_straggler(paths[1], load_ms=(1.0, 2.0, 3.0)).close()
    nccl_straggler(paths[2], command="eval.py").close()
    return paths


def test_duckdb_sums_kernels_across_reports(reports: list[Path], tmp_path: Path) -> None:
    said: list[str] = []
    sources = open_sources([str(p) for p in reports[:2]] + [str(reports[0])], tmp_path / "w", said.append)
    assert len(sources) == 2 and len(said) == 1 and "counted once" in said[0]
    assert runs_differ(sources) is None
    kern = run_duckdb(QUERIES["fleet_kern_sum"], sources, by_report=False)
    gemm = kern.set_index("name").loc["ampere_sgemm_128x64_nn"]
    assert gemm["instances"] == 5 * 6 and gemm["total"] == 5 * 6 * 3 * MS and gemm["processes"] == 5
    nccl = kern.set_index("name").filter(like="ncclDevKernel", axis=0).iloc[0]
    # node1's rank 0 waits 2 ms per step for rank 2, plus the 1 ms transfer: 3 ms per all-reduce
    assert nccl["most_process"] == 6 * int(4.4 * MS) and nccl["least_process"] == 6 * MS
    ranks = run_duckdb(QUERIES["fleet_rank_sum"], sources, by_report=False)
    assert sorted(ranks["rank"].tolist()) == [0, 0, 1, 1, 2] and set(ranks["collectives"]) == {6}


def test_reports_of_different_runs_are_kept_apart(reports: list[Path], tmp_path: Path) -> None:
    sources = open_sources([str(p) for p in reports], tmp_path / "w", lambda m: None)
    assert "different runs" in (runs_differ(sources) or "")
    kern = run_duckdb(QUERIES["fleet_kern_sum"], sources, by_report=True)
    assert set(kern["report"]) == {"node0", "node1", "other"} and len(kern) == 6


@pytest.mark.parametrize("by_report", [False, True])
def test_dask_gives_the_same_answers_as_duckdb(reports: list[Path], tmp_path: Path, by_report: bool) -> None:
    distributed = pytest.importorskip("distributed")
    sources = open_sources([str(p) for p in reports], tmp_path / "w", lambda m: None)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as client:
        for query in QUERIES.values():
            a = run_duckdb(query, sources, by_report)
            b = run_dask(query, sources, by_report, None, client)
            assert len(a) and list(a.columns) == list(b.columns)
            pd.testing.assert_frame_equal(a, b, check_dtype=False)


def test_engine_names_are_checked() -> None:
    assert parse_engine("duckdb") == ("duckdb", None)
    assert parse_engine("dask=tcp://h:8786") == ("dask", "tcp://h:8786")
    with pytest.raises(GpuscopeError):
        parse_engine("spark")


def _gpuscope(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_stats_of_a_directory_as_a_user_runs_it(reports: list[Path], tmp_path: Path) -> None:
    res = _gpuscope("stats", str(tmp_path), str(reports[0]), "-f", "csv", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "counted once" in res.stderr and "different runs" in res.stderr
    assert "# fleet_kern_sum" in res.stdout and "node1,ampere_sgemm_128x64_nn,18" in res.stdout
    bad = _gpuscope("stats", str(reports[0]), str(reports[1]), "--engine", "spark", cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--engine" in bad.stderr


def test_stats_on_dask_as_a_user_runs_it(reports: list[Path], tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    res = _gpuscope("stats", str(reports[0]), str(reports[1]), "--engine", "dask", "-r", "fleet_rank_sum",
                    "-f", "json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert '"Rank": 2' in res.stdout and "engine dask" in res.stdout

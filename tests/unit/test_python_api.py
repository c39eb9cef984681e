"""The Python API of a loaded report: the analyses of the commands as DataFrames with names
resolved, on a recorded CPU report and a recorded GPU report, and errors that name their cause
(the caller's SQL, against a damaged file)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from import_helpers import gpuscope_cli

import gpuscope
from gpuscope.analysis import STATS_REPORTS
from gpuscope.analysis.diagnosis.cpu_breakdown import CPU_PARTS
from gpuscope.analysis.diagnosis.breakdown import PARTS
from gpuscope.errors import GpuscopeError, QueryError, ReportError


def _no_ids(frame: pd.DataFrame) -> None:
    assert not [c for c in frame.columns if str(c).endswith("_id")], list(frame.columns)


def test_a_cpu_report_gives_its_steps_parts_samples_and_findings(recorded) -> None:
    path = recorded("cpu_dataloader_starved")
    with gpuscope.load(path) as r:
        steps, samples, findings, layers = r.steps(), r.samples(), r.findings(), r.layers()
        hot = r.stats("cpu_hotspots_lines")
        total_samples = r.sql("SELECT count(*), sum(weight_ns) FROM cpu_sample")[0]
    for frame in (steps, samples, findings, layers, hot):
        _no_ids(frame)
    # the parts of each step add up to the step, and the starved loop waits for its batches
    assert len(steps) >= 10 and set(CPU_PARTS) <= set(steps.columns)
    assert (steps[list(CPU_PARTS)].sum(axis=1) == steps["duration_ns"]).all()
    steady = steps[~steps["warmup"]]
    assert steady["cpu_data"].mean() > 0.4 * steady["duration_ns"].mean()
    # every sample, its thread's name and its places as text
    assert (len(samples), int(samples["weight_ns"].sum())) == (total_samples[0], int(total_samples[1]))
    assert samples["thread"].eq("MainThread").any() and samples["program_line"].str.contains(":").any()
    getitem = samples[samples["program_line"].str.contains("__getitem__")]
    assert len(getitem) and all(isinstance(s, tuple) and s for s in getitem["stack"])
    assert findings.loc[0, "rule"] == "data_loader" and 0 < findings.loc[0, "share"] <= 1
    assert isinstance(findings.loc[0, "evidence"], list) and findings.attrs["skipped"]
    assert {"DataLoader.__next__", "SGD.step"} <= set(layers["Name"])
    assert hot.attrs["name"] == "cpu_hotspots_lines" and "Wall Self (ns)" in hot.columns


def test_stats_frames_are_the_tables_of_gpuscope_stats(recorded) -> None:
    path = recorded("gemm_conv")
    with gpuscope.load(path) as r:
        frames = {name: r.stats(name) for name in ("cuda_gpu_kern_sum", "step_sum", "layer_sum")}
        kernels = r.kernels()
        with pytest.raises(GpuscopeError, match="unknown stats report 'kern_sum'; choose from cuda_gpu_kern_sum"):
            r.stats("kern_sum")
    cli = json.loads(gpuscope_cli("stats", str(path), *(a for n in frames for a in ("-r", n)), "-f", "json",
                                  cwd=path.parent).stdout)
    for name, frame in frames.items():
        rows = cli[name]["rows"]
        assert len(frame) == len(rows) and list(frame.columns) == list(rows[0] if rows else frame.columns)
        for got, want in zip(frame.to_dict("records"), rows):
            for column, value in want.items():
                if value is None:  # an empty cell: NaN in a column of numbers
                    assert got[column] is None or pd.isna(got[column]), (name, column)
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    assert got[column] == pytest.approx(value, rel=1e-3, abs=1), (name, column)
                else:
                    assert got[column] == value, (name, column)
    kern = frames["cuda_gpu_kern_sum"]
    assert set(kern["Name"]) == set(kernels["name"]) and kern["Total Time (ns)"].sum() == kernels["duration_ns"].sum()
    assert set(STATS_REPORTS) >= set(frames)


def test_a_gpu_report_gives_its_breakdown_per_step(recorded) -> None:
    with gpuscope.load(recorded("diagnosis_slow_dataloader")) as r:
        steps, findings = r.steps(), r.findings()
    assert set(PARTS) <= set(steps.columns) and len(steps) >= 5
    assert steps.attrs["parts"]["idle_data"] == "GPU idle: data loading"
    steady = steps[~steps["warmup"]]
    assert steady["idle_data"].mean() > 0.2 * steady["duration_ns"].mean()
    assert findings.loc[0, "rule"] == "data_loader" and findings.loc[0, "saving_ns"] > 0


def test_an_error_in_the_users_sql_is_named_so(recorded) -> None:
    with gpuscope.load(recorded("cpu_dataloader_starved")) as r:
        for query, duck in (("SELEC 1", "Parser Error"), ("SELECT nope FROM cpu_sample", "Binder Error")):
            for run in (r.sql, r.df):
                with pytest.raises(QueryError) as raised:
                    run(query)
                text = str(raised.value)
                assert text.startswith(f"error in the SQL query: {duck}") and "damaged" not in text, text
        assert r.sql("SELECT count(*) > 0 FROM cpu_sample")[0][0] is True


def test_a_damaged_file_still_says_damaged(recorded, tmp_path: Path) -> None:
    path = recorded("cpu_dataloader_starved")
    cut = tmp_path / "cut.gpuscope"
    data = path.read_bytes()
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(ReportError) as raised:
        with gpuscope.load(cut) as r:
            r.samples()
    assert not isinstance(raised.value, QueryError) and "damaged or truncated report" in str(raised.value)

"""Folding Python stacks to the program's own line, and the small pieces of the CPU-side diagnosis:
start-up's end, the wait workers hide, the split of steps into parts, samples carried back."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuscope.analysis.diagnosis.cpu_breakdown import CPU_PARTS, DATA, FORWARD, OPTIMIZER, OTHER, split_steps
from gpuscope.analysis.diagnosis.cpu_context import carry_back
from gpuscope.analysis.diagnosis.cpu_frames import classify, is_own, is_user, library_path, user_frame
from gpuscope.analysis.diagnosis.rules.data_loader import best_workers, hidden_wait
from gpuscope.analysis.diagnosis.cpu_steps import import_end, leading_warmup

SITE = "/home/u/.venv/lib/python3.11/site-packages"
TRAIN = "/home/u/proj/train.py"


@pytest.mark.parametrize("path, user", [
    (TRAIN, True),
    ("/home/u/gpuscope/examples/train.py", True),  # a checkout named gpuscope: the program's own
    (f"{SITE}/torch/utils/data/dataloader.py", False),
    ("/usr/lib/python3.11/json/decoder.py", False),
    ("<frozen importlib._bootstrap>", False),
    ("<string>", False),
    (f"{SITE}/gpuscope/capture/torch_hooks.py", False),
    ("/home/u/src/gpuscope/capture/torch_hooks.py", False),  # an editable install
    ("/home/u/src/gpuscope/annotation.py", False),
    ("/tmp/gpuscope-spool-x1/boot/sitecustomize.py", False),
])
def test_user_code_is_neither_library_stdlib_nor_gpuscope(path: str, user: bool) -> None:
    assert is_user(path) is user


def test_gpuscope_frames_are_its_own_wherever_installed() -> None:
    assert is_own("/opt/src/gpuscope/capture/sampler.py")
    assert is_own(f"{SITE}/gpuscope/analysis/steps.py")
    assert not is_own("/opt/gpuscope/train.py")


def test_library_frames_fold_into_the_first_user_frame() -> None:
    # innermost first: the Dataset's line, under torch's fetcher, gpuscope's wrapper and the loop
    stack = [
        ("__getitem__", "/home/u/proj/data.py", 21),
        ("<listcomp>", f"{SITE}/torch/utils/data/_utils/fetch.py", 54),
        ("fetch", f"{SITE}/torch/utils/data/_utils/fetch.py", 54),
        ("__next__", f"{SITE}/torch/utils/data/dataloader.py", 733),
        ("wrapper", "/home/u/src/gpuscope/capture/torch_hooks.py", 124),
        ("<module>", TRAIN, 40),
    ]
    info = classify(stack)
    assert info.user == ("__getitem__", "/home/u/proj/data.py", 21)
    assert info.caller == ("<module>", TRAIN, 40)
    assert info.fetching and not info.importing and not info.operator and not info.overhead
    # an operator under gpuscope's recorder, called from the model's forward
    op = classify([("__call__", f"{SITE}/torch/_ops.py", 875),
                   ("__torch_dispatch__", "/x/gpuscope/capture/torch_ops.py", 259),
                   ("forward", f"{SITE}/torch/nn/modules/linear.py", 134),
                   ("forward", "/home/u/proj/model.py", 12)])
    assert op.operator and op.user == ("forward", "/home/u/proj/model.py", 12)
    # gpuscope's own frame innermost: the cost of recording
    assert classify([("wrapper", "/x/gpuscope/capture/torch_hooks.py", 120), ("<module>", TRAIN, 3)]).overhead


def test_imports_and_stacks_without_program_code() -> None:
    imp = classify([("get_data", "<frozen importlib._bootstrap_external>", 1131),
                    ("<module>", f"{SITE}/torch/__init__.py", 1),
                    ("_find_and_load", "<frozen importlib._bootstrap>", 1176),
                    ("<module>", TRAIN, 1)])
    assert imp.importing and imp.user == ("<module>", TRAIN, 1)
    none = classify([("run", "/usr/lib/python3.11/threading.py", 975)])
    assert none.user is None and none.location == "(no program code)"
    assert user_frame([]) is None


def test_library_path_names_the_package_file() -> None:
    assert library_path(f"{SITE}/torch/nn/modules/linear.py") == "torch/nn/modules/linear.py"
    assert library_path("/usr/lib/python3.11/json/__init__.py") == "json/__init__.py"


def test_start_up_ends_where_imports_stop_dominating() -> None:
    ts = np.arange(1, 12, dtype=np.int64) * 100
    w = np.full(11, 100, dtype=np.int64)
    importing = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1], bool)  # a lazy import at the end
    assert import_end(ts, w, importing) == 400
    assert import_end(ts, w, np.zeros(11, bool)) is None


def test_leading_warmup_steps() -> None:
    assert leading_warmup([50, 30, 10, 10, 11, 10]) == 2
    assert leading_warmup([10, 10, 10]) == 0 and leading_warmup([]) == 0


@pytest.mark.parametrize("wait, rest, workers, cores, loop_cores, hidden", [
    (10.0, 20.0, 1, 0, 1.0, 10.0),  # a batch loads faster than the rest of the step: the whole wait
    (30.0, 10.0, 1, 0, 1.0, 10.0),  # one worker: a batch every 30, the step becomes 30
    (30.0, 10.0, 3, 0, 1.0, 30.0),
    (30.0, 10.0, 0, 0, 1.0, 0.0),
    (30.0, 10.0, 2, 2, 1.0, 20.0),  # two cores run 40 of work: the step becomes 20
    (12.0, 2.0, 2, 2, 1.5, 6.5),  # the loop keeps one core for its 3 of work; two cores run 15: 7.5
])
def test_hidden_wait(wait: float, rest: float, workers: int, cores: int, loop_cores: float, hidden: float) -> None:
    assert hidden_wait(wait, rest, workers, cores, loop_cores) == pytest.approx(hidden)


@pytest.mark.parametrize("load_cpu, hidden", [
    (None, 0.0),  # loading that computes: one usable core runs the loop and the loading in turn
    (20.0, 0.0),  # the same, said
    (1.0, 19.0),  # loading that waits (files, sleeps): a worker waits beside the loop; its 1 of CPU takes the core
    (10.0, 10.0),  # half of each: the core runs 30 + 10, the step becomes 40 instead of 50
])
def test_hidden_wait_counts_only_the_loadings_cpu_time_against_the_cores(load_cpu: float | None, hidden: float) -> None:
    # 20 of loading, 30 of the loop's own work, one core usable (the other busy with other programs)
    assert hidden_wait(20.0, 30.0, 1, 1.0, 1.0, load_cpu) == pytest.approx(hidden)


def test_best_workers_on_two_cores() -> None:
    assert best_workers(8.0, 10.0, 2, 2.0, 1.0) == (1, pytest.approx(8.0))  # min(8, cores - 1) hides it all
    assert best_workers(30.0, 10.0, 2, 2.0, 1.0)[0] == 2  # loading dominates: the loop's core too


def test_parts_add_up_and_the_first_in_priority_takes_a_piece() -> None:
    windows = pd.DataFrame({"step": [1, 2], "start_ns": [0, 100], "end_ns": [100, 250], "setup": [True, False]})
    ranges = pd.DataFrame({
        "start_ns": [0, 30, 40, 80, 110, 200],
        "end_ns": [30, 70, 50, 90, 260, 210],  # a forward that runs past the step's end
        "part": [DATA, FORWARD, FORWARD, OPTIMIZER, FORWARD, DATA],
    })
    steps = split_steps(windows, ranges, has_steps=True)
    parts = list(CPU_PARTS)
    assert (steps[parts].sum(axis=1) == steps["duration_ns"]).all()
    first, second = steps.iloc[0], steps.iloc[1]
    assert (first["cpu_data"], first["cpu_forward"], first["cpu_optimizer"], first["cpu_other"]) == (30, 40, 10, 20)
    assert (second["cpu_data"], second["cpu_forward"], second["cpu_other"]) == (10, 130, 10)
    assert OTHER == parts.index("cpu_other") and bool(first["warmup"])


def test_a_sample_that_spans_an_operator_start_is_split() -> None:
    samples = pd.DataFrame({"ts_ns": [1_000, 6_000], "pid": [1, 1], "stack_id": [7, 8], "weight_ns": [1_000, 5_000]})
    ops = pd.DataFrame({"start_ns": [5_000], "end_ns": [7_000], "name": ["aten::mm"], "shapes": ["[]"]})
    ranges = pd.DataFrame(columns=["start_ns", "end_ns", "part"])
    out = carry_back(samples, ranges, ops)
    assert out["weight_ns"].sum() == 6_000
    carried = out[out["ts_ns"] == 4_999].iloc[0]
    assert carried["stack_id"] == 7 and carried["weight_ns"] == 4_000  # the Python before the operator
    assert out[out["ts_ns"] == 6_000].iloc[0]["weight_ns"] == 1_000


def test_a_report_with_nothing_to_analyze(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from report_builder import ReportBuilder

    from gpuscope.analysis.diagnosis import diagnose
    from gpuscope.reporters import diagnosis_formats

    with ReportBuilder(tmp_path / "empty.gpuscope").open() as report:
        diag = diagnose(report)
    assert not diag.processes and not diag.findings
    assert any("no step time to break down" in n for n in diag.breakdown_table().notes)
    for render in diagnosis_formats().values():
        assert "no GPU operations" in render(diag)

"""The operations read in an order of their own without the launch-ordered table (op_rows): the same
rows, ids and types as the table read in that order, and the same order as numpy's lexsort."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from gpuscope.analysis.ops.attribution import OPS, _exists, ops_table, ordered_frame
from gpuscope.analysis.ops.rows import _lexsort, op_frame
from gpuscope.trace.report import Report

COLUMNS = {"op_id": "op_id", "kind": "enum_code(kind::ENUM('kernel', 'memcpy', 'memset', 'graph'))", "pid": "pid",
           "tid": "tid", "launch_ns": "launch_ns", "start_ns": "start_ns", "end_ns": "end_ns", "stream_id": "stream_id",
           "name_id": "name_id", "copy_kind": "copy_kind IS NOT NULL", "twice": "2 * end_ns"}


@pytest.mark.parametrize("seed", range(4))
def test_lexsort_of_runs_is_numpys(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 3000
    keys = [rng.integers(0, hi, n) for hi in (40, 3, 2, 5)]  # many ties on the first key, some on all
    want = np.lexsort(list(reversed(keys)))
    got, tied = _lexsort(keys, n)
    assert np.array_equal(got, want)
    assert tied  # 3000 rows of 1200 distinct keys
    assert np.array_equal(_lexsort(keys[:1], n)[0], np.argsort(keys[0], kind="stable"))
    got, tied = _lexsort([np.arange(n)[::-1], keys[1]], n)
    assert np.array_equal(got, np.arange(n)[::-1]) and not tied
    unique = [keys[0], keys[1], np.arange(n)]  # ties on the first keys, never on all
    got, tied = _lexsort(unique, n)
    assert np.array_equal(got, np.lexsort(list(reversed(unique)))) and not tied


@pytest.mark.parametrize("name", ["mlp_api", "dist4_fsdp", "program_custom_rnn_loop"])
@pytest.mark.parametrize("order", [("pid", "start_ns", "op_id"), ("pid", "start_ns", "end_ns", "op_id")])
def test_frame_is_the_tables_in_that_order(recorded: Callable[[str], Path], name: str, order: tuple[str, ...]) -> None:
    path = recorded(name)
    with Report.open(path) as report:
        got = op_frame(report, COLUMNS, order, {"kind": ("kernel", "memcpy", "memset", "graph")})
        assert not _exists(report, f"{OPS}_sorted")  # read without the table
        select = ", ".join(f"{sql} AS {c}" for c, sql in COLUMNS.items())
        want = ordered_frame(report, f"SELECT {select} FROM {ops_table(report)}", order,
                             {"kind": ("kernel", "memcpy", "memset", "graph")})
        assert _exists(report, f"{OPS}_sorted")
        again = op_frame(report, COLUMNS, order, {"kind": ("kernel", "memcpy", "memset", "graph")})  # the table now
    assert len(got) > 200
    assert got["op_id"].is_unique
    pd.testing.assert_frame_equal(got, want)
    pd.testing.assert_frame_equal(again, want)


def test_keys_read_but_not_selected_are_left_out(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("mlp_api")) as report:
        got = op_frame(report, {"pid": "pid", "kernel": "kind = 'kernel'"}, ("pid", "start_ns", "op_id"))
        want = report.df(f"SELECT pid, kind = 'kernel' AS kernel FROM {ops_table(report)} ORDER BY pid, start_ns, op_id")
    assert list(got.columns) == ["pid", "kernel"]
    pd.testing.assert_frame_equal(got, want)


def test_a_report_without_operations_gives_the_tables_empty_frame(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("cpu_preprocess_loop")) as report:
        assert not report.count("kernel")
        got = op_frame(report, {"pid": "pid", "kernel": "kind = 'kernel'", "op_id": "op_id"}, ("pid", "start_ns", "op_id"))
        want = report.df(f"SELECT pid, kind = 'kernel' AS kernel, op_id FROM {ops_table(report)}")
    assert len(got) == 0
    assert got.dtypes.to_dict() == want.dtypes.to_dict()


@pytest.mark.parametrize("most_tied", [0, 10**6])
def test_ties_on_the_first_keys_read_again_or_all_at_once(recorded: Callable[[str], Path], most_tied: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuscope.analysis.ops.rows as op_rows

    monkeypatch.setattr(op_rows, "MOST_TIED", most_tied)
    columns = {"pid": "pid", "start_ns": "start_ns", "kernel": "kind = 'kernel'", "end": "end_ns + 1"}
    with Report.open(recorded("dist4_fsdp")) as report:
        # every operation of a process ties on its pid: all of them are put in order by the later keys
        got = op_frame(report, columns, ("pid", "op_id"))
        by_start = op_frame(report, columns, ("pid", "start_ns", "op_id"))  # two operations tie there
        assert not _exists(report, f"{OPS}_sorted")
        want = report.df(f"SELECT pid, start_ns, kind = 'kernel' AS kernel, end_ns + 1 AS \"end\" FROM {ops_table(report)} "
                         "ORDER BY pid, op_id")
        want_start = report.df(f"SELECT pid, start_ns, kind = 'kernel' AS kernel, end_ns + 1 AS \"end\" "
                               f"FROM {ops_table(report)} ORDER BY pid, start_ns, op_id")
    assert got["pid"].nunique() == 4
    pd.testing.assert_frame_equal(got, want)
    pd.testing.assert_frame_equal(by_start, want_start)


def test_order_of_rows_in_order_is_none_with_lexsorts_ties() -> None:
    import numpy as np

    from gpuscope.analysis.ops.rows import _lexsort, _order

    rng = np.random.default_rng(3)
    first = np.sort(rng.integers(0, 50, 400))
    second = rng.integers(0, 1_000_000, 400)
    in_order = np.lexsort([second, first])
    cases = {
        "sorted, no ties": [first[in_order], second[in_order]],
        "sorted, a tie": [np.array([1, 2, 2, 3]), np.array([5, 7, 7, 9])],
        "shuffled": [first, second],
        "one key out of order across a step": [np.array([1, 2, 3, 2, 4])],
    }
    for name, keys in cases.items():
        n = len(keys[0])
        want, want_tied = _lexsort(keys, n)
        for step in (1, 2, 3, 1 << 20):
            at, tied = _order(keys, n, step=step)
            assert tied == want_tied, name
            assert np.array_equal(np.arange(n) if at is None else at, want), name
            assert (at is None) == np.array_equal(want, np.arange(n)), name


@pytest.mark.parametrize("name", ["mlp_api", "dist4_fsdp", "program_custom_rnn_loop", "diagnosis_pageable_copy"])
def test_compact_frame_holds_the_same_values(recorded: Callable[[str], Path], name: str) -> None:
    """Read compact, the operations are the same rows with the same values; ids as 32-bit integers
    where they fit, and a column of one value viewed for every row."""
    narrow = ("op_id", "pid", "tid")
    with Report.open(recorded(name)) as report:
        want = op_frame(report, COLUMNS, ("pid", "start_ns", "op_id"), {"kind": ("kernel", "memcpy", "memset", "graph")})
        got = op_frame(report, COLUMNS, ("pid", "start_ns", "op_id"), {"kind": ("kernel", "memcpy", "memset", "graph")},
                       compact=narrow)
    assert list(got.columns) == list(want.columns) and len(got) == len(want) > 200
    for c in want.columns:
        if c in narrow and want[c].dtype.kind == "i":
            assert np.dtype(getattr(got[c].dtype, "numpy_dtype", got[c].dtype)) == np.int32, c  # Int32 where nullable
        a, b = got[c].astype(want[c].dtype), want[c]
        pd.testing.assert_series_equal(a, b, check_exact=True)
    pids = got["pid"].to_numpy()
    assert (pids.strides == (0,)) == (want["pid"].nunique() == 1)

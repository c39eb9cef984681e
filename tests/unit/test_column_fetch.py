"""A query's result read in chunks (column_fetch): the arrays fetchnumpy() gives, whatever the chunk
size and however many rows were said to come; the rows kept by a filter read chunk by chunk; and the
check that rows are already in order (op_rows.in_order) at every chunk boundary."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from gpuscope.analysis import column_fetch
from gpuscope.analysis.column_fetch import fetch_arrays, kept_rows
from gpuscope.analysis.ops.rows import in_order
from gpuscope.trace.report import Report

# 5,000 rows: NULLs only in the third DuckDB vector of one column, in every vector of another
QUERY = """SELECT range AS i, (range % 7)::INTEGER AS small, range % 2 = 0 AS even,
                  CASE WHEN range = 4500 THEN NULL ELSE range * 3 END AS late_null,
                  CASE WHEN range % 3 = 0 THEN NULL ELSE range % 5 = 0 END AS maybe,
                  (range % 200)::UTINYINT AS tiny
           FROM range(5000)"""


def _same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert list(got) == list(want)
    for name in want:
        a, b = got[name], want[name]
        assert type(a) is type(b), name
        assert a.dtype == b.dtype, name
        assert np.array_equal(np.ma.getmaskarray(a), np.ma.getmaskarray(b)), name
        assert np.array_equal(np.ma.filled(a, 0), np.ma.filled(b, 0)), name


@pytest.mark.parametrize("rows", [0, 100, 5000, 9000])
def test_chunks_give_fetchnumpys_arrays(mlp_api: Report, rows: int) -> None:
    want = mlp_api.con.execute(QUERY).fetchnumpy()
    assert isinstance(want["late_null"], np.ma.MaskedArray) and isinstance(want["maybe"], np.ma.MaskedArray)
    # one vector (2,048 rows) a chunk: the NULL of late_null comes in the third
    _same(fetch_arrays(mlp_api, QUERY, rows=rows, vectors=1), want)
    _same(fetch_arrays(mlp_api, QUERY, rows=rows), want)  # one chunk
    small = f"SELECT * FROM ({QUERY}) WHERE i < ?"
    _same(fetch_arrays(mlp_api, small, [10], rows=rows, vectors=1), mlp_api.con.execute(small, [10]).fetchnumpy())


def test_no_rows_and_texts_as_fetchnumpy_gives_them(mlp_api: Report) -> None:
    for sql in (f"SELECT * FROM ({QUERY}) WHERE i < 0", "SELECT range AS i, 'x' || range AS t FROM range(3000)"):
        want = mlp_api.con.execute(sql).fetchnumpy()
        got = fetch_arrays(mlp_api, sql, rows=10, vectors=1)
        assert list(got) == list(want) and all(got[c].dtype == want[c].dtype for c in want)
        assert all(np.array_equal(got[c], want[c]) for c in want)


def test_kept_rows_are_those_of_the_filter(mlp_api: Report) -> None:
    sql = "SELECT range AS i, range % 11 AS r FROM range(7000)"
    got = kept_rows(mlp_api, sql, lambda part: part["r"] < 3, vectors=1)
    assert got is not None
    want = mlp_api.con.execute(sql).fetchnumpy()
    keep = want["r"] < 3
    assert np.array_equal(got["i"], want["i"][keep]) and np.array_equal(got["r"], want["r"][keep])
    assert got["i"].dtype == want["i"].dtype
    assert kept_rows(mlp_api, QUERY, lambda part: part["i"] >= 0, vectors=1) is None  # NULLs: read otherwise
    none = kept_rows(mlp_api, f"{sql} WHERE range < 0", lambda part: part["r"] < 3)
    assert none is not None and len(none["i"]) == 0 and none["i"].dtype == want["i"].dtype


@pytest.mark.parametrize("name", ["diagnosis_sync_d2h", "dist4_fsdp"])
def test_operations_read_in_small_chunks_are_the_same(recorded: Callable[[str], Path], name: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.analysis.diagnosis.timeline import load_ops
    from gpuscope.analysis.steps.from_pattern import _gpu_tokens
    from gpuscope.analysis.distributed.summaries import timed_collectives

    path = recorded(name)
    with Report.open(path) as report:
        ops, tokens, coll = load_ops(report), _gpu_tokens(report), timed_collectives(report)
    monkeypatch.setattr(column_fetch, "VECTORS", 1)  # 2,048 rows a chunk
    with Report.open(path) as report:
        assert len(ops) > 3 * 2048
        pd.testing.assert_frame_equal(load_ops(report), ops)
        pd.testing.assert_frame_equal(_gpu_tokens(report), tokens)
        pd.testing.assert_frame_equal(timed_collectives(report), coll)  # the compute kernels near them, kept by chunk
    assert name != "dist4_fsdp" or coll["overlap_ns"].gt(0).any()


@pytest.mark.parametrize("seed", range(4))
def test_in_order_at_every_chunk_boundary(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    keys = [np.sort(rng.integers(0, 5, n)), rng.integers(0, 3, n)]
    at = np.lexsort(list(reversed(keys)))
    ordered = [k[at] for k in keys]
    for step in (1, 3, 7, 100):
        assert in_order(ordered, n, step)
        for i in range(n - 1):  # any pair put out of order is seen, whichever chunk it falls in
            if (ordered[0][i], ordered[1][i]) != (ordered[0][i + 1], ordered[1][i + 1]):
                swapped = [k.copy() for k in ordered]
                for k in swapped:
                    k[i], k[i + 1] = k[i + 1], k[i]
                assert not in_order(swapped, n, step)
    assert in_order([], n) and in_order([np.zeros(1, np.int64)], 1)


# columns of one value, of NULL, of values past 32 bits first or only late, of NULLs first or late
COMPACT = """SELECT range AS i, 7 AS one, CAST(NULL AS BIGINT) AS none, range % 2 = 0 AS even, TRUE AS yes,
                    CASE WHEN range > 4500 THEN range * 10000000000 ELSE range END AS late_wide,
                    -range * 10000000000 AS wide, CASE WHEN range < 100 THEN NULL ELSE 7 END AS early_null,
                    CASE WHEN range > 4900 THEN NULL ELSE 7 END AS late_null, CASE WHEN range < 3000 THEN 3 ELSE 4 END AS
                    two, (range % 7)::INTEGER AS small
             FROM range(5000)"""


@pytest.mark.parametrize("vectors", [1, 256])
@pytest.mark.parametrize("rows", [0, 5000, 9000])
def test_compact_arrays_hold_fetchnumpys_values(mlp_api: Report, vectors: int, rows: int) -> None:
    want = mlp_api.con.execute(COMPACT).fetchnumpy()
    got = fetch_arrays(mlp_api, COMPACT, rows=rows, vectors=vectors, compact=list(want))
    assert list(got) == list(want)
    for name in want:
        a, b = got[name], want[name]
        assert type(a) is type(b), name
        assert np.array_equal(np.ma.getmaskarray(a), np.ma.getmaskarray(b)), name
        assert np.array_equal(np.ma.compressed(a), np.ma.compressed(b)), name
    # one value (or NULL) everywhere: that value viewed for every row, no memory of its own
    for name in ("one", "none", "yes"):
        assert np.ma.getdata(got[name]).strides == (0,), name
    assert np.ma.getmaskarray(got["none"]).strides == (0,)
    # 64-bit integers as 32-bit where every value fits, as they came where one does not
    assert got["i"].dtype == np.int32 and got["two"].dtype == np.int32
    assert got["late_wide"].dtype == np.int64 and got["wide"].dtype == np.int64
    assert got["small"].dtype == np.int32 and got["even"].dtype == bool
    # only the columns named are narrowed
    assert fetch_arrays(mlp_api, COMPACT, rows=rows, vectors=vectors, compact=[])["i"].dtype == np.int64

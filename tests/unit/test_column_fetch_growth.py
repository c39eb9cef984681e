"""A result larger than the rows said to come (column_fetch's ``rows``): the arrays grow, as often as
needed, and come out whole, equal to ``fetchnumpy()``'s, with or without ``compact``."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscope.analysis.column_fetch import _Compact, _Filled, fetch_arrays
from gpuscope.trace.report import Report

# 9,000 rows (five vectors): a mask begun in the first vector and grown with its column, one begun
# only after the arrays have grown, and a column past 32 bits only in the last vector
QUERY = """SELECT range AS i, CASE WHEN range < 10 THEN NULL ELSE range % 13 END AS early_null,
                  CASE WHEN range = 8500 THEN NULL ELSE range = 7 END AS late_null,
                  CASE WHEN range > 8200 THEN range * 10000000000 ELSE range END AS late_wide,
                  (range % 3)::SMALLINT AS small, 5 AS one
           FROM range(9000)"""


def _same(got: dict[str, np.ndarray], want: dict[str, np.ndarray], compact: bool) -> None:
    assert list(got) == list(want)
    for name in want:
        a, b = got[name], want[name]
        assert type(a) is type(b), name
        assert len(a) == len(b) == 9000, name
        if not compact:
            assert a.dtype == b.dtype, name
        assert np.array_equal(np.ma.getmaskarray(a), np.ma.getmaskarray(b)), name
        assert np.array_equal(np.ma.filled(a, 0), np.ma.filled(b, 0)), name


@pytest.mark.parametrize("rows", [0, 1, 2048, 3000])
@pytest.mark.parametrize("compact", [False, True])
def test_more_rows_than_said_come_whole(mlp_api: Report, rows: int, compact: bool) -> None:
    want = mlp_api.con.execute(QUERY).fetchnumpy()
    got = fetch_arrays(mlp_api, QUERY, rows=rows, vectors=1, compact=list(want) if compact else None)
    _same(got, want, compact)


@pytest.mark.parametrize("kind", [_Filled, _Compact])
def test_growth_keeps_rows_and_masks(kind: type) -> None:
    out = _Filled(3) if kind is _Filled else _Compact(3, ["a"])
    parts = [{"a": np.arange(i * 4, i * 4 + 4, dtype=np.int64),
              "b": np.ma.MaskedArray(np.full(4, i, dtype=np.int64), mask=[i == 0, False, False, i == 2])}
             for i in range(3)]
    for part in parts:
        out.add(part)
    assert out.cap >= out.n == 12
    got = out.arrays()
    assert np.array_equal(got["a"], np.arange(12))
    assert np.array_equal(np.ma.getmaskarray(got["b"]), [True] + [False] * 9 + [False, True])
    assert np.array_equal(np.ma.getdata(got["b"])[~np.ma.getmaskarray(got["b"])],
                          np.concatenate([p["b"].compressed() for p in parts]))

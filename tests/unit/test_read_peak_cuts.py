"""The smaller-peak forms of the operations' read and of the breakdown's piece times give the values
of the plain forms: ties found a batch at a time, gathers by 32-bit positions, piece ends shared
with the operations' starts only where they are the same."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscope.analysis.diagnosis.breakdown import _piece_times
from gpuscope.analysis.ops.rows import _gather, _lexsort, _tied


@pytest.mark.parametrize("n", [2, 3, 7, 64, 65])
def test_ties_by_batches_as_of_the_whole_key(n: int) -> None:
    rng = np.random.default_rng(n)
    key = rng.integers(0, max(2, n // 3), n)
    at = np.argsort(key, kind="stable")
    first = key[at]
    for step in (1, 2, 5, 1 << 20):
        assert np.array_equal(_tied(key, at, step), first[1:] == first[:-1])


def test_lexsort_order_and_ties_unchanged() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 5, 200), rng.integers(0, 1000, 200)
    at, tied = _lexsort([a, b], 200)
    assert np.array_equal(at, np.lexsort([b, a]))
    assert tied == bool((np.diff(np.stack([a, b])[:, np.lexsort([b, a])], axis=1) == 0).all(axis=0).any())


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.float64, bool])
def test_gather_by_32_bit_positions(dtype: type) -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(-2**40 if dtype in (np.int64, np.float64) else 0, 2, 101).astype(dtype)
    at = rng.permutation(101)
    for step in (1, 7, 1 << 20):
        got = _gather(a, at.astype(np.int32), step)
        assert got.dtype == a.dtype and np.array_equal(got, a[at])


def test_gather_of_a_masked_array_keeps_its_mask() -> None:
    a = np.ma.MaskedArray(np.arange(10, dtype=np.int32), mask=[i % 3 == 0 for i in range(10)])
    at = np.array([9, 3, 1, 0, 2, 8, 7, 6, 5, 4], dtype=np.int32)
    got = _gather(a, at, 4)
    want = a[at]
    assert np.array_equal(np.ma.getdata(got), np.ma.getdata(want))
    assert np.array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(want))


def _cuts_and_positions() -> tuple[np.ndarray, np.ndarray]:
    cuts = np.array([0, 5, 9, 20, 2**40, 2**40 + 3, 2**41, 2**41 + 8], dtype=np.int64)
    return cuts, np.array([0, 2, 3, 5, 6])


def test_piece_ends_shared_with_the_starts_they_equal() -> None:
    cuts, at = _cuts_and_positions()
    like = cuts[at + 1].copy()
    starts, ends = _piece_times(cuts.copy(), at.copy(), step=2, like=like)
    assert np.array_equal(starts, cuts[at]) and np.array_equal(ends, like)
    assert np.shares_memory(ends, like) and not ends.flags.writeable


@pytest.mark.parametrize("wrong", [0, 2, 4])
def test_piece_ends_made_where_one_differs(wrong: int) -> None:
    cuts, at = _cuts_and_positions()
    like = cuts[at + 1].copy()
    like[wrong] += 1
    starts, ends = _piece_times(cuts.copy(), at.copy(), step=2, like=like)
    assert np.array_equal(starts, cuts[at]) and np.array_equal(ends, cuts[at + 1])
    assert not np.shares_memory(ends, like) and ends.dtype == np.int64


def test_piece_times_without_like_or_pieces() -> None:
    cuts, at = _cuts_and_positions()
    starts, ends = _piece_times(cuts.copy(), at.copy(), step=2)
    assert np.array_equal(starts, cuts[at]) and np.array_equal(ends, cuts[at + 1])
    starts, ends = _piece_times(cuts.copy(), np.zeros(0, np.int64), like=np.zeros(3, np.int64))
    assert len(starts) == 0 and len(ends) == 0

"""Times held once where the operations and the idle pieces between them share them
(sorted_arrays.share_piece_starts, shared_if_equal), ids of few values held as the smallest integers
that fit them (timeline._narrowed), and the operations' own time as 32-bit integers where every
operation is short enough (breakdown._longest): the values are the same, only the memory changes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuscope.analysis.diagnosis.breakdown import _longest
from gpuscope.analysis.diagnosis.sorted_arrays import share_piece_starts, shared_if_equal
from gpuscope.analysis.diagnosis.timeline import _narrowed


def _frames(n: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    start = np.cumsum(rng.integers(5, 50, n)).astype(np.int64) + 10**18
    end = start + rng.integers(1, 4, n)  # each operation ends before the next starts: a gap before each
    ops = pd.DataFrame({"op_id": np.arange(1, n + 1), "start_ns": start, "end_ns": end})
    idle = pd.DataFrame({"start_ns": np.concatenate([[start[0] - 7], end[:-1]]), "end_ns": start.copy(),
                         "cause": pd.Categorical(["idle_launch"] * n)})
    return ops, idle


@pytest.mark.parametrize("step", [1, 3, 1 << 18])
def test_piece_starts_and_operation_ends_share_one_array(step: int) -> None:
    ops, idle = _frames(50, 0)
    want_ops, want_idle = ops.copy(), idle.copy()
    assert share_piece_starts(ops, idle, step)
    pd.testing.assert_frame_equal(ops, want_ops)
    pd.testing.assert_frame_equal(idle, want_idle)
    assert np.shares_memory(ops["end_ns"].to_numpy(), idle["start_ns"].to_numpy())
    assert not ops["end_ns"].to_numpy().flags.writeable


@pytest.mark.parametrize("where", [1, 25, 49])
def test_a_piece_that_starts_elsewhere_keeps_its_own_array(where: int) -> None:
    ops, idle = _frames(50, 1)
    idle.loc[where, "start_ns"] += 1  # not where the operation before it ended
    want_ops, want_idle = ops.copy(), idle.copy()
    assert not share_piece_starts(ops, idle, 4)
    pd.testing.assert_frame_equal(ops, want_ops)
    pd.testing.assert_frame_equal(idle, want_idle)
    assert not np.shares_memory(ops["end_ns"].to_numpy(), idle["start_ns"].to_numpy())
    ops, idle = _frames(50, 2)
    assert not share_piece_starts(ops, idle.iloc[1:].reset_index(drop=True))  # one piece fewer than operations


def test_shared_if_equal_gives_the_column_only_where_equal() -> None:
    column = np.arange(10, dtype=np.int64) * 3
    same = shared_if_equal(column.copy(), column, step=3)
    assert np.shares_memory(same, column) and not same.flags.writeable
    other = column.copy()
    other[9] += 1
    assert shared_if_equal(other, column, step=3) is other
    assert shared_if_equal(column[:5].copy(), column) is not column


def test_small_ids_as_the_smallest_integers_they_fit() -> None:
    def plain(values: list[int], dtype: str = "int32") -> pd.Series:
        return pd.Series(np.array(values, dtype=dtype))

    assert _narrowed(plain([3, 7, -2]), smallest=True).dtype == np.int8
    assert _narrowed(plain([3, 700]), smallest=True).dtype == np.int16
    assert _narrowed(plain([3, 70_000]), smallest=True).dtype == np.int32
    wide = plain([3, 2**40], "int64")
    assert _narrowed(wide, smallest=True) is wide
    assert _narrowed(plain([3, 7], "int64")).dtype == np.int32  # without smallest: 32 bits, as before
    nullable = pd.Series(pd.array([5, None, 120], dtype="Int32"))
    got = _narrowed(nullable, smallest=True)
    assert got.dtype == "Int8" and got.isna().tolist() == [False, True, False]
    assert got.fillna(-1).to_numpy(np.int64).tolist() == [5, -1, 120]
    for values in ([3, 7, -2], [3, 700], [3, 70_000]):
        assert _narrowed(plain(values), smallest=True).tolist() == values


def test_longest_operation() -> None:
    start = np.array([0, 10, 20, 30], dtype=np.int64)
    end = np.array([5, 2**31 + 10, 25, 29], dtype=np.int64)
    assert _longest(start, end) == 2**31
    assert _longest(start[:1], end[:1]) == 5
    assert _longest(start[3:], end[3:]) == 0  # an end before its start counts as no time
    assert _longest(start[:0], end[:0]) == 0

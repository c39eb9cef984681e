"""The operations of the diagnosis read in start order without a sort where they come in it, and the breakdown's sorts of mostly
ordered times: each the same as the one-shot way it replaced (DuckDB's ORDER BY, a quicksort)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from gpuscope.analysis.diagnosis.breakdown import PARTS
from gpuscope.analysis.diagnosis.sorted_arrays import sorted_copy as _sorted, sorted_unique as _sorted_unique
from gpuscope.analysis.diagnosis.context import STEADY_COLUMNS, Context
from gpuscope.analysis.diagnosis.steady_work import WORK_COLUMNS, steady_work
from gpuscope.analysis.ops.attribution import ordered_frame
from gpuscope.analysis.diagnosis.timeline import _NARROW, _SMALL, _START_ORDER, KINDS, _ops_query, load_ops
from gpuscope.analysis.steps.from_pattern import _TOKEN_ORDER, _gpu_tokens, _tokens_query
from gpuscope.trace.report import Report


class _Report:
    """A report over one frame: the query is the frame, its columns read as DuckDB's ``fetchnumpy()``
    gives them (masked arrays for nullable columns), and ``df`` of ``... ORDER BY keys`` sorts it."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame, self.ordered, self.reads = frame, 0, 0
        self.con = self
        self.selected: list[str] = []

    @contextlib.contextmanager
    def deadline(self) -> Iterator[None]:
        yield

    @property
    def description(self) -> list[tuple[str, str]]:
        types = {"i": "BIGINT", "u": "UTINYINT", "b": "BOOLEAN"}
        return [(c, types.get(self.frame[c].dtype.kind, "VARCHAR")) for c in self.frame.columns]

    def execute(self, query: str) -> _Report:
        assert " ORDER BY " not in query
        if query.startswith("SELECT current_setting"):
            self.selected = []
        elif not query.endswith("LIMIT 0"):
            self.selected = [c.strip().strip('"') for c in query[len("SELECT "):].split(" FROM ")[0].split(",")]
        return self

    def fetchone(self) -> tuple[bool]:
        return (True,)

    def fetchnumpy(self) -> dict[str, np.ndarray]:
        self.reads += 1
        out: dict[str, np.ndarray] = {}
        for c in self.selected:
            col = self.frame[c]
            if isinstance(col.dtype, pd.api.extensions.ExtensionDtype) and col.dtype.kind in "iub":
                out[c] = np.ma.MaskedArray(col.to_numpy(col.dtype.numpy_dtype, na_value=0), mask=col.isna().to_numpy())
            else:
                out[c] = col.to_numpy()
        return out

    def df(self, query: str) -> pd.DataFrame:
        self.ordered += 1
        keys = [k.strip() for k in query.split(" ORDER BY ")[1].split(",")]
        return self.frame.sort_values(keys, na_position="last").reset_index(drop=True)


KIND = ("kernel", "memcpy", "memset", "graph")


def _frame(rng: np.random.Generator, n: int) -> pd.DataFrame:
    start = np.sort(rng.integers(0, 50, n))  # ties on start and end, which op_id settles
    tid = pd.array(rng.integers(1, 9, n), dtype="Int64")
    tid[rng.random(n) < 0.3] = pd.NA
    return pd.DataFrame({"op_id": rng.permutation(n) + 1, "pid": rng.integers(1, 3, n), "start_ns": start,
                         "end_ns": start + rng.integers(0, 3, n), "tid": tid, "exact": rng.random(n) < 0.5,
                         "kind": rng.integers(0, len(KIND), n).astype(np.uint8)})


def _as_df(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as ``report.df`` of an ENUM ``kind`` gives it."""
    return frame.assign(kind=pd.Categorical.from_codes(frame["kind"].to_numpy(np.int8),
                                                       dtype=pd.CategoricalDtype(list(KIND), ordered=True)))


@pytest.mark.parametrize("seed", range(4))
def test_start_order_is_the_sorted_frame(seed: int) -> None:
    frame = _frame(np.random.default_rng(seed), 500)
    want = _as_df(frame.sort_values(list(_START_ORDER)).reset_index(drop=True))
    report = _Report(frame)
    got = ordered_frame(report, "q", _START_ORDER, {"kind": KIND})  # type: ignore[arg-type]
    pd.testing.assert_frame_equal(got, want)
    assert report.ordered == 0  # put in order in numpy, not by the query
    assert report.reads == 1 + len(frame.columns) - len(_START_ORDER)  # the keys, then each other column
    in_order = _Report(frame.sort_values(list(_START_ORDER)).reset_index(drop=True))
    got = ordered_frame(in_order, "q", _START_ORDER, {"kind": KIND})  # type: ignore[arg-type]
    pd.testing.assert_frame_equal(got, want)
    assert in_order.ordered == 0


def test_start_order_leaves_nulls_and_texts_to_the_query() -> None:
    frame = _frame(np.random.default_rng(0), 20)
    nulls = frame.assign(end_ns=frame["end_ns"].astype("Int64"))
    nulls.loc[3, "end_ns"] = pd.NA
    report = _Report(nulls)
    got = ordered_frame(report, "q", _START_ORDER, {"kind": KIND})  # type: ignore[arg-type]
    assert report.ordered == 1  # DuckDB's order, NULLs and all
    assert sorted(got["op_id"]) == sorted(frame["op_id"])
    assert got["kind"].dtype == pd.CategoricalDtype(list(KIND), ordered=True)
    texts = _Report(frame.assign(name=[f"k{i}" for i in range(len(frame))]))
    got = ordered_frame(texts, "q", _START_ORDER)  # type: ignore[arg-type]
    assert texts.ordered == 1  # a column of texts: read by DuckDB
    assert got["name"].tolist() == [f"k{i}" for i in frame.sort_values(list(_START_ORDER)).index]


# reports whose operations come from the table out of start order (copies, several streams and
# processes), and one in order
@pytest.mark.parametrize("name", ["diagnosis_sync_item", "dist4_fsdp", "mlp_api"])
def test_loaded_operations_match_the_ordered_query(recorded: Callable[[str], Path], name: str) -> None:
    with Report.open(recorded(name)) as report:
        ops = load_ops(report)
        want = report.df(_ops_query(report) + f" ORDER BY {', '.join(_START_ORDER)}")
        tokens = _gpu_tokens(report)  # the repeating-pattern steps' tokens, read the same way
        ordered = report.df(_tokens_query(report) + f" ORDER BY {', '.join(_TOKEN_ORDER)}").drop(columns="op_id")
    assert len(ops) == len(want) > 0
    for col in want.columns:
        if col == "kind":
            assert ops[col].astype(str).tolist() == [KINDS[int(k)] for k in want[col]]
        else:
            # the same values; ids that fit 32 bits as 32-bit integers, ids of few values as the smallest
            # integers they fit (timeline._narrowed)
            pd.testing.assert_series_equal(ops[col], want[col], check_names=True, check_dtype=False)
            got, wanted = ops[col].dtype, want[col].dtype
            assert got == wanted or (col in _NARROW and str(got).lower() == "int32" and str(wanted).lower() == "int64") or (
                col in _SMALL and str(got).lower() in ("int8", "int16") and str(wanted).lower() in ("int32", "int64"))
    pd.testing.assert_frame_equal(tokens, ordered)


@pytest.mark.parametrize("seed", range(3))
def test_sorts_of_mostly_ordered_times_give_the_same_values(seed: int) -> None:
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.integers(0, 10**9, 20_000))
    ends = starts + rng.integers(0, 10**5, len(starts))  # mostly, not quite, in order
    for values in (starts, ends, np.concatenate([starts, ends]), rng.permutation(ends)):
        assert np.array_equal(_sorted(values), np.sort(values))
        assert np.array_equal(_sorted_unique(values), np.unique(values))


def test_steady_work_without_operators_has_empty_work_columns(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("mlp_default")) as report:
        assert not report.count("torch_op")
        ctx = Context(report)
        (p, *_) = ctx.processes
        k = steady_work(ctx, p)
    assert len(k)
    for col in WORK_COLUMNS:
        assert k[col].isna().all()
        assert k[col].dtype == (np.float64 if col in ("flops", "matrix_flops", "bytes") else object)


@pytest.mark.parametrize("name", ["program_bmm_loop", "diagnosis_first_compile", "dist4_fsdp"])
def test_steady_kernels_are_the_sorted_selection(recorded: Callable[[str], Path], name: str) -> None:
    with Report.open(recorded(name)) as report:
        ctx = Context(report)
        for p in ctx.processes:
            ops = ctx.ops(p)
            want = ops[(ops["kind"] == "kernel") & (ops["steady_ns"] > 0)].sort_values("start_ns")[list(STEADY_COLUMNS)]
            kern, step = ctx.steady_kernels(p)
            assert len(kern) > 0
            pd.testing.assert_frame_equal(kern.reset_index(drop=True), want.reset_index(drop=True))
            assert np.array_equal(kern.index.to_numpy(), want.index.to_numpy())
            assert len(step) == len(kern)


@pytest.mark.parametrize("name", ["diagnosis_first_compile", "diagnosis_sync_item"])
def test_steady_idle_is_the_selection_of_steady_pieces(recorded: Callable[[str], Path], name: str) -> None:
    with Report.open(recorded(name)) as report:
        (p, *_) = Context(report).processes
    idle = p.breakdown.idle
    warm = p.breakdown.steps["warmup"].to_numpy(bool)
    rows = np.flatnonzero(~warm) if (~warm).any() else np.arange(len(warm))
    want = idle[idle["window"].isin(rows)]
    got = p.steady_idle
    assert len(got) == len(want) > 0
    assert got["cause"].astype(str).tolist() == want["cause"].astype(str).tolist()
    assert set(got["cause"].astype(str)) <= set(PARTS)
    assert (got["ns"] == want["end_ns"] - want["start_ns"]).all()
    for cause in set(got["cause"].astype(str)):  # the comparisons the rules make
        assert ((got["cause"] == cause).to_numpy() == (want["cause"].astype(str) == cause).to_numpy()).all()


# copies of every direction, CUDA graphs, several processes and streams
@pytest.mark.parametrize("name", ["mlp_api", "cuda_graph", "dist4_fsdp", "diagnosis_pageable_copy",
                                  "program_dataloader_and_sync"])
def test_tokens_from_the_loaded_operations_are_those_read(recorded: Callable[[str], Path], name: str) -> None:
    from gpuscope.analysis.steps.from_pattern import given_operations, tokens_of

    with Report.open(recorded(name)) as report:
        ops = load_ops(report)
        want = _gpu_tokens(report)
        with given_operations(report, ops):
            given = _gpu_tokens(report)
        after = _gpu_tokens(report)
    assert len(want) == len(ops) > 0
    assert (want["token"] < -1).any() or name == "dist4_fsdp"  # copies or graphs among the tokens
    pd.testing.assert_frame_equal(tokens_of(ops), want)
    pd.testing.assert_frame_equal(given, want)
    pd.testing.assert_frame_equal(after, want)

"""The diagnosis's frames at their narrow types: the same values as the wide ones they replace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from diagnosis_sim import Sim
from gpuscope.analysis.diagnosis.sorted_arrays import is_sorted as _is_sorted, sorted_of as _sorted_of, sorted_unique as _sorted_unique
from gpuscope.analysis.diagnosis.context import Context
from gpuscope.analysis.diagnosis.steady_work import _names, steady_work
from gpuscope.analysis.diagnosis.timeline import _narrowed, shared_if_constant

US = 1_000


def test_sorted_lookups_equal_a_sort() -> None:
    rng = np.random.default_rng(1)
    ordered = np.cumsum(rng.integers(0, 5, 5_000))
    shuffled = rng.permutation(ordered)
    mask = rng.random(5_000) < 0.5
    for values in (ordered, shuffled):
        assert _is_sorted(values, step=7) == (values is ordered)
        assert np.array_equal(_sorted_of(values), np.sort(values))
        assert np.array_equal(_sorted_of(values, mask), np.sort(values[mask]))
        assert np.array_equal(_sorted_of(values, np.ones(len(values), bool)), np.sort(values))
    assert _sorted_of(ordered) is ordered  # in order already: no copy
    assert np.array_equal(_sorted_unique(shuffled.copy()), np.unique(shuffled))
    assert not _is_sorted(np.array([1, 2, 2, 1]), step=2)  # a descent across the boundary of two steps


def test_ids_narrowed_where_they_fit() -> None:
    small = pd.Series(np.array([3, -7, 2**31 - 1], dtype=np.int64))
    big = pd.Series(np.array([3, 2**31], dtype=np.int64))
    nullable = pd.Series(pd.array([5, None, -2**31], dtype="Int64"))
    none = pd.Series(pd.array([None, None], dtype="Int64"))
    assert _narrowed(small).dtype == np.int32 and _narrowed(small).tolist() == small.tolist()
    assert _narrowed(big).dtype == np.int64 and _narrowed(big).tolist() == big.tolist()
    assert _narrowed(nullable).dtype == "Int32" and _narrowed(nullable).isna().tolist() == [False, True, False]
    assert _narrowed(nullable).dropna().tolist() == [5, -2**31]
    assert _narrowed(none).dtype == "Int32" and _narrowed(none).isna().all()


def test_names_as_a_sorted_categorical() -> None:
    names = pd.Series(pd.Categorical.from_codes([2, 0, 2, 3], categories=["b", "", "a", "c", "unused"]))
    out = _names(names)
    assert out.astype(str).tolist() == ["a", "b", "a", "c"]
    assert list(out.cat.categories) == ["a", "b", "c"]  # sorted, the unused left out
    assert out.groupby(out, observed=True).size().index.astype(str).tolist() == ["a", "b", "c"]


def test_steady_frames_of_a_simulated_run(tmp_path: Path) -> None:
    sim = Sim(tmp_path / "r.gpuscope")
    for _ in range(4):
        sim.kernel("zeta", 300 * US)
        sim.copy("HtoD", 1 << 20, 100 * US)
        sim.kernel("alpha", 200 * US)
        sim.cpu(500 * US)
        sim.step()
    with sim.open() as report:
        ctx = Context(report)
        (p,) = ctx.processes
        ops, idle = p.timeline.ops, p.breakdown.idle
        assert ops["op_id"].dtype == np.int32 and ops["pid"].dtype == np.int32
        assert ops["bytes"].dtype == "Int32" and ops.loc[ops["kind"] == "memcpy", "bytes"].tolist() == [1 << 20] * 4
        assert ops.loc[ops["kind"] == "kernel", "bytes"].isna().all()
        assert {idle[c].dtype for c in ("window", "ref", "call")} == {np.dtype(np.int32)}
        assert len(idle) and (idle["call"] == -1).all()
        k = steady_work(ctx, p)
        assert sorted(set(k["name"].astype(str))) == ["alpha", "zeta"]
        assert list(k["name"].cat.categories) == ["alpha", "zeta"]
        assert k["flops"].isna().all() and k["precision"].isna().all()  # no operators: no work
        assert not k["flops"].to_numpy().flags.writeable


def test_copy_attributes_of_a_run_without_copies(tmp_path: Path) -> None:
    sim = Sim(tmp_path / "r.gpuscope")
    for _ in range(3):
        sim.kernel("k", 100 * US)
        sim.cpu(50 * US)
        sim.step()
    with sim.open() as report:
        (p,) = Context(report).processes
        ops = p.timeline.ops
        assert len(ops) == 3
        assert ops["bytes"].dtype == "Int32" and ops["bytes"].isna().all() and ops["is_async"].isna().all()
        assert ops["copy_kind"].isna().all() and ops["src_kind"].isna().all() and ops["dst_kind"].isna().all()
        assert not ops["pageable"].any() and not ops["transfer"].any()
        assert ops[ops["kind"] == "kernel"]["bytes"].isna().all()  # a selection of them is NULL too
        # one process, one kind: held as one value each
        assert ops["pid"].to_numpy().strides == (0,) and ops["kind"].array.codes.strides == (0,)
        assert (ops["pid"] == p.pid).all() and (ops["kind"] == "kernel").all()


def test_one_value_shared() -> None:
    same = np.full(1000, 7, dtype=np.int32)
    varied = np.arange(1000)
    shared = shared_if_constant(same)
    assert shared.strides == (0,) and shared.dtype == np.int32 and np.array_equal(shared, same)
    assert not shared.flags.writeable
    owner = shared
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    assert owner.size == 1  # holds one value, not the array it was made from
    assert shared_if_constant(varied) is varied
    assert shared_if_constant(np.array([1.5, 1.5])).strides != (0,)  # floats are left as they are

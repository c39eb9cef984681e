"""Chains of elementwise and normalization kernels that one fused kernel would replace.

Eager PyTorch runs ``y = torch.sigmoid(x * a + b)`` as three kernels, each reading its inputs from
memory and writing its output back; a residual add before a layer norm is two. On large tensors each
is bound by memory bandwidth, and one fused kernel (torch.compile: Inductor fuses elementwise
operators with their neighbouring normalizations and reductions) would read the chain's inputs and
write its outputs once. A *chain* is a run, in a steady step, of kernels one after another on the
GPU (no other kernel between them), each critical (:mod:`..breakdown`), outside the hand-written
attention chains (:mod:`.attention`, which counts those). Two models:

- **by bytes**, where the report has the kernels' bytes (operator shapes, :mod:`..steady_work`): a
  run of at least two elementwise, copy, normalization, softmax or reduction kernels. Each reads its
  inputs and writes its output once: ``bytes_i = reads_i + writes_i``, the writes taken from its
  operator's output shapes (launches outside the sample windows: the mean share of the sampled
  launches of the same kernel name; half where no operator says).
  Fused, each intermediate output is neither written nor read back: the chain moves
  ``sum(bytes_i) - 2 x sum(writes_i, i < n)`` (at least the first kernel's reads and the last one's
  writes), at the pace the chain's largest pass reached (at most the DRAM roof: fusing saves the
  passes not made, not the distance of the others from their roof), and takes no less than the
  shortest kernel of the chain. The saving is the chain's time less that.
- **by names**, where it has not: a run of at least ``MIN_CHAIN`` elementwise kernels, each running
  at least ``MIN_KERNEL_NS`` (long enough that memory, not its launch, sets its time). A fused
  kernel takes about as long as the chain's longest pass, so the saving is the chain's time less
  its longest kernel.

Where the step runs convolutions on NCHW tensors, compiling also takes channels_last (Inductor's
layout optimization, on by default): the estimate adds :mod:`.layout`'s saving of the kernels
outside the chains.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...roofline.work.call import Call
from ...roofline.work.model import op_work
from ..context import Context, Process, data_dict, fmt_ns
from ..finding import Finding
from ..kernel_flags import name_flags
from ..kernel_names import is_elementwise, is_normalization
from ..rule import ProcessRule
from ..steady_work import ceilings, op_calls, steady_work
from .attention import attention_chains, span_rows
from .layout import layout_savings

MIN_CHAIN = 3
MIN_KERNEL_NS = 10_000
MIN_BYTES_CHAIN = 2
FUSABLE_KINDS = ("elementwise", "copy", "norm", "softmax", "reduction")
UNARY_WRITES = 0.5  # the writes' share of a kernel's bytes where no operator says: one input, one output


def _write_shares(ctx: Context, k: pd.DataFrame) -> np.ndarray:
    """Per kernel, the share of its bytes that are writes: from the output shapes of the operator
    that launched it, else the mean of the sampled launches of its name, else :data:`UNARY_WRITES`."""
    linked = k["torch_op_id"].notna().to_numpy(bool) & np.isfinite(k["bytes"].to_numpy(np.float64))
    ids = k["torch_op_id"].to_numpy(object)
    calls = op_calls(ctx, sorted({int(i) for i in ids[linked]}))
    by_op: dict[int, float] = {}
    for i, (name, shapes, dtypes, outs, scalars) in calls.items():
        work = op_work(name, shapes, dtypes, outs, scalars)
        if work is not None and work.bytes > 0:
            by_op[i] = min(1.0, Call(name, shapes, dtypes, outs, scalars).write_bytes() / work.bytes)
    names = _texts(k["name"])
    found: dict[str, list[float]] = {}
    own = np.full(len(k), np.nan)
    for j in np.flatnonzero(linked):
        share = by_op.get(int(ids[j]))
        if share is not None:
            own[j] = share
            found.setdefault(str(names[j]), []).append(share)
    by_name = {n: float(np.mean(v)) for n, v in found.items()}
    if isinstance(names, _Texts):  # asked once per name
        fill = np.array([by_name.get(str(n), UNARY_WRITES) for n in names.texts], dtype=np.float64)[names.codes]
    else:
        fill = np.array([by_name.get(str(n), UNARY_WRITES) for n in names])
    return np.where(np.isnan(own), fill, own)


def _runs(ok: np.ndarray, step: np.ndarray, least: int) -> list[tuple[int, int]]:
    """The runs [i, j) of consecutive ``ok`` kernels within one step, at least ``least`` long
    (found in numpy: a run has millions of kernels)."""
    ok = np.asarray(ok, bool)
    if not ok.any():
        return []
    step = np.asarray(step)
    same = np.zeros(len(ok), bool)  # kernel i continues the run of kernel i - 1
    same[1:] = ok[1:] & ok[:-1] & (step[1:] == step[:-1])
    starts = np.flatnonzero(ok & ~same)
    # a run ends after its last kernel: one that the next does not continue (positions of the runs
    # alone, not of every kernel that breaks one: those are most of ten million)
    last = ok.copy()
    last[:-1] &= ~same[1:]
    ends = np.flatnonzero(last) + 1
    long = ends - starts >= least
    return list(zip(starts[long].tolist(), ends[long].tolist()))


# cuDNN's training-mode batch norms, forward and backward, that make both passes in one kernel
# (PyTorch's own make them in two kernels, whose bytes the chain already counts; cuDNN's
# "singleread" ones keep a channel on chip and read it once)
_TWO_PASS_NORM = re.compile(r"\bbn_(fw_tr|bw)_")


def _two_pass_bytes(names: np.ndarray, b: np.ndarray, w: np.ndarray) -> float:
    """What a fused chain still moves for each training-mode batch norm in it: the statistics span
    the whole batch, so the norm's input is read once for them and once more to normalize, and
    inside a chain that input must first be written out (Inductor splits the chain there)."""
    extra = 0.0
    for m, name in enumerate(names):
        text = str(name)
        if _TWO_PASS_NORM.search(text) and "singleread" not in text:
            reads = float(b[m] - w[m])
            extra += reads * (2.0 if m else 1.0)
    return extra


def _pace(b: np.ndarray, dur: np.ndarray, roof: float) -> float:
    """The bandwidth a fused kernel of the chain is taken to reach: what the chain's largest pass
    reached on the same tensors (bytes per second), at most the DRAM roof. Fusing saves the passes
    not made; it does not make the passes it keeps faster than the eager kernels made them (a pass
    below its roof is the below-roofline finding's)."""
    m = int(np.argmax(b))
    return min(roof, float(b[m]) / float(dur[m]) * 1e9) if dur[m] > 0 else roof


class _Texts:
    """The kernel names of a categorical column, as :meth:`numpy.ndarray` slices of texts made only
    for the rows asked (an array of ten million Python references is 80 MB)."""

    def __init__(self, names: pd.Series) -> None:
        self.codes = names.cat.codes.to_numpy()
        self.texts = np.asarray(names.cat.categories.astype(object), dtype=object)

    def __getitem__(self, rows: slice | int) -> np.ndarray:
        return self.texts[self.codes[rows]]


def _texts(names: pd.Series) -> np.ndarray | _Texts:
    """``names`` by row (sliced by the rule): a categorical's codes and categories where it has no
    missing value, else its values."""
    if isinstance(names.dtype, pd.CategoricalDtype) and not (names.cat.codes.to_numpy() < 0).any():
        return _Texts(names)
    return names.to_numpy(object)


class UnfusedElementwise(ProcessRule):
    name = "unfused_elementwise"
    description = ("Runs of memory-bound elementwise and normalization kernels back to back, each a full pass over "
                   "its tensors, that one fused kernel would do in one pass.")

    def process(self, ctx: Context, p: Process) -> Finding | None:
        k = steady_work(ctx, p)
        if not len(k):
            return None
        names = _texts(k["name"])
        dur = k["dur_ns"].to_numpy(np.float64)
        step = k["step"].to_numpy()
        critical = k["critical"].to_numpy(bool)
        free = np.ones(len(k), bool)  # not part of a hand-written attention chain
        for first, _, last in attention_chains(ctx, p):
            free[first:last + 1] = False
        # names repeat: each is matched once (a search of a long templated name costs tens of µs)
        by_name = name_flags(ctx, p, is_elementwise)
        # by bytes
        fusable = k["work_kind"].astype(object).isin(FUSABLE_KINDS).to_numpy(bool)  # texts only: NaN and None are not in it
        fusable = fusable | name_flags(ctx, p, is_normalization) | by_name
        nbytes = k["bytes"].to_numpy(np.float64)
        known = np.isfinite(nbytes) & (nbytes > 0)
        byte_runs = _runs(fusable & known & critical & free, step, MIN_BYTES_CHAIN) if known.any() else []
        saving, chains, kernels, moved, fused_moved = 0.0, 0, 0, 0.0, 0.0
        spans: list[tuple[int, int]] = []
        if byte_runs:
            shares = _write_shares(ctx, k)
            bw = ceilings(ctx).dram_bytes_per_s
            for i, j in byte_runs:
                if not bw:
                    break
                b = nbytes[i:j]
                w = shares[i:j] * b
                fused = max(float(b.sum() - 2 * w[:-1].sum()), float(b[0] - w[0] + w[-1]))
                fused += _two_pass_bytes(names[i:j], b, w)
                fused_ns = max(fused / _pace(b, dur[i:j], bw) * 1e9, float(dur[i:j].min()))
                gain = float(dur[i:j].sum()) - fused_ns
                if gain <= 0:
                    continue
                saving += gain
                chains += 1
                kernels += j - i
                moved += float(b.sum())
                fused_moved += fused
                spans.append((i, j))
        # by names, where the bytes are not known
        ok = by_name & (dur >= MIN_KERNEL_NS) & critical & free & ~known
        named = 0
        for i, j in _runs(ok, step, MIN_CHAIN):
            saving += float(dur[i:j].sum() - dur[i:j].max())
            chains += 1
            named += 1
            kernels += j - i
            spans.append((i, j))
        if not chains:
            return None
        # Inductor also lays convolutions out channels_last (its layout optimization, on by default):
        # the conversions and NCHW kernels outside the chains go with compilation as well
        layout = layout_savings(ctx, p)
        layout_ns = 0.0
        if layout is not None:
            in_chain = np.zeros(len(k), bool)
            for i, j in spans:
                in_chain[i:j] = True
            layout_ns = p.per_step(float(layout.saved_ns[~in_chain].sum()))
        ns = p.per_step(saving) + layout_ns
        if p.share(ns) < ctx.min_share:
            return None
        op_ids = span_rows(k["op_id"], spans)
        location = ctx.kernel_location(p, ctx.steady_kernels(p)[0], op_ids, "chains of elementwise kernels")
        evidence = [f"{chains / p.n_steps:.1f} chains per step of elementwise or normalization kernels back to back, "
                    f"{kernels / chains:.1f} kernels per chain"]
        if chains > named:
            evidence.append(f"{(chains - named) / p.n_steps:.1f} chains per step by their bytes: they move "
                            f"{moved / 1e6 / p.n_steps:.1f} MB per step; fused, reading their inputs and writing their "
                            f"outputs once, {fused_moved / 1e6 / p.n_steps:.1f} MB, at the DRAM roof (no less than the "
                            "chain's shortest kernel)")
        if named:
            evidence.append(f"{named / p.n_steps:.1f} chains per step by their names ({MIN_CHAIN} or more elementwise "
                            f"kernels of at least {fmt_ns(MIN_KERNEL_NS)} each): a fused kernel takes about as long as "
                            "the longest pass of its chain")
        if layout_ns:
            evidence.append(f"its convolutions run on NCHW tensors: compiled, they take channels_last (Inductor's layout "
                            f"optimization, on by default), which saves {fmt_ns(layout_ns)} per step more outside the "
                            "chains (the channels_last finding's model: conversions gone, NHWC kernels)")
        evidence.append(f"estimate: {fmt_ns(ns)} per step saved")
        return Finding(
            rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
            title=f"Unfused elementwise chains: {kernels / p.n_steps:.0f} memory-bound kernels per step in "
                  f"{chains / p.n_steps:.1f} chain(s)",
            evidence=evidence, location=location,
            fix=("Fuse the chain into one kernel: torch.compile the function or module (Inductor fuses "
                 "elementwise operators with their normalizations and reductions), or use in-place and fused "
                 "operators (torch.addcmul, torch.lerp, fused activations); a hand-written Triton kernel for what "
                 "the compiler cannot fuse."),
            data=data_dict(saving_ns=ns, chains_per_step=chains / p.n_steps, kernels_per_step=kernels / p.n_steps,
                           byte_chains_per_step=(chains - named) / p.n_steps, layout_ns=layout_ns),
        )

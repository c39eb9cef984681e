"""Chains of elementwise kernels that one fused kernel would replace.

Eager PyTorch runs ``y = torch.sigmoid(x * a + b)`` as three kernels, each reading its inputs from
memory and writing its output back. On large tensors each is bound by memory bandwidth, and one
fused kernel (torch.compile, a custom kernel) would read and write once. A *chain* is a run, in
a steady step, of at least ``MIN_CHAIN`` elementwise kernels one after another on the GPU (no
other kernel between them), each running at least ``MIN_KERNEL_NS`` (long enough that memory, not
its launch, sets its time) and critical (:mod:`..breakdown`). A fused kernel takes about as long
as the chain's longest pass, so the saving is the chain's time less its longest kernel.
"""

from __future__ import annotations

import numpy as np

from ..context import Context, data_dict, fmt_ns
from ..finding import Finding
from ..kernel_names import is_elementwise
from ..rule import Rule

MIN_CHAIN = 3
MIN_KERNEL_NS = 10_000


class UnfusedElementwise(Rule):
    name = "unfused_elementwise"
    description = ("Runs of memory-bound elementwise kernels back to back, each a full pass over its tensors, "
                   "that one fused kernel would do in one pass.")

    def evaluate(self, ctx: Context) -> list[Finding]:
        out = []
        for p in ctx.processes:
            kern, step = ctx.steady_kernels(p)
            if not len(kern):
                continue
            names = kern["name"].astype(str).to_numpy(object)
            dur = (kern["end_ns"] - kern["start_ns"]).to_numpy(np.int64)
            elementwise = {n: is_elementwise(n) for n in set(names.tolist())}
            ok = np.array([elementwise[n] for n in names], bool) & (dur >= MIN_KERNEL_NS)
            ok &= kern["critical"].fillna(False).to_numpy(bool)
            # a chain ends with its step: one fused kernel per step and chain
            saving, chains, kernels, op_ids = 0.0, 0, 0, []
            i = 0
            while i < len(ok):
                if not ok[i]:
                    i += 1
                    continue
                j = i
                while j < len(ok) and ok[j] and step[j] == step[i]:
                    j += 1
                if j - i >= MIN_CHAIN:
                    saving += float(dur[i:j].sum() - dur[i:j].max())
                    chains += 1
                    kernels += j - i
                    op_ids += kern["op_id"].iloc[i:j].astype(int).tolist()
                i = j
            ns = p.per_step(saving)
            if not chains or p.share(ns) < ctx.min_share:
                continue
            location = ctx.kernel_location(p, kern, op_ids, "chains of elementwise kernels")
            out.append(Finding(
                rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
                title=f"Unfused elementwise chains: {kernels / p.n_steps:.0f} memory-bound kernels per step in "
                      f"{chains / p.n_steps:.1f} chain(s)",
                evidence=[f"{chains / p.n_steps:.1f} chains per step of {MIN_CHAIN} or more elementwise kernels back "
                          f"to back, each at least {fmt_ns(MIN_KERNEL_NS)} (a pass over memory), "
                          f"{kernels / chains:.1f} kernels per chain",
                          f"estimate: a fused kernel takes about as long as the longest pass of its chain: "
                          f"{fmt_ns(ns)} per step saved"],
                location=location,
                fix=("Fuse the chain into one kernel: torch.compile the function or module (Inductor fuses "
                     "elementwise operators), or use in-place and fused operators (torch.addcmul, torch.lerp, "
                     "fused activations); a hand-written Triton kernel for what the compiler cannot fuse."),
                data=data_dict(saving_ns=ns, chains_per_step=chains / p.n_steps, kernels_per_step=kernels / p.n_steps),
            ))
        return out

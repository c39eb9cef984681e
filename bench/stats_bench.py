"""Speed, memory and file size of ``gpuscope stats`` on a large synthetic report.

The benchmark writes a realistic report of N kernel records (default 10 million) and then times the
whole ``gpuscope stats REPORT --report cuda_gpu_kern_sum`` command the way a user runs it: a fresh
process of the ``gpuscope`` console script, its output thrown away. Every run is a separate
process; its wall time is taken around the process and its peak RSS from ``wait4``'s resource
usage of that one child. The table format and ``--format csv`` are each run several times and
summarized by min / median / max. Bytes on disk per kernel record are reported for the whole
file and for the kernel table alone (the file minus the same report with no kernel rows), with a
per-column breakdown.

The report is made with the project's schema (``gpuscope.trace.schema.create_statements()``) and
a ``meta`` table filled as ``ReportWriter`` fills it (JSON values, status "complete"), but its rows
are bulk-inserted with DuckDB directly, in batches of about a million: the point is a realistic
file, not exercising the writer. Kernel names follow a Zipf-like frequency over a few hundred real
looking kernels (PyTorch elementwise and reduction templates with their Itanium-mangled forms,
demangled by gpuscope's own demangler, cuBLAS ``nvjet_sm90_*`` / ``sm80_xmma_*`` GEMMs, NCCL and
Triton kernels); durations are log-normal, quantized to the GPU timer's 32 ns like real records.

Run it from the repository root with the project's environment::

    /work/venv/bin/python bench/stats_bench.py                       # 10M records, 5 repeats
    /work/venv/bin/python bench/stats_bench.py --records 1000000 --repeats 3 \\
        --markdown /tmp/stats_bench.md --json /tmp/stats_bench.json
    /work/venv/bin/python bench/stats_bench.py --reuse                # keep an existing report

The report is left at ``--report`` (default ``/tmp/stats_bench_<N>.gpuscope``); with ``--reuse``
an existing report made by this script with the same N and seed is measured again instead of
being regenerated.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import duckdb
import numpy as np
import pandas as pd

import gpuscope
from gpuscope.trace import schema
from gpuscope.trace.demangle import demangle

# Goals the stats command and the file are held to.
GOAL_WALL_S = 2.0
GOAL_RSS_MB = 500.0
GOAL_BYTES_PER_RECORD = 30.0

# Fixed facts of the synthetic run.
PID = 48213
PPID = 48190
DEVICE_ID = 0
CONTEXT_ID = 1
COMPUTE_STREAM = 7  # the context's null stream, as in recorded reports
SIDE_STREAM = 13
COMM_STREAM = 17
BASE_NS = 1_795_314_020_000_000_000  # CUPTI timestamps are ~1.8e18 ns
LOCAL_MEMORY_TOTAL = 250_871_808  # per-context value CUPTI reports for every kernel
GPU_TIMER_NS = 32  # kernel durations come in multiples of the GPU timer's tick


# ================================================================================================
# Kernel name catalogue
# ================================================================================================


@dataclass(frozen=True)
class KernelName:
    """One distinct kernel: its mangled and demangled names and what kind of kernel it is."""

    mangled: str
    demangled: str
    family: str


# Itanium codes of the element types PyTorch kernels are instantiated for.
SCALARS = ["f", "d", "N3c104HalfE", "N3c108BFloat16E", "i", "l", "h", "b"]
FLOAT_SCALARS = ["f", "d", "N3c104HalfE", "N3c108BFloat16E"]


def _src(name: str) -> str:
    """An Itanium <source-name>: the identifier prefixed by its length."""
    return f"{len(name)}{name}"


def _anon_namespace(rng: np.random.Generator, source_file: str) -> str:
    """The mangled anonymous namespace nvcc gives a .cu file (``_GLOBAL__N__<hash>_..._cu_<hash>``)."""
    stem = f"{source_file}_cu"
    ident = f"_GLOBAL__N__{rng.integers(16**8):08x}_{len(stem)}_{stem}_{rng.integers(16**8):08x}"
    return _src(ident)


def _functor(kind: str, t: str, op: str) -> str:
    """at::native::{A,B,}UnaryFunctor / BinaryFunctor<T, T, T, op<T>> (nested name, mangled)."""
    return f"NS0_{_src(kind)}I{t}{t}{t}{op.format(t=t)}EE"


FUNCTOR_OPS = [
    "NS0_15binary_internal10MulFunctorI{t}EE",
    "NS0_15binary_internal10DivFunctorI{t}EE",
    "NS0_15CUDAFunctor_addI{t}EE",
]
FUNCTOR_KINDS = {"BinaryFunctor": 3, "AUnaryFunctor": 2, "BUnaryFunctor": 2}
UNARY_OPS = [
    ("ActivationGeluKernel", "GeluCUDAKernelImpl"), ("ActivationSiluKernel", "silu_kernel"),
    ("UnaryOpsKernel", "exp_kernel_cuda"), ("UnaryOpsKernel", "rsqrt_kernel_cuda"),
    ("UnaryOpsKernel", "sqrt_kernel_cuda"), ("UnaryLogKernels", "log_kernel_cuda"),
    ("UnarySpecialOpsKernel", "sigmoid_kernel_cuda"), ("UnarySignKernels", "neg_kernel_cuda"),
    ("UnaryGeometricTanhKernel", "tanh_kernel_cuda"), ("AbsKernel", "abs_kernel_cuda"),
    ("UnaryFractionKernels", "reciprocal_kernel_cuda"), ("ActivationHardtanhKernel", "hardtanh_kernel"),
    ("UnaryGeometricCosKernel", "cos_kernel_cuda"), ("UnaryGeometricSinKernel", "sin_kernel_cuda"),
]  # fmt: skip
REDUCE_OPS = [
    "NS0_7MeanOpsI{t}fffEE",
    "NS0_10NormTwoOpsI{t}ffEE",
    "NS0_6MaxOpsIfEE",
    "NS0_6MinOpsIfEE",
    "NS0_10WelfordOpsI{t}fiSt5tupleIJffEEEE",
]
TRITON_OPS = [
    "add", "mul", "native_layer_norm", "_to_copy", "gelu", "view", "sum", "mean", "rsqrt", "pow",
    "div", "sub", "silu", "embedding", "clone", "transpose", "threshold_backward", "native_dropout",
    "_softmax", "where", "exp", "neg", "cat", "slice", "index_put", "copy_", "addmm", "bmm",
    "native_layer_norm_backward", "_log_softmax", "nll_loss_forward", "sigmoid", "tanh", "permute",
    "unsqueeze", "expand", "scatter_add", "convert_element_type", "squeeze", "split", "var_mean",
]  # fmt: skip


def _fill_kernels(rng: np.random.Generator) -> Iterator[str]:
    for t in SCALARS:
        yield f"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorI{t}EESt5arrayIPcLm1EEEEviT0_T1_"


def _functor_kernels(rng: np.random.Generator) -> Iterator[str]:
    for kind, arity in FUNCTOR_KINDS.items():
        for op in FUNCTOR_OPS:
            for t in SCALARS[:6]:
                fn = _functor(kind, t, op)
                vec = 8 if t in ("N3c104HalfE", "N3c108BFloat16E") else 4
                yield (f"_ZN2at6native29vectorized_elementwise_kernelILi{vec}E{fn}"
                       f"St5arrayIPcLm{arity}EEEEviT0_T1_")
                # the non-contiguous fallback: elementwise_kernel<128, 2, lambda in gpu_kernel_impl_nocast>
                yield (f"_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastI{fn}EE"
                       f"vRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_")


def _unary_lambda_kernels(rng: np.random.Generator) -> Iterator[str]:
    for source_file, fn in UNARY_OPS:
        anon = _anon_namespace(rng, source_file)
        for lam, t in enumerate(FLOAT_SCALARS):
            disc = "" if lam == 0 else str(lam - 1)  # {lambda()#1} is "_", #2 is "0_", ...
            yield ("_ZN2at6native29vectorized_elementwise_kernelILi4E"
                   f"ZZZNS0_{anon}{_src(fn)}ERNS_18TensorIteratorBaseEENKUlvE_clEvENKUlvE{disc}_clEvEUl{t}E_"
                   "St5arrayIPcLm2EEEEviT0_T1_")


def _reduce_kernels(rng: np.random.Generator) -> Iterator[str]:
    for op in REDUCE_OPS:
        for t in FLOAT_SCALARS:
            for block, vt in ((512, 1), (256, 2), (128, 4), (512, 4)):
                for vec in (4, 1):
                    ops = op.format(t=t)
                    yield (f"_ZN2at6native13reduce_kernelILi{block}ELi{vt}ENS0_8ReduceOpI{t}{ops}jfLi4ELi{vec}EEEEEvT1_")


def _softmax_kernels(rng: np.random.Generator) -> Iterator[str]:
    for direction in ("Forward", "Backward"):
        for ilp in (2, 4, 8):
            for t in FLOAT_SCALARS:
                name = f"cunn_SoftMax{direction}"
                epi = _src(f"{'Log' if ilp == 8 else ''}SoftMax{direction}Epilogue")
                yield (f"_ZN2at6native12_GLOBAL__N_1{_src(name)}ILi{ilp}E{t}ffNS1_{epi}EEEvPT2_PKT0_i")


def _nccl_kernels(rng: np.random.Generator) -> Iterator[str]:
    for coll in ("AllReduce", "ReduceScatter", "AllGather", "Broadcast"):
        for red in (("Sum", "Max") if coll in ("AllReduce", "ReduceScatter") else ("Sum",)):
            for ty in ("bf16", "f32", "f16", "u8"):
                for algo in ("RING", "TREE", "NVLS"):
                    for proto in ("LL", "LL128", "SIMPLE"):
                        fn = f"ncclDevKernel_{coll}_{red}_{ty}_{algo}_{proto}"
                        yield f"_Z{_src(fn)}24ncclDevKernelArgsStorageILm4096EE"


def _xmma_kernels(rng: np.random.Generator) -> Iterator[str]:
    types = ["f32f32_f32f32_f32", "f16f16_f16f32_f32", "bf16bf16_bf16f32_f32", "tf32f32_tf32f32_f32"]
    for ty in types:
        for layout in ("tn", "nn", "nt"):
            for tile in ("32x32x8", "64x64x8", "128x64x32", "128x128x32", "256x128x32", "64x32x64"):
                for stage, warps in ((3, "1x2x1"), (4, "2x2x1"), (5, "2x4x1")):
                    op = "ffma" if ty.startswith("f32") else "tensor16x8x16" if "16" in ty else "tensor16x8x8"
                    for split in ("", "split_k_"):
                        align = 4 if ty.startswith(("f32", "tf32")) else 8
                        yield (f"sm80_xmma_gemm_{ty}_{layout}_n_tilesize{tile}_stage{stage}_warpsize{warps}_"
                               f"{op}_aligna{align}_alignc{align}_execute_{split}kernel__5x_cublas")


def _nvjet_kernels(rng: np.random.Generator) -> Iterator[str]:
    for prec in ("hsh", "tst", "sss", "bsb"):
        for tile in ("64x8", "64x16", "128x64", "128x128", "192x128", "256x128", "64x256", "192x192"):
            for k in ("64x4", "64x3", "128x2", "64x5"):
                for cluster in ("1x1", "2x1", "1x2"):
                    for raster in ("v", "h"):
                        for coop in ("", "_coopA", "_coopB"):
                            for layout in ("TNT", "NNT", "NTT", "TNN"):
                                yield f"nvjet_sm90_{prec}_{tile}_{k}_{cluster}_{raster}_bz{coop}_{layout}"


def _triton_kernels(rng: np.random.Generator) -> Iterator[str]:
    seen: set[str] = set()
    while True:
        kind = rng.choice(["poi", "red", "per"], p=[0.6, 0.25, 0.15])
        n_ops = int(rng.integers(1, 6))
        ops = "_".join(str(o) for o in rng.choice(TRITON_OPS, size=n_ops, replace=False))
        name = f"triton_{kind}_fused_{ops}_{int(rng.integers(0, 80))}"
        if name not in seen:
            seen.add(name)
            yield name


# family -> (generator of mangled names, share of the distinct names)
FAMILIES: dict[str, tuple[Callable[[np.random.Generator], Iterator[str]], float]] = {
    "fill": (_fill_kernels, 0.015),
    "functor": (_functor_kernels, 0.12),
    "unary": (_unary_lambda_kernels, 0.08),
    "reduce": (_reduce_kernels, 0.10),
    "softmax": (_softmax_kernels, 0.03),
    "nccl": (_nccl_kernels, 0.04),
    "xmma": (_xmma_kernels, 0.10),
    "nvjet": (_nvjet_kernels, 0.15),
    "triton": (_triton_kernels, 1.0),  # takes whatever the other families leave
}


def build_catalogue(n_names: int, rng: np.random.Generator) -> list[KernelName]:
    """Return ``n_names`` distinct kernels, mixed from the families, in random (= rank) order."""
    names: list[KernelName] = []
    seen: set[str] = set()
    for family, (gen, share) in FAMILIES.items():
        quota = n_names - len(names) if family == "triton" else round(share * n_names)
        if family == "triton":
            pool = []
            it = gen(rng)
            while len(pool) < quota:
                pool.append(next(it))
        else:
            pool = list(dict.fromkeys(gen(rng)))
            pool = [pool[i] for i in rng.permutation(len(pool))[:quota]]
        for mangled in pool:
            if mangled in seen:
                continue
            seen.add(mangled)
            text = demangle(mangled)
            if mangled.startswith("_Z") and text == mangled:
                raise RuntimeError(f"synthetic mangled name does not demangle: {mangled}")
            names.append(KernelName(mangled, text, family))
    return [names[i] for i in rng.permutation(len(names))]


# ================================================================================================
# Launch configurations
# ================================================================================================

CONFIG_FIELDS = list(schema.columns("kernel_config"))[3:]  # grid_x ... launch_type


@dataclass
class Catalogue:
    """Kernel names, their launch configurations and the duration model of each configuration."""

    names: list[KernelName]
    strings: list[str]  # string table; id = index
    name_ids: np.ndarray  # per kernel: string id of the demangled name
    mangled_ids: np.ndarray  # per kernel: string id of the mangled name
    name_prob: np.ndarray  # per kernel: Zipf probability of a launch
    cfg_start: np.ndarray  # per kernel: first config id
    cfg_count: np.ndarray  # per kernel: number of configs
    configs: pd.DataFrame  # kernel_config rows
    cfg_median_ns: np.ndarray  # per config: median duration
    cfg_sigma: np.ndarray  # per config: log-normal sigma
    cfg_stream_side: np.ndarray  # per config: probability of running on the side stream
    cfg_comm: np.ndarray  # per config: NCCL kernel (runs on the communication stream)


# Per family: (median duration range in ns, log-normal sigma range)
DURATION_MODEL = {
    "fill": ((1_200, 20_000), (0.15, 0.4)),
    "functor": ((1_300, 80_000), (0.15, 0.5)),
    "unary": ((1_300, 60_000), (0.15, 0.5)),
    "reduce": ((2_500, 150_000), (0.2, 0.6)),
    "softmax": ((3_000, 200_000), (0.2, 0.5)),
    "nccl": ((15_000, 5_000_000), (0.4, 1.0)),
    "xmma": ((6_000, 1_500_000), (0.1, 0.35)),
    "nvjet": ((5_000, 3_000_000), (0.1, 0.35)),
    "triton": ((1_500, 400_000), (0.15, 0.5)),
}


def _pow2(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(2 ** rng.integers(lo, hi + 1))


def _kernel_properties(family: str, rng: np.random.Generator) -> dict[str, int]:
    """What a compiled kernel fixes for every launch: registers, static shared memory, cluster."""
    regs = {"fill": (16, 24), "functor": (16, 40), "unary": (18, 40), "reduce": (24, 64),
            "softmax": (30, 72), "nccl": (90, 96), "xmma": (72, 168), "nvjet": (168, 168),
            "triton": (16, 96)}[family]  # fmt: skip
    props = {
        "registers_per_thread": int(rng.integers(regs[0], regs[1] + 1)),
        "static_shared_memory": {"reduce": 16, "softmax": 0, "nccl": 0}.get(family, 0),
        "local_memory_per_thread": 0,
        "cluster_x": 0, "cluster_y": 0, "cluster_z": 0,
        "block_x": 128, "block_y": 1, "block_z": 1,
    }  # fmt: skip
    if family in ("fill", "functor", "unary"):
        props["block_x"] = int(rng.choice([128, 256, 512]))
    elif family == "reduce":
        props["block_x"], props["block_y"] = [(32, 16), (512, 1), (32, 4), (16, 32)][int(rng.integers(4))]
    elif family == "softmax":
        props["block_x"] = int(rng.choice([128, 256, 512, 1024]))
    elif family == "nccl":
        props["block_x"] = int(rng.choice([512, 640]))
    elif family == "xmma":
        props["block_x"] = int(rng.choice([64, 128, 256]))
    elif family == "nvjet":
        props["block_x"] = 384
        props["cluster_x"], props["cluster_y"], props["cluster_z"] = (
            (1, 1, 1), (2, 1, 1), (1, 2, 1))[int(rng.integers(3))]
    elif family == "triton":
        props["block_x"] = 32 * int(rng.choice([1, 2, 4, 8, 16]))
        props["static_shared_memory"] = 0
    return props


def _launch_config(family: str, props: dict[str, int], rng: np.random.Generator) -> dict[str, int]:
    """One launch configuration: the kernel's fixed properties plus a grid and dynamic shared memory."""
    cfg = dict(props)
    grid = [1, 1, 1]
    dyn = 0
    if family in ("fill", "functor", "unary", "triton"):
        grid[0] = _pow2(rng, 0, 16) * int(rng.choice([1, 3, 5]))
        if family == "triton":
            dyn = int(rng.choice([0, 0, 0, 1024, 4096, 16384]))
    elif family == "reduce":
        grid = [_pow2(rng, 0, 10), _pow2(rng, 0, 6), 1]
        dyn = int(rng.choice([0, 1024, 2048, 4096]))
    elif family == "softmax":
        grid[0] = _pow2(rng, 4, 14)
        dyn = int(rng.choice([0, 1024, 2048, 4096, 8192]))
    elif family == "nccl":
        grid[0] = _pow2(rng, 0, 5)
    elif family == "xmma":
        grid = [_pow2(rng, 0, 7), _pow2(rng, 0, 7), int(rng.choice([1, 1, 2, 4]))]
        dyn = int(rng.choice([6912, 8704, 12288, 12672, 24576, 49152, 98304]))
    elif family == "nvjet":
        grid = [132, 1, 1] if rng.random() < 0.5 else [_pow2(rng, 2, 9), _pow2(rng, 0, 4), 1]
        dyn = int(rng.choice([197632, 213248, 221184, 229376]))
    cfg.update(grid_x=grid[0], grid_y=grid[1], grid_z=grid[2], dynamic_shared_memory=dyn)
    smem = cfg["static_shared_memory"] + dyn
    carveouts = [16384, 32768, 65536, 102400, 135168, 167936, 233472]
    cfg["shared_memory_executed"] = next(c for c in carveouts if c >= smem + 1024) if smem else 32768
    cfg["local_memory_total"] = LOCAL_MEMORY_TOTAL
    cfg["launch_type"] = 0
    return cfg


def build_configs(n_names: int, zipf_s: float, rng: np.random.Generator) -> Catalogue:
    """Names, interned strings, launch configurations and their duration model."""
    names = build_catalogue(n_names, rng)
    strings: list[str] = ["", "NVIDIA H100 80GB HBM3"]
    index = {s: i for i, s in enumerate(strings)}

    def intern(value: str) -> int:
        if value not in index:
            index[value] = len(strings)
            strings.append(value)
        return index[value]

    k = len(names)
    mangled_ids = np.array([intern(n.mangled) for n in names], dtype=np.int32)
    name_ids = np.array([intern(n.demangled) for n in names], dtype=np.int32)
    ranks = np.arange(1, k + 1, dtype=np.float64)
    prob = ranks**-zipf_s
    prob /= prob.sum()

    rows: list[dict[str, int]] = []
    cfg_start = np.empty(k, dtype=np.int64)
    cfg_count = np.empty(k, dtype=np.int64)
    medians: list[float] = []
    sigmas: list[float] = []
    side: list[float] = []
    comm: list[bool] = []
    for i, kn in enumerate(names):
        (dlo, dhi), (slo, shi) = DURATION_MODEL[kn.family]
        name_median = float(np.exp(rng.uniform(np.log(dlo), np.log(dhi))))
        sigma = float(rng.uniform(slo, shi))
        props = _kernel_properties(kn.family, rng)
        n_cfg = int(min(rng.geometric(0.4), 8))
        cfg_start[i] = len(rows)
        cfg_count[i] = n_cfg
        side_share = 0.0 if kn.family == "nccl" else float(rng.choice([0.0, 0.0, 0.0, 0.1, 0.5]))
        seen_cfgs: set[tuple[int, ...]] = set()
        made = 0
        while made < n_cfg:
            cfg = _launch_config(kn.family, props, rng)
            key = tuple(cfg[f] for f in CONFIG_FIELDS)
            if key in seen_cfgs:
                n_cfg -= 1  # this kernel has fewer distinct configurations
                cfg_count[i] = max(n_cfg, made)
                continue
            seen_cfgs.add(key)
            cfg.update(id=len(rows), name_id=int(name_ids[i]), mangled_id=int(mangled_ids[i]))
            rows.append(cfg)
            # bigger launches of a kernel take longer
            medians.append(name_median * (1.0 if made == 0 else float(np.exp(rng.normal(0.0, 0.6)))))
            sigmas.append(sigma)
            side.append(side_share)
            comm.append(kn.family == "nccl")
            made += 1
    configs = pd.DataFrame(rows, columns=schema.columns("kernel_config"))
    configs = configs.astype({c: np.int64 if c == "local_memory_total" else np.int32 for c in configs.columns})
    return Catalogue(
        names=names, strings=strings, name_ids=name_ids, mangled_ids=mangled_ids, name_prob=prob,
        cfg_start=cfg_start, cfg_count=cfg_count, configs=configs,
        cfg_median_ns=np.array(medians), cfg_sigma=np.array(sigmas),
        cfg_stream_side=np.array(side), cfg_comm=np.array(comm, dtype=bool),
    )


# ================================================================================================
# Kernel records
# ================================================================================================


@dataclass
class Timeline:
    """Where the next batch of records continues: the last kernel's end and correlation id."""

    last_end_ns: int = BASE_NS + 2_500_000_000  # the program's first kernel ~2.5 s after start
    last_correlation: int = 480


def kernel_batch(cat: Catalogue, n: int, timeline: Timeline, rng: np.random.Generator) -> pd.DataFrame:
    """``n`` consecutive kernel records in start order, continuing ``timeline``."""
    name = rng.choice(len(cat.names), size=n, p=cat.name_prob)
    # within a kernel, its first configurations are the common ones
    offset = np.minimum(rng.geometric(0.55, size=n) - 1, cat.cfg_count[name] - 1)
    cfg = (cat.cfg_start[name] + offset).astype(np.int64)

    dur = cat.cfg_median_ns[cfg] * np.exp(rng.normal(0.0, 1.0, size=n) * cat.cfg_sigma[cfg])
    dur = np.clip(dur, 800.0, 80_000_000.0)
    ticks = np.maximum(np.rint(dur / GPU_TIMER_NS), 25).astype(np.int64)
    # like recorded ones: most durations exact ticks, some one ns off either way
    dur_ns = ticks * GPU_TIMER_NS + rng.choice(np.array([0, -1, 1]), size=n, p=[0.83, 0.11, 0.06])

    # gaps between kernels: mostly the launch pipeline's few µs, sometimes a host stall, rarely
    # an idle stretch (data loading, a synchronize, a checkpoint)
    kind = rng.random(n)
    gap = rng.lognormal(np.log(1_500.0), 0.7, size=n)
    stall = kind < 0.03
    gap[stall] = rng.lognormal(np.log(40_000.0), 1.0, size=int(stall.sum()))
    idle = kind < 0.0005
    gap[idle] = np.exp(rng.uniform(np.log(1e6), np.log(5e7), size=int(idle.sum())))
    gap_ns = np.rint(gap).astype(np.int64) + 200

    prev_dur = np.concatenate(([0], dur_ns[:-1]))
    start = timeline.last_end_ns + np.cumsum(gap_ns + prev_dur)
    end = start + dur_ns
    submitted = start - (480 + np.rint(rng.exponential(150.0, size=n)).astype(np.int64))
    queued = submitted - np.rint(rng.lognormal(np.log(3_700.0), 0.25, size=n)).astype(np.int64)
    correlation = timeline.last_correlation + np.cumsum(rng.geometric(0.12, size=n))

    stream = np.where(rng.random(n) < cat.cfg_stream_side[cfg], SIDE_STREAM, COMPUTE_STREAM)
    stream = np.where(cat.cfg_comm[cfg], COMM_STREAM, stream).astype(np.int32)

    timeline.last_end_ns = int(end[-1])
    timeline.last_correlation = int(correlation[-1])
    zeros = np.zeros(n, dtype=np.int64)
    cols: dict[str, np.ndarray] = {
        "start_ns": start, "end_ns": end, "queued_ns": queued, "submitted_ns": submitted,
        "pid": np.full(n, PID, dtype=np.int64),
        "device_id": np.full(n, DEVICE_ID, dtype=np.int32),
        "context_id": np.full(n, CONTEXT_ID, dtype=np.int32),
        "stream_id": stream, "correlation_id": correlation.astype(np.int64),
        "config_id": cfg.astype(np.int32), "graph_id": zeros, "graph_node_id": zeros,
    }  # fmt: skip
    assert list(cols) == schema.columns("kernel")
    return pd.DataFrame(cols)


# ================================================================================================
# Report file
# ================================================================================================


@dataclass
class Generation:
    """What was written: the file, its content's shape and how long writing took."""

    path: str
    records: int
    seed: int
    distinct_names: int
    configs: int
    strings: int
    span_s: float
    kernel_busy_share: float
    seconds: float
    reused: bool = False


def _insert_frame(con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame) -> None:
    con.register("_bench_rows", frame)
    try:
        con.execute(f"INSERT INTO {table} SELECT * FROM _bench_rows")
    finally:
        con.unregister("_bench_rows")


def _set_meta(con: duckdb.DuckDBPyConnection, **items: Any) -> None:
    """As ReportWriter.set_meta: one row per key, the value as JSON."""
    for key, value in items.items():
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, json.dumps(value)])


def _side_tables(con: duckdb.DuckDBPyConnection, start_ns: int, end_ns: int, records: int) -> None:
    argv = ["/usr/bin/python3", "train.py", "--model", "llama-8b", "--steps", "2000"]
    con.execute(
        "INSERT INTO process VALUES (?, ?, ?, ?, ?, ?, ?, 'cupti', ?)",
        [PID, PPID, argv[0], json.dumps(argv), "/home/user/train", start_ns, end_ns, BASE_NS - 40_000_000_000],
    )
    con.execute(
        "INSERT INTO device VALUES (?, ?, 'NVIDIA H100 80GB HBM3', '9.0', 132, 85045379072, 3352320000, "
        "1980000, 52428800, 1024, 49152, 233472, 65536, 64, 32, 32, 3)",
        [PID, DEVICE_ID],
    )
    con.execute("INSERT INTO context VALUES (?, ?, ?, ?)", [PID, CONTEXT_ID, DEVICE_ID, COMPUTE_STREAM])
    con.execute(
        "INSERT INTO collector VALUES (?, 'cupti', ?, ?, ?, 0, 'kinds=kernel,device,context')",
        [PID, records, max(1, records // 20_000), records * 40],
    )
    con.execute("INSERT INTO dropped VALUES (?, 'cupti', 0), (?, 'gpuscope', 0)", [PID, PID])


def write_report(path: Path, records: int, cat: Catalogue, seed: int, batch: int,
                 log: Callable[[str], None], params: dict[str, Any] | None = None) -> Generation:
    """Write a complete report of ``records`` kernels at ``path`` (replacing it)."""
    t0 = time.perf_counter()
    for p in (path, path.with_name(path.name + ".wal")):
        if p.exists():
            p.unlink()
    rng = np.random.default_rng([seed, 1])
    con = duckdb.connect(str(path))
    try:
        for stmt in schema.create_statements():
            con.execute(stmt)
        _set_meta(con, format=schema.FORMAT_NAME, schema_version=schema.SCHEMA_VERSION,
                  gpuscope_version=gpuscope.__version__, status="recording")
        strings = pd.DataFrame({"id": np.arange(len(cat.strings), dtype=np.int32), "value": cat.strings})
        _insert_frame(con, "string", strings)
        _insert_frame(con, "kernel_config", cat.configs)

        timeline = Timeline()
        first_start = None
        busy = 0
        done = 0
        while done < records:
            n = min(batch, records - done)
            frame = kernel_batch(cat, n, timeline, rng)
            if first_start is None:
                first_start = int(frame["start_ns"].iloc[0])
            busy += int((frame["end_ns"] - frame["start_ns"]).sum())
            _insert_frame(con, "kernel", frame)
            done += n
            log(f"  {done:,} / {records:,} kernel records ({time.perf_counter() - t0:.0f} s)")
        begin = BASE_NS
        end = timeline.last_end_ns + 150_000_000
        _side_tables(con, begin, end, records)
        _set_meta(
            con,
            command=["/usr/bin/python3", "train.py", "--model", "llama-8b", "--steps", "2000"],
            cwd="/home/user/train", host="bench", user="user",
            platform="Linux-6.8.0-x86_64-with-glibc2.39", python="3.11.9", trace=["cuda"],
            not_recorded={"cuda_api": "CUDA API calls (cuda_api_sum, API time in cuda_kern_exec_sum): "
                                      "add --trace cuda-api"},
            started_at="2026-01-15T09:00:00+0000", synthetic={"generator": "bench/stats_bench.py",
                                                             "parameters": params or {}},
        )
        _set_meta(con, exit_code=0, exit_signal=None, wall_ns=end - begin, processes=[PID], status="complete")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    span = (timeline.last_end_ns - first_start) / 1e9 if first_start is not None else 0.0
    return Generation(
        path=str(path), records=records, seed=seed, distinct_names=len(set(cat.name_ids.tolist())),
        configs=len(cat.configs), strings=len(cat.strings), span_s=span,
        kernel_busy_share=busy / (span * 1e9) if span else 0.0, seconds=time.perf_counter() - t0,
    )


def existing_report(path: Path, params: dict[str, Any]) -> bool:
    """True if ``path`` is a finished report this script made with the same parameters."""
    if not path.exists():
        return False
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return False
    try:
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        n = con.execute("SELECT count(*) FROM kernel").fetchone()
    except duckdb.Error:
        return False
    finally:
        con.close()
    synthetic = json.loads(meta.get("synthetic", "null")) or {}
    return (json.loads(meta.get("status", "null")) == "complete" and n is not None
            and n[0] == params["records"] and synthetic.get("parameters") == params)


def describe_existing(path: Path, records: int, seed: int, cat: Catalogue) -> Generation:
    con = duckdb.connect(str(path), read_only=True)
    try:
        lo, hi, busy, names = con.execute(
            "SELECT min(start_ns), max(end_ns), sum(end_ns - start_ns), count(DISTINCT c.name_id) "
            "FROM kernel k JOIN kernel_config c ON c.id = k.config_id").fetchone()  # type: ignore[misc]
    finally:
        con.close()
    span = (hi - lo) / 1e9
    return Generation(path=str(path), records=records, seed=seed, distinct_names=int(names),
                      configs=len(cat.configs), strings=len(cat.strings), span_s=span,
                      kernel_busy_share=float(busy) / (span * 1e9), seconds=0.0, reused=True)


# ================================================================================================
# Sizes
# ================================================================================================


@dataclass
class ColumnSize:
    column: str
    compression: str
    bytes: int
    bytes_per_record: float


@dataclass
class Sizes:
    file_bytes: int
    empty_report_bytes: int
    kernel_table_bytes: int
    bytes_per_record: float
    kernel_bytes_per_record: float
    used_blocks: int
    free_blocks: int
    block_size: int
    columns: list[ColumnSize] = field(default_factory=list)


def _database_blocks(path: Path) -> tuple[int, int, int]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        block_size, used, free = con.execute(
            "SELECT block_size, used_blocks, free_blocks FROM pragma_database_size()").fetchone()  # type: ignore[misc]
    finally:
        con.close()
    return int(block_size), int(used), int(free)


def _compressions(path: Path) -> dict[str, str]:
    """Per kernel column: the compressions DuckDB chose for its data segments, most used first."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute(
            "SELECT column_name, compression, count(*) AS n FROM pragma_storage_info('kernel') "
            "WHERE segment_type <> 'VALIDITY' GROUP BY ALL ORDER BY column_name, n DESC").fetchall()
    finally:
        con.close()
    out: dict[str, list[str]] = {}
    for col, comp, n in rows:
        out.setdefault(col, []).append(f"{comp} ({n})")
    return {c: ", ".join(v) for c, v in out.items()}


def _column_bytes(report: Path, column: str, scratch: Path) -> int:
    """On-disk bytes of one kernel column stored alone in a fresh DuckDB file (minus an empty one)."""
    sizes = []
    for rows in ("", " LIMIT 0"):
        out = scratch / f"col_{column}{'_empty' if rows else ''}.duckdb"
        con = duckdb.connect(str(out))
        try:
            con.execute(f"ATTACH '{report}' AS src (READ_ONLY)")
            con.execute(f"CREATE TABLE t AS SELECT {column} FROM src.kernel{rows}")
            con.execute("DETACH src")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        sizes.append(out.stat().st_size)
        out.unlink()
    return sizes[0] - sizes[1]


def measure_sizes(report: Path, records: int, cat: Catalogue, seed: int, breakdown: bool,
                  log: Callable[[str], None]) -> Sizes:
    with tempfile.TemporaryDirectory(prefix="stats_bench_") as tmp:
        scratch = Path(tmp)
        empty = scratch / "empty.gpuscope"
        write_report(empty, 0, cat, seed, 1, lambda _msg: None)
        empty_bytes = empty.stat().st_size
        file_bytes = report.stat().st_size
        block_size, used, free = _database_blocks(report)
        columns: list[ColumnSize] = []
        if breakdown:
            comp = _compressions(report)
            for col in schema.columns("kernel"):
                log(f"  column {col}")
                b = _column_bytes(report, col, scratch)
                columns.append(ColumnSize(col, comp.get(col, "?"), b, b / records if records else 0.0))
    kernel_bytes = file_bytes - empty_bytes
    return Sizes(
        file_bytes=file_bytes, empty_report_bytes=empty_bytes, kernel_table_bytes=kernel_bytes,
        bytes_per_record=file_bytes / records if records else 0.0,
        kernel_bytes_per_record=kernel_bytes / records if records else 0.0,
        used_blocks=used, free_blocks=free, block_size=block_size, columns=columns,
    )


# ================================================================================================
# Timing the command
# ================================================================================================


@dataclass
class Run:
    wall_s: float
    max_rss_mb: float
    user_s: float
    sys_s: float


@dataclass
class Series:
    """Repeated runs of one command line."""

    label: str
    argv: list[str]
    runs: list[Run]
    cold: Run | None = None

    def stat(self, key: str) -> dict[str, float]:
        values = [getattr(r, key) for r in self.runs]
        return {"min": min(values), "median": statistics.median(values), "max": max(values)}


# Runs the command as its child and reports the child's wall time and rusage. A separate small
# process is needed: a child forked (or vforked) straight from this big benchmark process would
# carry this process's memory high-water mark into its own ru_maxrss.
RUNNER_SNIPPET = r"""
import json, os, resource, subprocess, sys, time
t0 = time.perf_counter()
rc = subprocess.call(sys.argv[2:])
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as fh:
    json.dump({"rc": rc, "wall_s": wall, "max_rss_kb": ru.ru_maxrss, "user_s": ru.ru_utime,
               "sys_s": ru.ru_stime}, fh)
"""


# Environment of the measured commands. Python's bytecode cache is on, as in a normal install, but
# kept outside the repository (PYTHONPYCACHEPREFIX): with PYTHONDONTWRITEBYTECODE set and no
# __pycache__ in the editable source tree, every run would otherwise recompile gpuscope's modules.
CHILD_ENV: dict[str, str] = dict(os.environ)


def configure_child_env(pycache_prefix: str | None) -> None:
    CHILD_ENV.clear()
    CHILD_ENV.update(os.environ)
    if pycache_prefix:
        CHILD_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        CHILD_ENV["PYTHONPYCACHEPREFIX"] = pycache_prefix


def run_once(argv: Sequence[str], capture: bool = False) -> tuple[Run, bytes]:
    """Run ``argv`` once from a fresh small Python process; wall time, peak RSS and CPU time.

    stdout goes to /dev/null unless ``capture``; a failing command raises with its stderr.
    """
    with tempfile.NamedTemporaryFile(prefix="stats_bench_run_", suffix=".json") as res:
        proc = subprocess.run(
            [sys.executable, "-c", RUNNER_SNIPPET, res.name, *argv],
            stdout=subprocess.PIPE if capture else subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=CHILD_ENV,
        )
        info = json.loads(Path(res.name).read_text() or "{}")
    if proc.returncode != 0 or info.get("rc") != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.decode(errors='replace')[-2000:]}")
    run = Run(info["wall_s"], info["max_rss_kb"] / 1024.0, info["user_s"], info["sys_s"])
    return run, proc.stdout or b""


def evict_from_page_cache(path: Path) -> None:
    """Drop the file's pages from the page cache (no root needed for clean pages)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def measure(label: str, argv: list[str], repeats: int, report: Path, cold: bool) -> Series:
    run_once(argv)  # warm-up: page cache and .pyc files as a user's second run finds them
    runs = [run_once(argv)[0] for _ in range(repeats)]
    series = Series(label, argv, runs)
    if cold:
        evict_from_page_cache(report)
        series.cold = run_once(argv)[0]
    return series


def validate_output(argv: list[str], cat: Catalogue, records: int) -> str:
    """Check the CSV summary: one row per kernel name, instance counts adding up to N."""
    _run, out = run_once([*argv, "--format", "csv"], capture=True)
    lines = out.decode().splitlines()
    header, rows = lines[0], lines[1:]
    import csv

    parsed = list(csv.reader(rows))
    cols = next(csv.reader([header]))
    inst = next(i for i, c in enumerate(cols) if c.startswith("Instances"))
    total = sum(int(r[inst]) for r in parsed)
    names = len(set(cat.name_ids.tolist()))
    if len(parsed) != names or total != records:
        raise RuntimeError(f"stats output has {len(parsed)} rows / {total} instances, "
                           f"expected {names} / {records}")
    return f"{len(parsed)} rows, {total:,} instances (as generated)"


# ================================================================================================
# Where the time goes: phases inside one fresh process
# ================================================================================================

PHASES_SNIPPET = r"""
import json, sys, time
t0 = time.perf_counter()
marks = []
def hwm_mb():
    # VmHWM: this process's own peak RSS (ru_maxrss may include the parent's, from before exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0
def mark(name):
    marks.append((name, time.perf_counter() - t0, hwm_mb()))
import gpuscope.cli
gpuscope.cli.build_parser()
mark("import gpuscope.cli, build the argument parser")
from gpuscope.analysis.cuda_summaries import cuda_gpu_kern_sum
from gpuscope.reporters import FORMATS
from gpuscope.trace.report import Report
mark("imports stats needs (analysis, reporters, trace.report: duckdb, rich)")
r = Report.open(sys.argv[1])
mark("Report.open")
n = r.count("kernel")
mark("count(kernel) (the summary's empty-table check)")
t = cuda_gpu_kern_sum(r)
mark("cuda_gpu_kern_sum: the SQL query (and the count again)")
text = FORMATS[sys.argv[2]]([t])
mark("render " + sys.argv[2])
r.close()
mark("close")
print(json.dumps(marks))
"""


@dataclass
class Phase:
    name: str
    seconds: float
    cumulative_s: float
    max_rss_mb: float


def phases(python: str, report: Path, fmt: str) -> list[Phase]:
    """Time the phases of the stats command inside one fresh interpreter."""
    out = subprocess.run([python, "-c", PHASES_SNIPPET, str(report), fmt], check=True,
                         capture_output=True, text=True, env=CHILD_ENV).stdout
    marks = json.loads(out.strip().splitlines()[-1])
    result = []
    prev = 0.0
    for name, cum, rss in marks:
        result.append(Phase(name, cum - prev, cum, rss))
        prev = cum
    return result


def import_floor(python: str, repeats: int) -> dict[str, float]:
    """Wall time and RSS of a bare interpreter and of ``gpuscope --version`` (imports only)."""
    bare = [run_once([python, "-c", "pass"])[0] for _ in range(repeats)]
    gpuscope_bin = str(Path(python).with_name("gpuscope"))
    version = [run_once([gpuscope_bin, "--version"])[0] for _ in range(repeats)]
    return {
        "python_startup_s": statistics.median(r.wall_s for r in bare),
        "python_startup_rss_mb": statistics.median(r.max_rss_mb for r in bare),
        "gpuscope_version_s": statistics.median(r.wall_s for r in version),
        "gpuscope_version_rss_mb": statistics.median(r.max_rss_mb for r in version),
    }


IMPORT_MODULES = [
    "gpuscope.cli", "gpuscope.cli.profile", "gpuscope.capture.session", "gpuscope.trace.writer",
    "gpuscope.cli.export", "gpuscope.trace.chrome", "gpuscope.cli.stats",
    "gpuscope.analysis.cuda_summaries", "gpuscope.trace.report", "gpuscope.reporters",
    "gpuscope.reporters.terminal", "pandas", "numpy", "duckdb", "rich", "rich.console", "rich.table",
]  # fmt: skip


@dataclass
class ImportCost:
    module: str
    cumulative_s: float
    imported_by: str


def import_profile(python: str, argv: list[str], repeats: int) -> tuple[float, list[ImportCost]]:
    """``python -X importtime -m gpuscope <argv>``: all imports of the real command, and the heavy ones.

    A module is counted where it is first imported (later imports of it are free); its cost
    includes everything it imports first. Returns the total import time (sum over top-level
    imports, median of ``repeats`` runs) and the listed modules' costs (best of the runs).
    """
    best: dict[str, float] = {}
    parent_of: dict[str, str] = {}
    totals: list[float] = []
    for _ in range(repeats):
        err = subprocess.run([python, "-X", "importtime", "-m", "gpuscope", *argv], check=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=CHILD_ENV).stderr
        entries = []  # (depth, name, cumulative µs), children before their parent
        for line in err.splitlines():
            if not line.startswith("import time:") or "|" not in line:
                continue
            _self, cum, name = line[len("import time:"):].split("|", 2)
            if not cum.strip().isdigit():
                continue  # the header line
            depth = (len(name) - len(name.lstrip())) // 2
            entries.append((depth, name.strip(), int(cum)))
        totals.append(sum(cum for depth, _n, cum in entries if depth == 0) / 1e6)
        for i, (depth, name, cum) in enumerate(entries):
            if name not in IMPORT_MODULES:
                continue
            best[name] = min(best.get(name, float("inf")), cum / 1e6)
            parent = next((n for d, n, _c in entries[i + 1:] if d < depth), "-")
            parent_of[name] = parent
    costs = [ImportCost(m, best[m], parent_of[m]) for m in IMPORT_MODULES if m in best]
    return statistics.median(totals), costs


def explain_analyze(report: Path) -> str:
    """DuckDB's profile of the cuda_gpu_kern_sum query on the report."""
    from gpuscope.analysis import cuda_summaries as cs

    con = duckdb.connect(str(report), read_only=True)
    try:
        inner = cs._kernel_sql()  # noqa: SLF001  (the query stats runs, verbatim)
        query = f"""
            WITH g AS (SELECT name_id, {cs._stats('d')} FROM ({inner}) GROUP BY name_id)
            SELECT {cs._pct()}, total, n, mean, med, lo, hi, sd, s.value
            FROM g JOIN string s ON s.id = g.name_id
            ORDER BY total DESC, n, s.value"""
        rows = con.execute("EXPLAIN ANALYZE " + query).fetchall()
    finally:
        con.close()
    return "\n".join(str(r[-1]) for r in rows)


def query_variants(report: Path) -> list[tuple[str, float]]:
    """In-process time of the summary's aggregate with and without its costly parts."""
    con = duckdb.connect(str(report), read_only=True)
    base = "FROM kernel k JOIN kernel_config c ON c.id = k.config_id"
    d = "k.end_ns - k.start_ns"
    variants = {
        "full aggregate (sum, count, avg, median, min, max, stddev)":
            f"SELECT c.name_id, sum({d}), count(*), avg({d}), median({d}), min({d}), max({d}), "
            f"stddev_samp({d}) {base} GROUP BY 1",
        "same without median":
            f"SELECT c.name_id, sum({d}), count(*), avg({d}), min({d}), max({d}), stddev_samp({d}) "
            f"{base} GROUP BY 1",
        "only median": f"SELECT c.name_id, median({d}) {base} GROUP BY 1",
        "scan of start_ns, end_ns, config_id only": "SELECT sum(start_ns), sum(end_ns), sum(config_id) FROM kernel",
    }
    out = []
    try:
        for label, sql in variants.items():
            con.execute(sql).fetchall()  # warm the buffer pool
            best = min(_timed(lambda: con.execute(sql).fetchall()) for _ in range(3))
            out.append((label, best))
    finally:
        con.close()
    return out


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# ================================================================================================
# Output
# ================================================================================================


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_total_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return 0.0


ROOT = Path(__file__).resolve().parents[1]


def source_state() -> str:
    """The gpuscope source measured: commit, and whether src/ has uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"], check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"],
                               check=True, capture_output=True, text=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"commit {head}" + (f", plus uncommitted changes to {len(dirty)} files in src/" if dirty else ", src/ clean")


def load_average() -> str:
    """The 1/5/15-minute load averages: other work on the machine skews wall times."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _ok(passed: bool) -> str:
    return "PASS" if passed else "**FAIL**"


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def markdown(env: dict[str, Any], gen: Generation, sizes: Sizes, series: list[Series],
             validation: str, floor: dict[str, float], phase_runs: dict[str, list[Phase]],
             variants: list[tuple[str, float]], plan: str | None, imports: list[ImportCost],
             import_total: float) -> str:
    main = series[0]
    wall = main.stat("wall_s")
    rss = main.stat("max_rss_mb")
    out: list[str] = []
    w = out.append
    w(f"## `gpuscope stats` on {gen.records:,} kernel records\n")
    w(f"- Device: {env['cpu']}, {env['cores']} cores, {env['memory_gb']:.1f} GB RAM (no GPU involved)")
    w(f"- Date: {env['date']}; host {env['host']}; Python {env['python']}; DuckDB {env['duckdb']}; "
      f"numpy {env['numpy']}; pandas {env['pandas']}; gpuscope {env['gpuscope']}")
    w(f"- gpuscope source measured: {env['source']}")
    w(f"- Report: `{gen.path}`, {gen.records:,} kernel records, {gen.distinct_names} distinct kernel names "
      f"(Zipf, s={env['zipf_s']}), {gen.configs:,} launch configurations, {gen.strings:,} strings; "
      f"{gen.span_s:,.0f} s of GPU timeline, kernels busy {100 * gen.kernel_busy_share:.0f}% of it")
    w(f"- Generation: " + (f"{gen.seconds:.1f} s (bulk DuckDB inserts of {env['batch']:,}-row batches, "
                          f"then CHECKPOINT)" if not gen.reused else "reused an existing report (--reuse)"))
    w(f"- Output check: {validation}")
    w(f"- Each run is a fresh `gpuscope` process (stdout to /dev/null); wall time around the process, "
      f"peak RSS from wait4. One unmeasured warm-up run first, so the report and Python's files are in "
      f"the page cache; a cold run evicts the report from the page cache first (posix_fadvise).")
    pyc = (f"bytecode cached in `{env['pycache_prefix']}` (PYTHONPYCACHEPREFIX)" if env["pycache_prefix"]
           else "environment as inherited" + (" (PYTHONDONTWRITEBYTECODE set)" if env["dont_write_bytecode"] else ""))
    w(f"- Python of the measured commands: {pyc}. Load average (1/5/15 min) before the timed runs: "
      f"{env['load_before']}, after: {env['load_after']} (on 2 cores, anything else running "
      f"shows up in wall times; CPU time is less affected)\n")

    w("### Goals\n")
    w("| Goal | Target | Measured | Result |")
    w("|---|---|---|---|")
    w(f"| `gpuscope stats --report cuda_gpu_kern_sum` wall time (median of {len(main.runs)}) | ≤ {GOAL_WALL_S:g} s "
      f"| {wall['median']:.2f} s | {_ok(wall['median'] <= GOAL_WALL_S)} |")
    w(f"| same, peak RSS (max of {len(main.runs)}) | ≤ {GOAL_RSS_MB:g} MB | {rss['max']:.0f} MB "
      f"| {_ok(rss['max'] <= GOAL_RSS_MB)} |")
    w(f"| bytes per kernel record on disk (whole file / N) | ≤ {GOAL_BYTES_PER_RECORD:g} B | "
      f"{sizes.bytes_per_record:.1f} B | {_ok(sizes.bytes_per_record <= GOAL_BYTES_PER_RECORD)} |")
    w("")

    w("### Whole command\n")
    w("| Command | Runs | Wall min / median / max (s) | Peak RSS min / median / max (MB) | "
      "CPU user+sys median (s) | Cold run: wall (s), RSS (MB) |")
    w("|---|---|---|---|---|---|")
    for s in series:
        wl, rs = s.stat("wall_s"), s.stat("max_rss_mb")
        cpu = statistics.median(r.user_s + r.sys_s for r in s.runs)
        cold = f"{s.cold.wall_s:.2f}, {s.cold.max_rss_mb:.0f}" if s.cold else "-"
        w(f"| `{s.label}` | {len(s.runs)} | {wl['min']:.2f} / {wl['median']:.2f} / {wl['max']:.2f} | "
          f"{rs['min']:.0f} / {rs['median']:.0f} / {rs['max']:.0f} | {cpu:.2f} | {cold} |")
    w(f"| `python -c pass` (floor) | 3 | {floor['python_startup_s']:.2f} (median) | "
      f"{floor['python_startup_rss_mb']:.0f} (median) | | |")
    w(f"| `gpuscope --version` (imports only) | 3 | {floor['gpuscope_version_s']:.2f} (median) | "
      f"{floor['gpuscope_version_rss_mb']:.0f} (median) | | |")
    w("")

    w("### Size on disk\n")
    w("| | Bytes | Per kernel record |")
    w("|---|---|---|")
    w(f"| Whole report file | {_mb(sizes.file_bytes)} | {sizes.bytes_per_record:.2f} B |")
    w(f"| Same report without kernel rows | {_mb(sizes.empty_report_bytes)} | |")
    w(f"| Kernel table alone (difference) | {_mb(sizes.kernel_table_bytes)} | "
      f"{sizes.kernel_bytes_per_record:.2f} B |")
    w(f"| DuckDB blocks: {sizes.used_blocks:,} used, {sizes.free_blocks:,} free, "
      f"{sizes.block_size // 1024} KiB each | | |")
    w("")
    if sizes.columns:
        w("Kernel columns, each stored alone in a fresh DuckDB file (compression as in the report):\n")
        w("| Column | Compression (segments) | Bytes | Per record |")
        w("|---|---|---|---|")
        for c in sorted(sizes.columns, key=lambda c: -c.bytes):
            w(f"| {c.column} | {c.compression} | {_mb(c.bytes)} | {c.bytes_per_record:.2f} B |")
        total = sum(c.bytes for c in sizes.columns)
        w(f"| **sum** | | {_mb(total)} | {total / gen.records:.2f} B |")
        w("")

    if phase_runs:
        w("### Where the time goes (phases inside one fresh process, warm cache)\n")
        w("| Phase | " + " | ".join(f"{fmt}: s (RSS MB after)" for fmt in phase_runs) + " |")
        w("|---|" + "---|" * len(phase_runs))
        names = [p.name for p in next(iter(phase_runs.values()))]
        for i, name in enumerate(names):
            cells = [f"{ps[i].seconds:.3f} ({ps[i].max_rss_mb:.0f})" for ps in phase_runs.values()]
            w(f"| {name} | " + " | ".join(cells) + " |")
        w("")
    if imports:
        w(f"Imports of the whole command (`python -X importtime -m gpuscope stats REPORT --report "
          f"cuda_gpu_kern_sum`): {import_total:.3f} s in all (median of 3; -X importtime itself adds "
          f"some). Heavy modules, best of 3; a module's time includes what it imports first and is "
          f"counted where it is first imported:\n")
        w("| Module | Cumulative s | First imported by |")
        w("|---|---|---|")
        for ic in imports:
            w(f"| {ic.module} | {ic.cumulative_s:.3f} | {ic.imported_by} |")
        w("")
    if variants:
        w("In-process DuckDB time of the aggregate (best of 3, warm buffer pool):\n")
        w("| Query | s |")
        w("|---|---|")
        for label, secs in variants:
            w(f"| {label} | {secs:.3f} |")
        w("")
    if plan:
        w("<details><summary>EXPLAIN ANALYZE of the cuda_gpu_kern_sum query</summary>\n")
        w("```")
        w(plan.strip())
        w("```\n</details>\n")
    return "\n".join(out) + "\n"


# ================================================================================================
# Main
# ================================================================================================


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=10_000_000, help="kernel records (default 10M)")
    p.add_argument("--names", type=int, default=600, help="distinct kernel names (default 600)")
    p.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of name frequencies")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=1_000_000, help="rows per bulk insert")
    p.add_argument("--report", type=Path, help="report path (default /tmp/stats_bench_<N>.gpuscope)")
    p.add_argument("--reuse", action="store_true", help="measure an existing report of the same N and seed")
    p.add_argument("--repeats", type=int, default=5, help="measured runs per command (default 5)")
    p.add_argument("--gpuscope", help="the gpuscope console script (default: next to this Python)")
    p.add_argument("--no-cold", action="store_true", help="skip the cold-page-cache run")
    p.add_argument("--pycache-prefix", default="/tmp/stats_bench_pycache",
                   help="PYTHONPYCACHEPREFIX of the measured commands (bytecode cache outside the "
                        "repository); '' to leave the environment as it is")
    p.add_argument("--no-breakdown", action="store_true",
                   help="skip per-column sizes, phases, query variants and EXPLAIN ANALYZE")
    p.add_argument("--markdown", type=Path, default=Path("/tmp/stats_bench.md"))
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    report: Path = args.report or Path(f"/tmp/stats_bench_{args.records}.gpuscope")
    gpuscope_bin = args.gpuscope or str(Path(sys.executable).with_name("gpuscope"))
    if not Path(gpuscope_bin).exists():
        gpuscope_bin = shutil.which("gpuscope") or gpuscope_bin

    configure_child_env(args.pycache_prefix or None)
    source_before = source_state()
    log(f"catalogue: {args.names} kernel names")
    cat = build_configs(args.names, args.zipf, np.random.default_rng([args.seed, 0]))
    params = {"records": args.records, "names": args.names, "zipf": args.zipf, "seed": args.seed}
    if args.reuse and existing_report(report, params):
        log(f"reusing {report}")
        gen = describe_existing(report, args.records, args.seed, cat)
    else:
        log(f"writing {report}")
        gen = write_report(report, args.records, cat, args.seed, args.batch, log, params)

    log("sizes")
    sizes = measure_sizes(report, args.records, cat, args.seed, not args.no_breakdown, log)

    base = [gpuscope_bin, "stats", str(report), "--report", "cuda_gpu_kern_sum"]
    log("validating the stats output")
    validation = validate_output(base, cat, args.records)
    load_before = load_average()
    series = []
    for label, cmd in (("gpuscope stats REPORT --report cuda_gpu_kern_sum", base),
                       ("gpuscope stats REPORT --report cuda_gpu_kern_sum --format csv", [*base, "--format", "csv"])):
        log(f"timing: {label}")
        series.append(measure(label, cmd, args.repeats, report, not args.no_cold))

    load_after = load_average()
    log("import floor")
    floor = import_floor(sys.executable, 3)
    phase_runs: dict[str, list[Phase]] = {}
    variants: list[tuple[str, float]] = []
    plan = None
    imports: list[ImportCost] = []
    import_total = 0.0
    if not args.no_breakdown:
        import_total, imports = import_profile(
            sys.executable, ["stats", str(report), "--report", "cuda_gpu_kern_sum"], 3)
        log("phases, query variants, EXPLAIN ANALYZE")
        for fmt in ("table", "csv"):
            phase_runs[fmt] = phases(sys.executable, report, fmt)
        variants = query_variants(report)
        plan = explain_analyze(report)

    env = {
        "cpu": cpu_model(), "cores": os.cpu_count(), "memory_gb": memory_total_gb(),
        "date": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "host": socket.gethostname(), "python": platform.python_version(), "duckdb": duckdb.__version__,
        "numpy": np.__version__, "pandas": pd.__version__, "gpuscope": gpuscope.__version__,
        "zipf_s": args.zipf, "batch": args.batch, "kernel": platform.release(),
        "load_before": load_before, "load_after": load_after, "source": source_before if source_state() == source_before
        else f"{source_before} at the start, changed while measuring: {source_state()}",
        "pycache_prefix": CHILD_ENV.get("PYTHONPYCACHEPREFIX"),
        "dont_write_bytecode": CHILD_ENV.get("PYTHONDONTWRITEBYTECODE"),
    }  # fmt: skip
    text = markdown(env, gen, sizes, series, validation, floor, phase_runs, variants, plan, imports,
                    import_total)
    print(text)
    args.markdown.write_text(text)
    log(f"wrote {args.markdown}")
    if args.json:
        main_series = series[0]
        doc = {
            "environment": env, "generation": asdict(gen), "sizes": asdict(sizes),
            "validation": validation, "import_floor": floor,
            "series": [{**asdict(s), "wall_s": s.stat("wall_s"), "max_rss_mb": s.stat("max_rss_mb")}
                       for s in series],
            "phases": {k: [asdict(p) for p in v] for k, v in phase_runs.items()},
            "query_variants": [{"query": q, "seconds": s} for q, s in variants],
            "imports": {"total_s": import_total, "modules": [asdict(i) for i in imports]},
            "goals": {
                "wall_s": {"target": GOAL_WALL_S, "measured": main_series.stat("wall_s")["median"]},
                "max_rss_mb": {"target": GOAL_RSS_MB, "measured": main_series.stat("max_rss_mb")["max"]},
                "bytes_per_record": {"target": GOAL_BYTES_PER_RECORD, "measured": sizes.bytes_per_record},
            },
        }  # fmt: skip
        for g in doc["goals"].values():
            g["passed"] = g["measured"] <= g["target"]
        args.json.write_text(json.dumps(doc, indent=2))
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

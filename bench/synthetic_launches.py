"""Kernel launches for synthetic reports: launch configurations, durations and the timeline.

:func:`build_catalogue` gives each kernel of :func:`synthetic_names.build_names` a Zipf-like
launch frequency, a few launch configurations (grid, block, registers, shared memory, cluster as
its kind of kernel has them) and a log-normal duration per configuration. :func:`kernel_batch`
then draws consecutive kernel records from it: durations quantized to the GPU timer's 32 ns,
launch-pipeline gaps with occasional host stalls and idle stretches, queue and submit times, and
side and NCCL streams.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuscope.trace import schema
from synthetic_names import KernelName, build_names

# Fixed facts of the synthetic run.
PID = 48213
DEVICE_ID = 0
CONTEXT_ID = 1
COMPUTE_STREAM = 7  # the context's null stream, as in recorded reports
SIDE_STREAM = 13
COMM_STREAM = 17
BASE_NS = 1_795_314_020_000_000_000  # CUPTI timestamps are ~1.8e18 ns
LOCAL_MEMORY_TOTAL = 250_871_808  # per-context value CUPTI reports for every kernel
GPU_TIMER_NS = 32  # kernel durations come in multiples of the GPU timer's tick

CONFIG_FIELDS = list(schema.columns("kernel_config"))[3:]  # grid_x ... launch_type


@dataclass
class Catalogue:
    """Kernel names, their launch configurations and the duration model of each configuration."""

    names: list[KernelName]
    strings: list[str]  # string table; id = index
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


def build_catalogue(n_names: int, zipf_s: float, rng: np.random.Generator) -> Catalogue:
    """Names, interned strings, launch configurations and their duration model."""
    names = build_names(n_names, rng)
    index = {"": 0, "NVIDIA H100 80GB HBM3": 1}  # string -> id
    mangled_ids = [index.setdefault(n.mangled, len(index)) for n in names]
    name_ids = [index.setdefault(n.demangled, len(index)) for n in names]
    prob = np.arange(1, len(names) + 1, dtype=np.float64) ** -zipf_s
    prob /= prob.sum()

    rows: list[dict[str, int]] = []
    cfg_start = np.empty(len(names), dtype=np.int64)
    cfg_count = np.empty(len(names), dtype=np.int64)
    medians: list[float] = []
    sigmas: list[float] = []
    side: list[float] = []
    comm: list[bool] = []
    for i, kn in enumerate(names):
        (dlo, dhi), (slo, shi) = DURATION_MODEL[kn.family]
        name_median = float(np.exp(rng.uniform(np.log(dlo), np.log(dhi))))
        sigma = float(rng.uniform(slo, shi))
        props = _kernel_properties(kn.family, rng)
        tries = int(min(rng.geometric(0.4), 8))
        side_share = 0.0 if kn.family == "nccl" else float(rng.choice([0.0, 0.0, 0.0, 0.1, 0.5]))
        cfg_start[i] = len(rows)
        seen: set[tuple[int, ...]] = set()
        for _ in range(tries):  # a repeated configuration is dropped: the kernel has fewer
            cfg = _launch_config(kn.family, props, rng)
            key = tuple(cfg[f] for f in CONFIG_FIELDS)
            if key in seen:
                continue
            # a kernel's other configurations run longer or shorter than its first
            scale = float(np.exp(rng.normal(0.0, 0.6))) if seen else 1.0
            seen.add(key)
            cfg.update(id=len(rows), name_id=name_ids[i], mangled_id=mangled_ids[i])
            rows.append(cfg)
            medians.append(name_median * scale)
            sigmas.append(sigma)
            side.append(side_share)
            comm.append(kn.family == "nccl")
        cfg_count[i] = len(seen)
    configs = pd.DataFrame(rows, columns=schema.columns("kernel_config"))
    configs = configs.astype({c: np.int64 if c == "local_memory_total" else np.int32 for c in configs.columns})
    return Catalogue(
        names=names, strings=list(index), name_prob=prob, cfg_start=cfg_start, cfg_count=cfg_count,
        configs=configs, cfg_median_ns=np.array(medians), cfg_sigma=np.array(sigmas),
        cfg_stream_side=np.array(side), cfg_comm=np.array(comm, dtype=bool),
    )


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

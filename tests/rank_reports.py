"""Hand-made reports of distributed jobs: several ranks in one report, with NCCL kernels and steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpuscope.trace.report import Report
from report_builder import ReportBuilder

MS = 1_000_000
NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
STEPS = 6
PERIOD = 10 * MS


def add_rank(b: ReportBuilder, pid: int, rank: int, world: int, host: str = "node0") -> None:
    """Add a process with its rank row."""
    con = b.writer.con
    if pid != b.pid:
        con.execute("INSERT INTO process (pid, ppid, start_ns, clock) VALUES (?, 1, 0, 'cupti')", [pid])
    con.execute("INSERT INTO rank VALUES (?, ?, ?, ?, 0, ?, 'nccl', 'torch.distributed')", [pid, rank, rank, world, host])


def nccl_straggler(path: Path, load_ms: tuple[float, ...] = (0.5, 3.9), steps: int = STEPS,
                   rotate: bool = False, command: str = "train.py") -> Report:
    """A data-parallel job, one rank per entry of ``load_ms`` (pids 100, 101, ...): each step every rank
    waits ``load_ms`` in its DataLoader, runs a 3 ms GEMM, then an NCCL all-reduce that ends 1 ms after the
    last rank started its own. Steps are marked at the end of each 10 ms period. With ``rotate`` the loads
    move one rank further every step (each rank is the slowest in turn)."""
    b = ReportBuilder(path)
    pids = [100 + i for i in range(len(load_ms))]
    for rank, pid in enumerate(pids):
        add_rank(b, pid, rank, len(pids))
    for k in range(steps):
        t = k * PERIOD
        if rotate:
            load_ms = tuple(load_ms[1:]) + (load_ms[0],)
        arrive = {pid: t + int(load * MS) + int(0.1 * MS) + 3 * MS for pid, load in zip(pids, load_ms)}
        last = max(arrive.values())
        for pid, load in zip(pids, load_ms):
            b.range("DataLoader.__next__", t, t + int(load * MS), 1, category="dataloader", pid=pid)
            gemm = t + int(load * MS) + int(0.1 * MS)
            b.kernel("ampere_sgemm_128x64_nn", gemm, gemm + 3 * MS, tid=1, launch=gemm - 50_000, pid=pid)
            b.kernel(NCCL_ALLREDUCE, arrive[pid], last + MS, tid=1, launch=arrive[pid] - 50_000, pid=pid)
            b.range("step", t + PERIOD - 100, t + PERIOD - 100, 1, source="gpuscope", category="step", kind="mark",
                    pid=pid)
    return b.open(command=[command], started_at=str(path))


def nccl_nodes(folder: Path, offsets_ns: tuple[int, ...] = (0, 7_654_321_987), ranks_per_node: int = 2,
               slow_rank: int = 3, steps: int = STEPS, jitter_ns: int = 3_000, anchors: bool = False,
               gpu: bool = True) -> list[Path]:
    """One report per node of a data-parallel job (``node0.gpuscope``, ...), each node's times on its
    own clock: true time + ``offsets_ns[node]``. Every node's processes have the pids 100, 101, ...
    (as containers give them). Each step every rank loads 0.5 ms (``slow_rank``: 3.9 ms), runs a 3 ms
    GEMM, then calls ``c10d::allreduce_`` on the default group (4 MiB of float32) and, with ``gpu``,
    its NCCL kernel, which ends 1 ms after the last rank arrived, give or take up to ``jitter_ns``.
    With ``anchors`` each report's meta holds the wall-clock anchor its launcher would have read."""
    from report_builder import add_torch_op

    nodes = len(offsets_ns)
    world = nodes * ranks_per_node
    rng = np.random.default_rng(7)
    paths = []
    builders = []
    for node in range(nodes):
        path = folder / f"node{node}.gpuscope"
        b = ReportBuilder(path)
        for local in range(ranks_per_node):
            rank = node * ranks_per_node + local
            con = b.writer.con
            if 100 + local != b.pid:
                con.execute("INSERT INTO process (pid, ppid, start_ns, clock) VALUES (?, 1, 0, 'cupti')", [100 + local])
            con.execute("INSERT INTO rank VALUES (?, ?, ?, ?, ?, ?, 'nccl', 'torch.distributed')",
                        [100 + local, rank, local, world, node, f"host{node}"])
        b.writer.con.execute("UPDATE process SET start_ns = ?", [offsets_ns[node]])  # started on its host's clock
        builders.append(b)
        paths.append(path)
    group = '{"process_group":["0","default_pg",[' + ",".join(map(str, range(world))) + "]]}"
    for k in range(steps):
        t = k * PERIOD
        loads = {r: (3.9 if r == slow_rank else 0.5) for r in range(world)}
        arrive = {r: t + int(loads[r] * MS) + int(0.1 * MS) + 3 * MS for r in range(world)}
        last = max(arrive.values())
        for r in range(world):
            node, local = divmod(r, ranks_per_node)
            b, off, pid = builders[node], offsets_ns[node], 100 + local
            b.range("DataLoader.__next__", t + off, t + off + int(loads[r] * MS), 1, category="dataloader", pid=pid)
            gemm = t + int(loads[r] * MS) + int(0.1 * MS)
            if gpu:
                b.kernel("ampere_sgemm_128x64_nn", gemm + off, gemm + off + 3 * MS, tid=1, launch=gemm + off - 50_000,
                         pid=pid)
                end = last + MS + int(rng.integers(0, jitter_ns + 1))
                b.kernel(NCCL_ALLREDUCE, arrive[r] + off, end + off, tid=1, launch=arrive[r] + off - 50_000, pid=pid)
            add_torch_op(b, "c10d::allreduce_", arrive[r] + off - 60_000, arrive[r] + off - 40_000, 1,
                         shapes="[[[1048576]],null,null,null]", dtypes='[["float32"],null,null,null]',
                         scalars=group, pid=pid)
            b.range("step", t + off + PERIOD - 100, t + off + PERIOD - 100, 1, source="gpuscope", category="step",
                    kind="mark", pid=pid)
    for node, (b, path) in enumerate(zip(builders, paths)):
        meta: dict[str, object] = {"command": ["torchrun", f"--node_rank={node}", "train.py"], "started_at": str(path)}
        if anchors:  # both hosts read the same real time when their monotonic clocks read 5 s (+ the offset)
            meta["clock_anchor"] = {"realtime_ns": 1_700_000_000_000_000_000, "monotonic_ns": 5_000_000_000 +
                                    offsets_ns[node]}
        b.open(**meta).close()
    return paths

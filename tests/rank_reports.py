"""Hand-made reports of distributed jobs: several ranks in one report, with NCCL kernels and steps."""

from __future__ import annotations

from pathlib import Path

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

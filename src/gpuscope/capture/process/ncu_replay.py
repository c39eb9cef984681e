"""Running a profiled program again under Nsight Compute (``ncu``) for the metrics of chosen kernels.

ncu replays each selected kernel launch several times to read its hardware counters, so it is
slow: only the launches asked for are profiled (``-k`` regex and ``-c`` count). The metrics asked
for are those of METRICS that this ncu knows for this GPU (``ncu --query-metrics``), so one that a
GPU lacks (FP8 tensor counters before Hopper) does not fail the run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ...errors import GpuscopeError

METRICS = [
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "lts__t_sector_hit_rate.pct",
    "l1tex__t_sector_hit_rate.pct",
    "launch__registers_per_thread",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    *(f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum"
      for op in ("ffma", "fadd", "fmul", "dfma", "dadd", "dmul", "hfma", "hadd", "hmul")),
    "sm__ops_path_tensor_src_fp64.sum",
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp8_dst_fp16.sum",
    "sm__ops_path_tensor_src_fp8_dst_fp32.sum",
    "sm__inst_executed_pipe_tensor.sum",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_dmma_cycles_active.avg.pct_of_peak_sustained_active",
]

NOT_PERMITTED = (
    "GPU performance counters are not permitted for this user (ERR_NVGPUCTRPERM): run as root, or let "
    "every user read them (driver option NVreg_RestrictProfilingToAdminUsers=0, see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM); the analytic roofline (gpuscope roofline) needs no counters"
)


def find_ncu() -> str:
    """Return the ncu executable (``$GPUSCOPE_NCU``, then PATH, then the CUDA toolkit's); raise
    GpuscopeError saying how to get one when there is none."""
    for candidate in (os.environ.get("GPUSCOPE_NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if candidate and os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    raise GpuscopeError(
        "Nsight Compute (ncu) not found: install it (it comes with the CUDA toolkit), put it on PATH or set "
        "GPUSCOPE_NCU to it; or import a CSV that ncu wrote with --import FILE", exit_code=3)


def available_metrics(ncu: str) -> set[str] | None:
    """Return the base names of the metrics ncu knows for this machine's GPU, or None when ncu could
    not list them (then every metric is asked for)."""
    try:
        out = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (re.split(r'[\s,]+', ln.strip())[0].strip('"') for ln in out.stdout.splitlines() if ln.strip())
    names = {word for word in first if "__" in word}
    return names or None


def select_metrics(known: set[str] | None) -> list[str]:
    """Return the METRICS whose base name (before the roll-up suffix) ``known`` lists."""
    if known is None:
        return list(METRICS)
    return [m for m in METRICS if m.split(".")[0] in known]


def command(ncu: str, program: Sequence[str], log: Path, metrics: Sequence[str], *, regex: str | None,
            name_base: str, count: int | None, nvtx: Sequence[str] = ()) -> list[str]:
    """Return the ncu command line that profiles ``program``'s selected launches into CSV ``log``."""
    cmd = [ncu, "--csv", "--page", "raw", "--print-units", "base", "--print-kernel-base", "mangled",
           "--target-processes", "all", "--log-file", str(log), "--metrics", ",".join(metrics)]
    if regex:
        cmd += ["--kernel-name-base", name_base, "--kernel-name", f"regex:{regex}"]
    if count:
        cmd += ["--launch-count", str(count)]
    if nvtx:
        cmd += ["--nvtx", *(a for r in nvtx for a in ("--nvtx-include", r))]
    return [*cmd, *program]


def failure(log_text: str, returncode: int) -> str | None:
    """Return the one-line reason an ncu run failed, or None when it profiled something."""
    if "ERR_NVGPUCTRPERM" in log_text:
        return NOT_PERMITTED
    if '"ID"' in log_text:
        return None
    errors = [ln.split("==ERROR==", 1)[1].strip() for ln in log_text.splitlines() if "==ERROR==" in ln]
    if errors:
        return f"ncu failed: {errors[0]}"
    if "No kernels were profiled" in log_text:
        return "ncu profiled no kernel: the selection (-k, --top, --nvtx) matched no launch of the program"
    return f"ncu wrote no results (exit status {returncode})"


def run(program: Sequence[str], cwd: str | None, *, regex: str | None, name_base: str = "mangled",
        count: int | None = None, nvtx: Sequence[str] = ()) -> str:
    """Run ``program`` under ncu (its output passes through); return the CSV text ncu wrote.

    ncu writes its log into a private directory of its own (created fresh, mode 0700), never beside
    the report where a planted link could redirect it; the caller keeps the text where the user asked.
    Raises GpuscopeError with the fix when ncu is missing, counters are not permitted, or nothing
    was profiled.
    """
    ncu = find_ncu()
    metrics = select_metrics(available_metrics(ncu))
    with tempfile.TemporaryDirectory(prefix="gpuscope-ncu-") as private:
        log = Path(private) / "ncu.csv"
        cmd = command(ncu, program, log, metrics, regex=regex, name_base=name_base, count=count, nvtx=nvtx)
        try:
            proc = subprocess.run(cmd, cwd=cwd or None, stdin=subprocess.DEVNULL, capture_output=False)
        except OSError as exc:
            raise GpuscopeError(f"cannot run {ncu}: {exc.strerror}", exit_code=3) from None
        text = log.read_text(errors="replace") if log.is_file() else ""
    reason = failure(text, proc.returncode)
    if reason:
        raise GpuscopeError(reason, exit_code=3)
    return text

"""Micro-benchmarks that measure a machine's roofs (``gpuscope roofline --calibrate``).

On a GPU, through PyTorch, timed with CUDA events (best of several trials, after a warm-up):

- DRAM bandwidth: a device-to-device copy of a buffer many times the L2 cache; bytes read plus
  bytes written over the time.
- L2 bandwidth: the same copy of a buffer that fits in L2 (source and destination together take
  half of it), repeated back to back in a CUDA graph so that launches do not leave gaps.
- Tensor-core peaks: large square matrix products in BF16, FP16, TF32 (FP32 inputs with TF32
  allowed), FP64 (tensor cores on A100, H100, H200, B200) and FP8 (``torch._scaled_mm``, where the
  GPU and PyTorch have it).
- FP32 CUDA-core peak: a matrix product in FP32 with TF32 off (what cuBLAS reaches with FMA
  instructions; a little under the datasheet's FMA peak).

On a CPU, timed with ``time.perf_counter``: memory bandwidth (a copy of a buffer far larger than
the caches) and FP32 and FP64 matrix-product peaks, through PyTorch (or numpy without it).

The whole set runs ``repeats`` times (each repeat measures every ceiling once); each ceiling is the
median of its repeats, with their spread (:func:`.calibration.combine`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..analysis.roofline.calibration import combine
from ..analysis.roofline.ceilings import Ceilings, cpu_name
from ..errors import GpuscopeError

# GPUs whose FP64 matrix products run on tensor cores (DMMA)
FP64_TENSOR_CC = {(8, 0), (9, 0), (10, 0)}


@dataclass(frozen=True)
class Sizes:
    """How big and how long the benchmarks are."""

    copy_bytes: int = 2 << 30  # per buffer, for DRAM
    gemm_n: int = 8192  # tensor-core products
    gemm_n_cuda_cores: int = 4096  # FP32 without TF32, and FP64
    reps: int = 10  # calls per timed trial
    trials: int = 5
    l2_reps: int = 200
    repeats: int = 3  # of the whole set: each ceiling is the median of its repeats

    @classmethod
    def cpu(cls) -> Sizes:
        return cls(copy_bytes=128 << 20, gemm_n=1024, gemm_n_cuda_cores=1024, reps=2, trials=2, l2_reps=0)

    @classmethod
    def tiny(cls) -> Sizes:
        """Sizes for a test: milliseconds, numbers meaningless."""
        return cls(copy_bytes=1 << 20, gemm_n=64, gemm_n_cuda_cores=64, reps=1, trials=1, l2_reps=0)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def calibrate(device: str = "auto", sizes: Sizes | None = None, repeats: int | None = None) -> Ceilings:
    """Measure the roofs of ``device`` (``cuda``, ``cuda:N``, ``cpu``, or ``auto``: the first GPU if
    PyTorch sees one, else the CPU) ``repeats`` times (default: the sizes'); return the medians as
    :class:`Ceilings` with ``sources`` ``measured`` and each ceiling's spread and samples in ``details``.
    """
    if repeats is not None and repeats < 1:
        raise GpuscopeError(f"--repeats must be at least 1, not {repeats}")
    torch = _import_torch()
    if device == "auto":
        device = "cuda" if torch is not None and torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if torch is None or not torch.cuda.is_available():
            raise GpuscopeError("no GPU that PyTorch can use: calibrate needs a CUDA build of torch and a "
                                "GPU (or --device cpu)")
        s = sizes or Sizes()
        return combine([_calibrate_cuda(torch, torch.device(device), s) for _ in range(repeats or s.repeats)])
    if device != "cpu":
        raise GpuscopeError(f"unknown device {device!r}: use cuda, cuda:N, cpu or auto")
    s = sizes or Sizes.cpu()
    return combine([_calibrate_cpu(torch, s) for _ in range(repeats or s.repeats)])


# -- GPU ---------------------------------------------------------------------------------------------
def _cuda_seconds(torch: Any, fn: Callable[[], Any], reps: int, trials: int) -> float:
    """Best time of one call of ``fn`` over ``trials`` timed runs of ``reps`` calls each."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(trials):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / reps)
    return best


def _graph_of(torch: Any, fn: Callable[[], Any], reps: int) -> Callable[[], Any]:
    """``fn`` called ``reps`` times, captured as one CUDA graph (no launch gaps between calls)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    return graph.replay


def _copy_bandwidth(torch: Any, dev: Any, n: int, s: Sizes) -> float:
    src = torch.ones(n, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2.0 * n * 4 / _cuda_seconds(torch, lambda: dst.copy_(src), s.reps, s.trials)


def _gemm(torch: Any, dev: Any, dtype: Any, n: int, s: Sizes) -> float:
    a = torch.randn(n, n, device=dev).to(dtype)
    b = torch.randn(n, n, device=dev).to(dtype)
    out = torch.empty(n, n, device=dev, dtype=dtype)
    return 2.0 * n**3 / _cuda_seconds(torch, lambda: torch.mm(a, b, out=out), s.reps, s.trials)


def _fp8_gemm(torch: Any, dev: Any, n: int, s: Sizes) -> float:
    f8 = torch.float8_e4m3fn
    a = torch.randn(n, n, device=dev).to(f8)
    b = torch.randn(n, n, device=dev).to(f8).t()  # column-major, as _scaled_mm wants
    one = torch.ones((), device=dev)
    fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    return 2.0 * n**3 / _cuda_seconds(torch, fn, s.reps, s.trials)


def _calibrate_cuda(torch: Any, dev: Any, s: Sizes) -> Ceilings:
    props = torch.cuda.get_device_properties(dev)
    cc = (props.major, props.minor)
    name = torch.cuda.get_device_name(dev)
    c = Ceilings(name, measured_at=_now())
    skipped: dict[str, str] = {}
    with torch.cuda.device(dev):
        free, _ = torch.cuda.mem_get_info()
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        nbytes = min(max(s.copy_bytes, 8 * l2), free // 4)
        c.dram_bytes_per_s = _copy_bandwidth(torch, dev, nbytes // 4, s)
        if l2 and s.l2_reps:
            small = torch.ones(l2 // 16, device=dev, dtype=torch.float32)  # 1/4 of L2 each
            into = torch.empty_like(small)
            replay = _graph_of(torch, lambda: into.copy_(small), s.l2_reps)
            t = _cuda_seconds(torch, replay, 1, s.trials)
            c.l2_bytes_per_s = 2.0 * small.numel() * 4 * s.l2_reps / t
        matmul = torch.backends.cuda.matmul
        saved = matmul.allow_tf32
        try:
            c.flops["tensor_bf16"] = _gemm(torch, dev, torch.bfloat16, s.gemm_n, s)
            c.flops["tensor_fp16"] = _gemm(torch, dev, torch.float16, s.gemm_n, s)
            matmul.allow_tf32 = True
            c.flops["tensor_tf32"] = _gemm(torch, dev, torch.float32, s.gemm_n, s)
            matmul.allow_tf32 = False
            c.flops["fp32"] = _gemm(torch, dev, torch.float32, s.gemm_n_cuda_cores, s)
        finally:
            matmul.allow_tf32 = saved
        fp64 = _gemm(torch, dev, torch.float64, s.gemm_n_cuda_cores, s)
        c.flops["tensor_fp64" if cc in FP64_TENSOR_CC else "fp64"] = fp64
        if cc >= (8, 9) and hasattr(torch, "_scaled_mm"):
            try:
                c.flops["tensor_fp8"] = _fp8_gemm(torch, dev, s.gemm_n, s)
            except (RuntimeError, TypeError) as exc:  # this torch or GPU has no FP8 product
                skipped["tensor_fp8"] = str(exc).strip().splitlines()[0]
        else:
            skipped["tensor_fp8"] = f"compute capability {cc[0]}.{cc[1]} has no FP8 tensor cores"
    c.sources = {k: "measured" for k in ("dram", *(["l2"] if c.l2_bytes_per_s else []), *c.flops)}
    c.details = {"kind": "cuda", "compute_capability": f"{cc[0]}.{cc[1]}", "torch": torch.__version__,
                 "copy_bytes": nbytes, "gemm_n": s.gemm_n, "gemm_n_cuda_cores": s.gemm_n_cuda_cores,
                 "skipped": skipped}
    return c


# -- CPU ---------------------------------------------------------------------------------------------
def _cpu_seconds(fn: Callable[[], Any], reps: int, trials: int) -> float:
    fn()
    best = float("inf")
    for _ in range(trials):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return max(best, 1e-9)


def _cpu_copy(torch: Any, n: int) -> Callable[[], Any]:
    """A copy of ``n`` float32 (through torch, which uses every core, else numpy)."""
    if torch is not None:
        src, dst = torch.ones(n), torch.empty(n)
        return lambda: dst.copy_(src)
    import numpy as np

    a, b = np.ones(n, dtype=np.float32), np.empty(n, dtype=np.float32)
    return lambda: np.copyto(b, a)


def _cpu_gemm(torch: Any, m: int, dtype: str) -> Callable[[], Any]:
    """An ``m``-square matrix product in ``dtype``."""
    if torch is not None:
        x = torch.randn(m, m, dtype=getattr(torch, dtype))
        y, out = x.clone(), torch.empty(m, m, dtype=x.dtype)
        return lambda: torch.mm(x, y, out=out)
    import numpy as np

    xn = np.random.default_rng(0).standard_normal((m, m)).astype(dtype)
    return lambda: xn @ xn


def _calibrate_cpu(torch: Any, s: Sizes) -> Ceilings:
    c = Ceilings(cpu_name(), measured_at=_now())
    n = s.copy_bytes // 4
    c.dram_bytes_per_s = 2.0 * n * 4 / _cpu_seconds(_cpu_copy(torch, n), s.reps, s.trials)
    for key, dtype in (("fp32", "float32"), ("fp64", "float64")):
        m = s.gemm_n
        c.flops[key] = 2.0 * m**3 / _cpu_seconds(_cpu_gemm(torch, m, dtype), s.reps, s.trials)
    c.sources = {k: "measured" for k in ("dram", *c.flops)}
    c.details = {"kind": "cpu", "library": "torch" if torch is not None else "numpy",
                 "copy_bytes": s.copy_bytes, "gemm_n": s.gemm_n,
                 "threads": torch.get_num_threads() if torch is not None else None}
    return c

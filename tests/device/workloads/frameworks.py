"""Kernels from several frameworks in one process: CuPy, Triton, Numba, JAX (whichever import)."""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def cupy_part():
    import cupy as cp

    x = cp.arange(1 << 20, dtype=cp.float32)
    return float((x * 2).sum())


def triton_part():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def gpuscope_triton_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    x = torch.randn(1 << 20, device="cuda")
    out = torch.empty_like(x)
    gpuscope_triton_add[(x.numel() // 1024,)](x, x, out, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    return float(out.sum())


def numba_part():
    import numpy as np
    from numba import cuda

    @cuda.jit
    def gpuscope_numba_scale(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] *= 2.0

    a = cuda.to_device(np.ones(1 << 20, dtype=np.float32))
    gpuscope_numba_scale[1024, 1024](a)
    return float(a.copy_to_host().sum())


def jax_part():
    import jax.numpy as jnp

    x = jnp.ones((1024, 1024))
    return float((x @ x).sum())


if __name__ == "__main__":
    for part in (cupy_part, triton_part, numba_part, jax_part):
        try:
            print(part.__name__, part())
        except Exception as exc:  # a framework missing on this machine is not a failure of ours
            print(part.__name__, "skipped:", type(exc).__name__, exc)

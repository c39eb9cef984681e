"""A simulation loop written with CuPy array expressions: 4M damped oscillators (float32 position,
velocity, spring constant), 16 explicit time steps per iteration, each step a few lines of NumPy-
style arithmetic (force, velocity and position updates, energy): every operator is a kernel of its
own that reads its operands from memory and writes a temporary back, about a dozen kernels per
time step. The harness waits on CuPy's current stream.

Fixes:

- ``fused``: the time step as a ``cupy.fuse`` function: one kernel per time step;
- ``elementwise_kernel``: the time step as a hand-written ``cupy.ElementwiseKernel``: one kernel per
  time step, writing the position and velocity in place.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, gpu_only, main, need  # noqa: E402

N = 4 * 1024 * 1024
SUBSTEPS = 16
DT, DAMPING = 1e-3, 0.05


def wait(out: Any) -> None:
    """Wait for the work queued on CuPy's current stream."""
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.cuda.get_current_stream().synchronize()


def substep(x: Any, v: Any, k: Any) -> tuple[Any, Any, Any]:
    """One time step: spring force and damping, then the velocity and position updates, and the energy."""
    force = -k * x - DAMPING * v
    v = v + DT * force
    x = x + DT * v
    energy = 0.5 * (v * v + k * x * x)
    return x, v, energy


def build(variant: str, setup: Setup) -> Step:
    """One iteration (``SUBSTEPS`` time steps) of ``variant``."""
    gpu_only(setup, "CuPy")
    cp = need("cupy")
    cp.random.seed(0)
    x = cp.random.standard_normal(N, dtype=cp.float32)
    v = cp.zeros(N, dtype=cp.float32)
    k = cp.random.uniform(0.5, 2.0, N, dtype=cp.float32)
    state = {"x": x, "v": v}

    if variant == "elementwise_kernel":
        kernel = cp.ElementwiseKernel(
            "float32 k, float32 dt, float32 c", "float32 x, float32 v, float32 energy",
            """
            float force = -k * x - c * v;
            v = v + dt * force;
            x = x + dt * v;
            energy = 0.5f * (v * v + k * x * x);
            """,
            "oscillator_step")
        energy = cp.empty_like(x)

        def step() -> Any:
            for _ in range(SUBSTEPS):
                kernel(k, cp.float32(DT), cp.float32(DAMPING), x, v, energy)
            return energy
    else:
        fn = cp.fuse(substep) if variant == "fused" else substep

        def step() -> Any:
            energy = None
            for _ in range(SUBSTEPS):
                state["x"], state["v"], energy = fn(state["x"], state["v"], k)
            return energy

    return step


PROGRAM = Program(
    name="cupy_elementwise",
    description="CuPy array expressions on 4M elements, 16 time steps per iteration, a kernel per operator",
    variants=(
        Variant("as_written", "NumPy-style CuPy expressions"),
        Variant("fused", "cupy.fuse of the time step", ("unfused_elementwise",)),
        Variant("elementwise_kernel", "one cupy.ElementwiseKernel per time step", ("unfused_elementwise",)),
    ),
    build=build,
    iterations=1500,
    measure_iterations=100,
    warmup=10,
    sync=wait,
)

if __name__ == "__main__":
    main(PROGRAM)

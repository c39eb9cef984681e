"""An MLP trained with JAX, written as JAX's and optax's examples write it: 4 dense layers (512 ->
3 x 2048 ReLU -> 10), cross-entropy, ``optax.adam``, one ``@jax.jit`` training step called from a
Python loop; batch 256 of random data already on the device. One iteration is 8 training steps,
8 calls of the jitted step: each dispatches a few GPU kernels of a fraction of a millisecond, so
the dispatch from Python may set the pace. The harness waits with ``block_until_ready`` on the last
loss. Without optax installed, plain SGD with ``jax.grad`` takes its place.

Fixes:

- ``scan8``: the 8 steps inside one jitted function, as a ``jax.lax.scan`` over 8 stacked batches:
  one dispatch per iteration instead of 8;
- ``batch_4x``: batch 1024 (the same number of dispatches for 4x the samples).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, main, need  # noqa: E402

BATCH = 256
STEPS = 8  # training steps per iteration


def wait(out: Any) -> None:
    """Block until the last iteration's outputs are computed."""
    if out is not None:
        sys.modules["jax"].block_until_ready(out)


def build(variant: str, setup: Setup) -> Step:
    """One iteration (``STEPS`` training steps) of ``variant``."""
    if not setup.cuda:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    jax = need("jax")
    jnp = jax.numpy
    if setup.cuda and jax.default_backend() != "gpu":
        sys.exit(f"this program needs JAX with CUDA; JAX runs on {jax.default_backend()} here")
    try:
        import optax
    except ImportError:
        optax = None
    d_in, width = setup.pick((512, 2048), (32, 64))
    batch = setup.pick(BATCH, 8) * (4 if variant == "batch_4x" else 1)
    sizes = [d_in, width, width, width, 10]
    keys = jax.random.split(jax.random.PRNGKey(0), len(sizes) + 1)
    params = [(jax.random.normal(k, (m, n)) * (2 / m) ** 0.5, jnp.zeros(n))
              for k, m, n in zip(keys, sizes[:-1], sizes[1:])]
    xs = jax.random.normal(keys[-2], (STEPS, batch, d_in))
    ys = jax.random.randint(keys[-1], (STEPS, batch), 0, 10)

    def loss_fn(params: list[Any], x: Any, y: Any) -> Any:
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = params[-1]
        logits = h @ w + b
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    if optax is not None:
        opt = optax.adam(1e-3)
        opt_state = opt.init(params)

        def update(params: list[Any], opt_state: Any, x: Any, y: Any) -> tuple[Any, Any, Any]:
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            updates, opt_state = opt.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss
    else:
        opt_state = None

        def update(params: list[Any], opt_state: Any, x: Any, y: Any) -> tuple[Any, Any, Any]:
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            return jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, params, grads), opt_state, loss

    state = {"params": params, "opt": opt_state}
    if variant == "scan8":
        @jax.jit
        def train_steps(params: list[Any], opt_state: Any, xs: Any, ys: Any) -> tuple[Any, Any, Any]:
            def body(carry: tuple[Any, Any], xy: tuple[Any, Any]) -> tuple[tuple[Any, Any], Any]:
                p, s, loss = update(*carry, *xy)
                return (p, s), loss

            (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), (xs, ys))
            return params, opt_state, losses[-1]

        def step() -> Any:
            state["params"], state["opt"], loss = train_steps(state["params"], state["opt"], xs, ys)
            return loss
    else:
        train_step = jax.jit(update)

        batches = [(xs[i], ys[i]) for i in range(STEPS)]  # one array per batch, as a loader would give them

        def step() -> Any:
            loss = None
            for x, y in batches:
                state["params"], state["opt"], loss = train_step(state["params"], state["opt"], x, y)
            return loss

    return step


PROGRAM = Program(
    name="jax_mlp",
    description="JAX 4-layer MLP (512 -> 3 x 2048 -> 10), jitted step with optax adam in a Python loop, "
                "batch 256; one iteration = 8 steps",
    variants=(
        Variant("as_written", "8 calls of the jitted step", samples=BATCH * STEPS),
        Variant("scan8", "jax.lax.scan over 8 steps in one jitted call", ("launch_bound",), samples=BATCH * STEPS),
        Variant("batch_4x", "batch 1024", ("gpu_memory",), work_changing=True, samples=4 * BATCH * STEPS),
    ),
    build=build,
    iterations=1000,
    measure_iterations=100,
    warmup=10,
    sync=wait,
)

if __name__ == "__main__":
    main(PROGRAM)

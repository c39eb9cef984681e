"""The small hand-written GPT of ``nanogpt_compiled.py`` (6 layers, d 384, sequence 256, batch 32,
bf16 autocast, AdamW) compiled as written with ``torch.compile(model, mode="reduce-overhead")``:
forward and backward replay as CUDA graphs, so launches should no longer set the step time.
Optimizer marks only. Nothing to fix was expected; the one candidate, a 4x batch (128), changes
the work of a step and is compared per sample. On an H100 it measured 46% less time per sample
(4.8 ms a step of 32, 10.4 ms a step of 128): the graphs replay, but the GPU still waits between
replays for the host, and a larger call is the launch-bound fix for a program already in CUDA
graphs ("give each call more work"), so the variant names that rule beside the memory one.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, main  # noqa: E402
from nanogpt_compiled import BATCH, build_training  # noqa: E402


def build(variant: str, setup: Setup) -> Step:
    """One training step of ``variant``."""
    return build_training(variant, setup, "reduce-overhead", BATCH * (4 if variant == "batch_4x" else 1))


PROGRAM = Program(
    name="nanogpt_reduce_overhead",
    description='hand-written GPT (6 layers, d 384, batch 32), torch.compile mode="reduce-overhead", bf16, AdamW',
    variants=(
        Variant("as_written", 'torch.compile(model, mode="reduce-overhead")', samples=BATCH),
        Variant("batch_4x", "batch 128", ("gpu_memory", "launch_bound"), work_changing=True, samples=4 * BATCH),
    ),
    build=build,
    iterations=800,
    measure_iterations=100,
    warmup=20,
    nothing_to_fix=True,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)

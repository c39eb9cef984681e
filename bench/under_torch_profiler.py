"""Run a Python program under torch.profiler, unchanged: CPU and CUDA activities with
``record_shapes``, as a user turns it on around a whole script. The trace is not exported (the
cost compared is the program's own timing while profiled).

    python3 bench/under_torch_profiler.py PROGRAM.py [ARGS...]

With ``TORCH_PROFILER_ACTIVITIES=cuda`` in the environment, the CUDA activity alone (Kineto's CUPTI
records, no CPU operators and no shapes): torch.profiler's own floor.
"""

from __future__ import annotations

import os
import runpy
import sys


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: under_torch_profiler.py PROGRAM.py [ARGS...]")
    from torch.profiler import ProfilerActivity, profile

    program = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, program.rpartition("/")[0] or ".")
    cuda_only = os.environ.get("TORCH_PROFILER_ACTIVITIES") == "cuda"
    activities = [ProfilerActivity.CUDA] if cuda_only else [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=activities, record_shapes=not cuda_only):
        runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main()

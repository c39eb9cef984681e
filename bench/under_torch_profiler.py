"""Run a Python program under torch.profiler, unchanged: CPU and CUDA activities with
``record_shapes``, as a user turns it on around a whole script. The trace is not exported (the
cost compared is the program's own timing while profiled).

    python3 bench/under_torch_profiler.py PROGRAM.py [ARGS...]
"""

from __future__ import annotations

import runpy
import sys


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: under_torch_profiler.py PROGRAM.py [ARGS...]")
    from torch.profiler import ProfilerActivity, profile

    program = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, program.rpartition("/")[0] or ".")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True):
        runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main()

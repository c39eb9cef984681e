"""Launches kernels steadily, then ends abruptly: os._exit, SIGKILL, an exception or SIGTERM.

Writes the CLOCK_MONOTONIC time of its last completed kernel batch just before ending, so a check
can ask whether the report holds what happened up to about a second before the end.
"""

import argparse
import os
import signal
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["exit", "kill", "raise", "term"])
    p.add_argument("--seconds", type=float, default=2.5)
    p.add_argument("--marker", required=True)
    args = p.parse_args()
    a = torch.randn(1024, 1024, device="cuda")
    t_end = time.monotonic() + args.seconds
    while time.monotonic() < t_end:
        a = torch.tanh(a @ a * 1e-3)
        torch.cuda.synchronize()
        last = time.monotonic_ns()
        time.sleep(0.005)
    with open(args.marker, "w") as fh:
        fh.write(str(last))
    if args.mode == "exit":
        os._exit(7)
    if args.mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if args.mode == "term":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    raise RuntimeError("planted failure")


if __name__ == "__main__":
    main()

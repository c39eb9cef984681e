"""Ten million tiny kernels, for the target's memory growth while records are shipped out.

Launches ``--kernels`` one-element additions in chunks, and writes the process's resident set
size (from /proc) after each chunk: with records leaving the process as they complete, it must
stay flat however many kernels run. At the end it also writes each thread's CPU time (from
/proc), so the CPU that handling the records costs on threads other than the main one shows.
"""

import argparse
import json
import os
import time

import torch


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of each thread of this process, by ``name/tid``."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[f"{name}/{tid}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--kernels", type=int, default=10_000_000)
    p.add_argument("--chunks", type=int, default=10)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    x = torch.zeros(1, device="cuda")
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()
    points = [{"kernels": 0, "rss_bytes": rss_bytes(), "t": time.perf_counter()}]
    per = args.kernels // args.chunks
    done = 0
    for _ in range(args.chunks):
        for _ in range(per):
            x.add_(1)
        torch.cuda.synchronize()
        done += per
        points.append({"kernels": done, "rss_bytes": rss_bytes(), "t": time.perf_counter()})
        print(f"{done:,} kernels, rss {points[-1]['rss_bytes'] / 2**20:.0f} MiB", flush=True)
    with open(args.out, "w") as fh:
        json.dump({"points": points, "value": float(x.item()), "main_tid": os.getpid(),
                   "thread_cpu_s": thread_cpu()}, fh)


if __name__ == "__main__":
    main()

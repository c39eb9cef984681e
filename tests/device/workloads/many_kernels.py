"""Ten million tiny kernels, for the target's memory growth while records are shipped out.

Launches ``--kernels`` one-element additions in chunks, and writes the process's resident set
size (from /proc) after each chunk: with records leaving the process as they complete, it must
stay flat however many kernels run.
"""

import argparse
import json
import time

import torch


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


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
        json.dump({"points": points, "value": float(x.item())}, fh)


if __name__ == "__main__":
    main()

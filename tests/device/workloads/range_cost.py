"""What one recorded range costs the program: ``gpuscope.push_range``/``pop_range`` pairs around one
tiny kernel each, timed per pair (run it untraced and under ``gpuscope profile`` to compare).

    python3 range_cost.py --pairs 200000 --out cost.json
"""

import argparse
import json
import time

import torch

import gpuscope


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pairs", type=int, default=200_000)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    x = torch.zeros(1, device="cuda")
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()
    out = {}
    for label, ranged in (("kernel", False), ("kernel_in_range", True), ("kernel", False), ("kernel_in_range", True)):
        t = time.perf_counter()
        for _ in range(args.pairs):
            if ranged:
                gpuscope.push_range("r")
                x.add_(1)
                gpuscope.pop_range()
            else:
                x.add_(1)
        torch.cuda.synchronize()
        out.setdefault(label, []).append((time.perf_counter() - t) / args.pairs * 1e6)
    doc = {k: min(v) for k, v in out.items()}
    doc["range_us"] = doc["kernel_in_range"] - doc["kernel"]
    with open(args.out, "w") as fh:
        json.dump(doc, fh)
    print(json.dumps(doc))


if __name__ == "__main__":
    main()

"""Where cupti-python's activity objects point: inside CUPTI's buffer, or to copies of their own.

Prints, per completed buffer, how many records there were, how many contiguous blocks their
addresses form (gaps over 4 KiB split blocks), and the gap sizes; then what one object holds.
"""

import numpy as np
import torch
from cupti import cupti

seen = []


def request():
    return 8 * 1024 * 1024, 0


def complete(acts):
    ptrs = np.array(sorted(a.ptr for a in acts), dtype=np.int64)
    gaps = np.diff(ptrs)
    seen.append({"records": len(acts), "blocks": int((gaps > 4096).sum()) + 1 if len(acts) else 0,
                 "gap_p50": int(np.median(gaps)) if len(gaps) else 0, "gap_max": int(gaps.max()) if len(gaps) else 0,
                 "span": int(ptrs[-1] - ptrs[0]) if len(ptrs) else 0, "types": sorted({type(a).__name__ for a in acts})})
    if len(seen) == 1 and acts:
        a = acts[0]
        print("object attrs:", [n for n in dir(a) if not n.startswith("__")][:40])
        print("ptr", a.ptr, "type", type(a))


cupti.activity_register_callbacks(request, complete)
cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
x = torch.randn(256, 256, device="cuda")
for _ in range(20000):
    x = x * 1.0001
torch.cuda.synchronize()
cupti.activity_flush_all(1)
for s in seen:
    print(s)

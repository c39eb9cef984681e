"""Planted: a model compiled with ``torch.compile`` and an empty compile cache: the first step
compiles (Dynamo, Inductor, Triton) for seconds before any training happens.

Fix (``--fixed``): a compile cache kept between runs (``--cache-dir``, made warm by one run first).
The workload's number is the wall time of all its steps (``total_s``), the first one included.
"""

import os
import subprocess
import sys
import tempfile

from common import parser

CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def _caches(args) -> None:  # type: ignore[no-untyped-def]
    """Point the compile caches at a fresh directory (planted) or at --cache-dir, warmed (fixed)."""
    if not args.fixed:
        base = tempfile.mkdtemp(prefix="cold-compile-")
    else:
        base = args.cache_dir
        marker = os.path.join(base, "warm")
        if not os.path.exists(marker):
            os.makedirs(base, exist_ok=True)
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(base, "inductor"),
                   "TRITON_CACHE_DIR": os.path.join(base, "triton")}
            cmd = [sys.executable, __file__, "--steps", "2", "--warmup", "1", "--caches-from-env"]
            subprocess.run(cmd, env=env, check=True)
            open(marker, "w").close()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(base, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(base, "triton")


def main() -> None:
    p = parser(__doc__, steps=60, warmup=1)
    p.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "gpuscope-warm-compile"))
    p.add_argument("--caches-from-env", action="store_true", help="use the cache variables as they are")
    args = p.parse_args()
    if not args.caches_from_env:
        _caches(args)
    import torch  # after the cache variables are set

    from common import cuda, run

    dev = cuda()
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(1024, 1024), torch.nn.LayerNorm(1024), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    compiled = torch.compile(model)  # PLANTED with a cold cache
    x = torch.randn(512, 1024, device=dev)

    def step(i: int) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    run(step, args, metric="total_s")


if __name__ == "__main__":
    main()

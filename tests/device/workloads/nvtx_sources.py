"""NVTX from several sources in one process, to see which of them gpuscope records.

torch.cuda.nvtx push/pop and marks, torch.autograd.profiler.emit_nvtx (an NVTX range per op), and
the `nvtx` package (annotate, push_range, start/end ranges, a domain). Writes to --out what the
`nvtx` package believes about its domains (it hands out a no-op domain when NVTX says that no tool
is attached).
"""

import argparse
import json

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    x = torch.randn(512, 512, device="cuda", requires_grad=True)
    findings = {}
    torch.cuda.nvtx.range_push("torch_push_outer")
    torch.cuda.nvtx.range_push("torch_push_inner")
    y = (x @ x).relu()
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.mark("torch_mark")
    torch.cuda.nvtx.range_pop()
    with torch.autograd.profiler.emit_nvtx():
        (x @ x).sum().backward()
    try:
        import nvtx
        from nvtx._lib.lib import DomainHandle, DummyDomain

        findings["nvtx_version"] = getattr(nvtx, "__version__", "?")
        findings["default_domain_enabled"] = DomainHandle("NVTX").enabled()
        findings["default_domain_is_dummy"] = isinstance(nvtx.get_domain(None), DummyDomain)
        with nvtx.annotate("nvtx_annotate", color="red"):
            y = (y @ y).relu()
        nvtx.push_range("nvtx_push", domain="pkg_domain")
        y = y + 1
        nvtx.pop_range(domain="pkg_domain")
        rid = nvtx.start_range("nvtx_start_end")
        y = y * 2
        nvtx.end_range(rid)
    except Exception as exc:  # the package may be missing
        findings["nvtx_error"] = f"{type(exc).__name__}: {exc}"
    torch.cuda.synchronize()
    json.dump(findings, open(args.out, "w"), indent=1)
    print(findings)


if __name__ == "__main__":
    main()

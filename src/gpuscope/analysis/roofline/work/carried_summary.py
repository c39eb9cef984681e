"""What carrying work to kernels outside the operator sample windows did in a report
(:mod:`.carried`): the counts, and the roofline's note about them."""

from __future__ import annotations

from ....trace.report import Report
from ...ranges.op_windows import sampled, windows
from .carried import _SUMMARY, Carried
from .kernels import kernel_work


def summary(report: Report) -> Carried | None:
    """Return what carrying did in ``report`` (None where nothing was sampled, or without kernels)."""
    if not sampled(report):
        return None
    kernel_work(report)  # it calls carry(), which fills the summary
    return _SUMMARY.get(report)


def note(report: Report) -> str | None:
    """One line for the roofline's notes: the sample windows and the share of kernel time that got carried
    work; None where operators were not sampled."""
    if not sampled(report):
        return None
    n, ops, ns = windows(report)
    head = (f"Operators were recorded in {n} sample window{'s' if n != 1 else ''} only (--trace torch-shapes; "
            f"{ops:,} operators in {ns / 1e6:.4g} ms)")
    c = summary(report)
    if c is None or not c.kernel_ns:
        return head + ": the rows cover those windows, not the whole run."
    pct = lambda v: f"{100 * v / c.kernel_ns:.1f}%"  # noqa: E731
    text = (f"{head}. Outside them {c.outside:,} kernel launches ({pct(c.outside_ns)} of kernel time); "
            f"{c.carried:,} of them ({pct(c.carried_ns)}) took the FLOPs and bytes of sampled launches of the "
            "same kernel configuration")
    if c.mixed:
        text += f" ({c.mixed:,} from sampled launches that differed: their mean)"
    left = c.outside_ns - c.carried_ns
    return text + (f"; {pct(left)} is in kernels whose configuration was never sampled, or sampled without "
                   "a work model." if left > 0 else ".")

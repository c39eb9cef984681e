"""The roofline as a picture: a log-log chart of achieved FLOP/s against arithmetic intensity, with
the device's roofs drawn and labelled, one point per kernel (or layer) sized by its time.

PNG and SVG come from matplotlib (the ``plot`` extra); HTML holds the SVG and a table of the points.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..analysis.roofline.ceilings import LABELS, Ceilings
from ..errors import GpuscopeError
from ..safe_text import html as esc
from ..safe_text import plot as plot_text
from ..trace.outputs import write_output
from ..units import scaled

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = (".png", ".svg", ".html")
COLORS = {"compute": "#d62728", "memory": "#1f77b4", "latency": "#7f7f7f", "unknown": "#bcbd22"}
LABELLED = 8  # points named on the chart: the largest headrooms


def short_name(name: str, width: int = 48) -> str:
    """A kernel name cut to its function (no return type, parameters or template arguments); an
    operator's name (``aten::mm``) as it is."""
    if name.startswith("aten::"):
        return name
    text = name.removeprefix("void ").split("(")[0]
    depth, out = 0, []
    for ch in text:
        depth += (ch == "<") - (ch == ">")
        if depth == 0 and ch != ">":
            out.append(ch)
    bare = "".join(out).split("::")[-1] or name
    return bare if len(bare) <= width else bare[: width - 1] + "…"


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise GpuscopeError("the roofline chart needs matplotlib: pip install 'gpuscope[plot]' "
                            "(or matplotlib); the tables need nothing more") from None
    return matplotlib


def figure(points: pd.DataFrame, ceilings: Ceilings, title: str) -> Figure:
    """Return the roofline chart of ``points`` (columns of :func:`..analysis.roofline.points.kernel_points`)."""
    _matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 6.5), dpi=100)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("Arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("Performance (FLOP/s)")
    ax.set_title(plot_text(title))
    placed = points[(points["intensity"] > 0) & (points["achieved_flops_per_s"] > 0)]
    peaks = {k: v for k, v in ceilings.flops.items() if v}
    bws = {k: v for k, v in (("dram", ceilings.dram_bytes_per_s), ("l2", ceilings.l2_bytes_per_s)) if v}
    top = max(peaks.values(), default=float(placed["achieved_flops_per_s"].max() if len(placed) else 1e12))
    slowest = min(bws.values(), default=0.0)
    ridge = top / slowest if slowest else 100.0
    xs = [*placed["intensity"].tolist(), ridge]
    x0, x1 = 10 ** math.floor(math.log10(min(xs) / 4)), 10 ** math.ceil(math.log10(max(xs) * 10))
    for key, bw in bws.items():
        x_end = top / bw
        line = ax.plot([x0, x_end], [bw * x0, top], color="black", lw=1.5 if key == "dram" else 1.0,
                       ls="-" if key == "dram" else "--")[0]
        line.set_gid(f"ceiling-{key}")
        ax.annotate(f"{LABELS[key]} {scaled(bw, 'B/s')}", (x0 * 1.3, bw * x0 * 1.3), fontsize=8, rotation=0)
    dram = ceilings.dram_bytes_per_s or slowest
    for key, peak in sorted(peaks.items(), key=lambda kv: -kv[1]):
        start = peak / dram if dram else x0
        line = ax.plot([start, x1], [peak, peak], color="black", lw=1.0, ls="-" if key.startswith("tensor") else ":")[0]
        line.set_gid(f"ceiling-{key}")
        ax.annotate(f"{LABELS.get(key, key)} {scaled(peak, 'FLOP/s')}", (x1 / 1.05, peak * 1.08), ha="right",
                    fontsize=8)
    total = float(placed["time_ns"].sum()) or 1.0
    for bound, group in placed.groupby("bound"):
        sizes = 20 + 600 * group["time_ns"].astype(float) / total
        coll = ax.scatter(group["intensity"], group["achieved_flops_per_s"], s=sizes, alpha=0.6,
                          color=COLORS.get(str(bound), "#9467bd"), edgecolors="black", linewidths=0.5,
                          label=f"{bound} bound")
        coll.set_gid(f"points-{bound}")
    for r in placed.sort_values("headroom_ns", ascending=False).head(LABELLED).itertuples():
        ax.annotate(plot_text(short_name(str(r.name))), (r.intensity, r.achieved_flops_per_s), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    ymin = min([*placed["achieved_flops_per_s"].tolist(), top]) / 10
    ax.set_xlim(x0, x1)
    ax.set_ylim(10 ** math.floor(math.log10(ymin)), top * 3)
    ax.grid(True, which="major", ls=":", lw=0.5)
    if len(placed):
        ax.legend(loc="lower right", fontsize=8)
    left = len(points) - len(placed)
    if left:
        fig.text(0.01, 0.01, f"{left} without work or FLOPs not shown", fontsize=7)
    fig.tight_layout()
    return fig


def _bytes(fig: Figure, fmt: str) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format=fmt)
    return out.getvalue()


def _html(points: pd.DataFrame, ceilings: Ceilings, title: str, svg: str) -> str:
    cols = ["name", "layer", "kernels", "time_ns", "flops", "bytes", "intensity", "achieved_flops_per_s",
            "attainable_flops_per_s", "efficiency", "headroom_ns", "bound", "tensor_cores"]
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    rows = []
    for r in points[cols].itertuples(index=False):
        cells = "".join(f"<td>{esc('' if v is None or v != v else f'{v:.4g}' if isinstance(v, float) else str(v))}</td>"
                        for v in r)
        rows.append(f"<tr>{cells}</tr>")
    roofs = "".join(f"<li>{esc(LABELS.get(k, k))}: {esc(scaled(v, 'B/s' if k in ('dram', 'l2') else 'FLOP/s'))}"
                    f" ({esc(src)})</li>" for k, v, src in ceilings.rows())
    svg_body = svg[svg.index("<svg"):]
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
            "<style>body{font-family:sans-serif}table{border-collapse:collapse;font-size:12px}"
            "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child{text-align:left}</style>"
            f"</head><body><h1>{esc(title)}</h1>\n{svg_body}\n<h2>Ceilings</h2><ul>{roofs}</ul>\n"
            f"<h2>Points</h2><table><tr>{head}</tr>\n" + "\n".join(rows) + "</table></body></html>\n")


def write(points: pd.DataFrame, ceilings: Ceilings, path: Path, title: str, force: bool = False) -> None:
    """Write the chart to ``path``: PNG, SVG or HTML by its suffix (an existing name only with ``force``;
    a symbolic link is replaced, never followed)."""
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise GpuscopeError(f"cannot write a roofline chart as {path.name}: use .png, .svg or .html")
    fig = figure(points, ceilings, title)
    if suffix == ".html":
        data = _html(points, ceilings, title, _bytes(fig, "svg").decode()).encode()
    else:
        data = _bytes(fig, suffix[1:])
    write_output(path, data, force)

"""How a text table fits a width: which columns it keeps and how wide each one is.

Three steps, each taken only while the table is still too wide (docs/tables.md states the same order
for users):

1. text columns are elided in the middle, the widest first, down to :data:`SOFT_TEXT` characters
   (the name a row is about down to :data:`SOFT_NAME`, or a third of the line where that is less);
2. columns are left out, in the table's order of :data:`DROP_ORDER`; for a table not listed there,
   the spread statistics (StdDev, Min, Max, Med) first, right to left; then any other column from the
   right. The name column and one other column always stay;
3. text columns are elided further, down to :data:`HARD_TEXT` (the name to :data:`HARD_NAME`).

Numbers are never cut. Only this layout is narrowed: csv and json carry every column and whole names.
"""

from __future__ import annotations

from dataclasses import dataclass

GAP = "  "
SOFT_TEXT = 16
SOFT_NAME = 40
HARD_TEXT = 8
HARD_NAME = 20

# Per table (by its name): the column a row is about, and the labels of the columns to leave out
# first, in order. What a table is read for stays longest (roofline_sum: headroom and bound).
NAME_COLUMN: dict[str, str] = {
    "nvtx_gpu_proj_sum": "Range",
    "rank_sum": "Rank",
    "collective_sum": "Group",
    "memory_sum": "Location",
    "sync_sum": "Location",
    "cpu_thread_sum": "Thread",
    "host_sum": "Counter",
}
_SPREAD = ("StdDev", "Min", "Max", "Med")
DROP_ORDER: dict[str, tuple[str, ...]] = {
    "cuda_kern_exec_sum": ("TStdDev", "AStdDev", "QStdDev", "KStdDev", "TMin", "AMin", "QMin", "KMin",
                           "TMax", "AMax", "QMax", "KMax", "TMed", "AMed", "QMed", "KMed", "QAvg", "QCount",
                           "DevId", "TID", "AAvg"),
    "nvtx_gpu_proj_sum": ("Proj StdDev", "Proj Min", "Proj Max", "Proj Med", "Avg Range Lvl", "Avg Num Child",
                          "Avg GPU Ops", "Source", "Total Range Time"),
    "layer_sum": ("Top Kernel", "Fwd GPU Total", "Bwd GPU Total", "Kernels", "Fwd CPU", "Bwd CPU",
                  "Fwd GPU Self", "Bwd GPU Self", "Kind"),
    "cpu_hotspots": ("Wall Total", "Wall Self", "Samples", "CPU Total"),
    "cpu_hotspots_lines": ("Wall Total", "Wall Self", "Samples", "CPU Total"),
    "op_sum": ("Input Dtypes", "CPU Avg", "Kernels", "GPU Share"),
    "roofline_sum": ("Tensor Cores", "Attainable", "Intensity", "FLOPs", "Bytes", "Instances", "Total Time",
                     "Bandwidth", "Achieved", "Precision"),
    "sync_sum": ("Max", "Called From", "Function", "Avg"),
    "rank_sum": ("PID", "Collectives/Step", "Steps", "Overlapped", "Host"),
    "collective_sum": ("Algorithm", "PID", "Source", "Algorithm BW", "Group Size", "Bytes"),
    "rank_layer_sum": ("Kind", "Min", "Min Rank", "Max", "Ranks"),
    "memory_sum": ("Source", "Kept", "Time", "Device", "PID", "Count"),
    "diff": ("Share", "Base", "New", "95% CI"),  # gpuscope diff's tables: the change and its interval stay
}


@dataclass(frozen=True)
class Layout:
    """The columns kept (indexes into the table's columns, in order), their widths, and the labels of
    the columns left out."""

    keep: list[int]
    widths: list[int]
    dropped: list[str]


def name_column(table_name: str, labels: list[str], numeric: list[bool]) -> int | None:
    """Return the index of the column a row is about: the table's own, else the one labelled Name,
    else the last text column (None when every column is a number)."""
    for label in (NAME_COLUMN.get(table_name), "Name"):
        if label in labels:
            return labels.index(label)
    text = [i for i, n in enumerate(numeric) if not n]
    return text[-1] if text else None


def drop_order(table_name: str, labels: list[str], name: int | None) -> list[int]:
    """Return the indexes of the columns a narrow layout may leave out, first to go first."""
    listed = DROP_ORDER.get(table_name)
    if listed is None:
        listed = tuple(lab for lab in reversed(labels) if lab in _SPREAD)
    order = [labels.index(lab) for lab in listed if lab in labels]
    order += [i for i in reversed(range(len(labels))) if i not in order]
    return [i for i in order if i != name]


def fit(table_name: str, labels: list[str], widths: list[int], numeric: list[bool], width: int) -> Layout:
    """Return the layout of a table whose columns want ``widths`` (the widest cell or label of each)
    on a line of at most ``width`` characters, where that is possible at all."""
    name = name_column(table_name, labels, numeric)
    keep = list(range(len(widths)))
    dropped: list[str] = []
    shrunk = _shrink(widths, keep, numeric, name, width, soft=True)
    for i in drop_order(table_name, labels, name):
        if _total(shrunk, keep) <= width or len(keep) <= 2:
            break
        keep.remove(i)
        dropped.append(labels[i])
        # the names elided in step 1 get back the room of the column left out
        shrunk = _shrink(widths, keep, numeric, name, width, soft=True)
    shrunk = _shrink(shrunk, keep, numeric, name, width, soft=False)
    return Layout(keep, [shrunk[i] for i in keep], dropped)


def _total(widths: list[int], keep: list[int]) -> int:
    return sum(len(GAP) + widths[i] for i in keep)


def _shrink(widths: list[int], keep: list[int], numeric: list[bool], name: int | None, width: int,
            soft: bool) -> list[int]:
    """Return ``widths`` with the widest text columns of ``keep`` narrowed, one at a time, until the
    line fits ``width`` or every text column is at its floor."""
    widths = list(widths)
    soft_name = max(min(SOFT_NAME, width // 3), HARD_NAME)
    floor = {i: (soft_name if i == name else SOFT_TEXT) if soft else (HARD_NAME if i == name else HARD_TEXT)
             for i in keep}
    while _total(widths, keep) > width:
        text = [i for i in keep if not numeric[i] and widths[i] > floor[i]]
        if not text:
            break
        widest = max(text, key=lambda i: widths[i])
        widths[widest] -= min(widths[widest] - floor[widest], _total(widths, keep) - width, 8)
    return widths

"""Analysis over many reports (the nodes and ranks of one run, or runs side by side) through their
Parquet form (``gpuscope export -f parquet``), on DuckDB or on a Dask cluster.

:mod:`.sources` turns the paths a user gives into Parquet folders, one per distinct report;
:mod:`.queries` holds each summary once as DuckDB SQL over all folders and once as a per-report
partial with a combine step, which :mod:`.engines` runs as Dask tasks; :mod:`.tables` makes the
tables. Both engines give the same table.
"""

from __future__ import annotations

FLEET_REPORTS = ("fleet_kern_sum", "fleet_rank_sum")

"""The engines that run the fleet summaries (:mod:`.queries`): DuckDB embedded, in one query over
every report's Parquet files; or Dask, one task per report running its partial (DuckDB on that
report's files, on the worker), combined by the client. ``--engine dask`` starts a LocalCluster;
``--engine dask=tcp://host:8786`` uses a running scheduler, whose workers must read the same paths."""

from __future__ import annotations

from collections.abc import Callable

import duckdb
import pandas as pd

from ....errors import GpuscopeError
from .queries import QUERIES, FleetQuery
from .sources import FleetSource

ENGINES = ("duckdb", "dask")


def parse_engine(spec: str) -> tuple[str, str | None]:
    """``duckdb``, ``dask`` or ``dask=ADDRESS`` -> (engine, scheduler address or None)."""
    name, _, address = spec.partition("=")
    if name not in ENGINES or (name == "duckdb" and address):
        raise GpuscopeError(f"unknown --engine {spec!r}; choose duckdb, dask or dask=SCHEDULER_ADDRESS")
    return name, address or None


def _quote(path: str) -> str:
    return "'" + path.replace("'", "''") + "'"


def _all_reports(sources: list[FleetSource], table: str) -> str:
    files = [str(s.folder / f"{table}.parquet") for s in sources]
    listed = ", ".join(_quote(f) for f in files)
    mapping = ", ".join(f"({_quote(f)}, {i})" for i, f in enumerate(files))
    return (f"(SELECT m.src, t.* EXCLUDE (filename) FROM read_parquet([{listed}], filename = true, union_by_name = true) t "
            f"JOIN (VALUES {mapping}) m(file, src) ON m.file = t.filename)")


def _one_report(folder: str, src: int, table: str) -> str:
    return f"(SELECT {src} AS src, * FROM read_parquet({_quote(folder + '/' + table + '.parquet')}))"


def _labels(sources: list[FleetSource]) -> pd.DataFrame:
    return pd.DataFrame({"src": range(len(sources)), "report": [s.label for s in sources]})


def run_duckdb(query: FleetQuery, sources: list[FleetSource], by_report: bool, threads: int | None = None) -> pd.DataFrame:
    """The summary over every report in one DuckDB query."""
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    partial_sql = query.partial.format(**{t: _all_reports(sources, t) for t in query.tables})
    labels = _labels(sources)
    con.register("labels", labels)
    key = "report," if by_report else ""
    sql = (f"WITH partial AS (SELECT l.report, q.* FROM ({partial_sql}) q JOIN labels l USING (src)) "
           + query.combine_sql.format(key=key))
    frame = con.execute(sql).df()
    con.close()
    return query.finish(frame, by_report)


def partial_of(query_name: str, folder: str, src: int) -> pd.DataFrame:
    """One report's partial (what a Dask task runs, on a worker)."""
    query = QUERIES[query_name]
    con = duckdb.connect()
    con.execute("SET threads = 1")  # a worker runs several tasks side by side
    try:
        return con.execute(query.partial.format(**{t: _one_report(folder, src, t) for t in query.tables})).df()
    finally:
        con.close()


def run_dask(query: FleetQuery, sources: list[FleetSource], by_report: bool, address: str | None,
             client: object | None = None) -> pd.DataFrame:
    """The summary with one Dask task per report; ``client``: a running ``distributed.Client``
    (else one for ``address``, or a LocalCluster)."""
    owned = None
    if client is None:
        owned = client = dask_client(address)
    try:
        futures = [client.submit(partial_of, query.name, str(s.folder), i, pure=False)  # type: ignore[attr-defined]
                   for i, s in enumerate(sources)]
        parts = [p for p in client.gather(futures) if len(p)]  # type: ignore[attr-defined]
    finally:
        if owned is not None:
            owned.close()  # type: ignore[attr-defined]
            cluster = getattr(owned, "cluster", None)
            if cluster is not None:
                cluster.close()
    partial = pd.concat(parts, ignore_index=True) if parts else query_empty(query, sources)
    partial = partial.merge(_labels(sources), on="src")
    combine: Callable[[pd.DataFrame, bool], pd.DataFrame] = query.combine_pandas  # type: ignore[assignment]
    return query.finish(combine(partial, by_report), by_report)


def query_empty(query: FleetQuery, sources: list[FleetSource]) -> pd.DataFrame:
    """The partial's columns without rows (DuckDB on the first report, limited to nothing)."""
    frame = partial_of(query.name, str(sources[0].folder), 0)
    return frame.iloc[0:0]


def dask_client(address: str | None) -> object:
    """A ``distributed.Client`` for ``address``, or on a new LocalCluster; a clear error without Dask."""
    try:
        from distributed import Client, LocalCluster  # noqa: PLC0415
    except ImportError:
        raise GpuscopeError("--engine dask needs Dask: pip install 'gpuscope[fleet]' "
                            "(or pip install 'dask[distributed]')") from None
    if address:
        try:
            return Client(address, timeout=10)
        except OSError as exc:
            raise GpuscopeError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    cluster = LocalCluster(processes=True, dashboard_address=None, silence_logs=40)
    return Client(cluster)


def run_summaries(names: list[str], sources: list[FleetSource], engine: str, address: str | None,
                  by_report: bool) -> dict[str, pd.DataFrame]:
    """Each named summary (``fleet_kern_sum``, ``fleet_rank_sum``) over ``sources`` on ``engine``."""
    if engine == "duckdb":
        return {n: run_duckdb(QUERIES[n], sources, by_report) for n in names}
    client = dask_client(address)
    try:
        return {n: run_dask(QUERIES[n], sources, by_report, None, client) for n in names}
    finally:
        client.close()  # type: ignore[attr-defined]
        cluster = getattr(client, "cluster", None)
        if cluster is not None:
            cluster.close()

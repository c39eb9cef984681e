"""The report :func:`gpuscope.load` returns: a :class:`~gpuscope.trace.report.Report` (SQL and the
recorded tables as DataFrames) with the analyses of the commands as DataFrames too
(:mod:`gpuscope.analysis.frames`), for notebooks and scripts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .trace.report import Report

if TYPE_CHECKING:
    import pandas as pd


class LoadedReport(Report):
    """An opened report with its analyses as pandas DataFrames, names resolved.

    ``steps()``, ``layers()``, ``samples()``, ``stats(name)`` and ``findings()`` run the functions
    that ``gpuscope stats``, ``analyze`` and ``diff`` run; :meth:`sql` and :meth:`df` query the
    tables themselves (docs/report-format.md).
    """

    def steps(self) -> pd.DataFrame:
        """Every step with its duration, whether it is a warm-up step, and its time per part of the
        breakdown (:func:`.analysis.frames.steps_frame`)."""
        from .analysis.frames import steps_frame

        return steps_frame(self)

    def layers(self) -> pd.DataFrame:
        """Per PyTorch module and framework range: calls, GPU and CPU time (``stats -r layer_sum``)."""
        from .analysis.frames import layers_frame

        return layers_frame(self)

    def samples(self) -> pd.DataFrame:
        """Every Python stack sample with its thread, innermost frame, program line and stack
        (:func:`.analysis.frames.samples_frame`)."""
        from .analysis.frames import samples_frame

        return samples_frame(self)

    def stats(self, name: str, libraries: bool = False) -> pd.DataFrame:
        """The report ``name`` of ``gpuscope stats -r NAME`` (such as ``step_sum``, ``cpu_hotspots``,
        ``cuda_gpu_kern_sum``); ``libraries`` as ``--libraries``. An unknown name raises
        GpuscopeError listing the names."""
        from .analysis.frames import stats_frame

        return stats_frame(self, name, libraries)

    def findings(self) -> pd.DataFrame:
        """The findings of ``gpuscope analyze``, ranked, with their estimated saving per step."""
        from .analysis.frames import findings_frame

        return findings_frame(self)

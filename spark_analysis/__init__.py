"""Spark analysis of overlay trace records (TRACES.md): summary.json, Parquet, report.html.

Entry point: :func:`spark_analysis.cli.main`; library entry: :func:`run_analysis`.

What ``--out DIR`` holds: ``summary.json``; ``report.html`` (plots embedded);
``records/ev=*/`` the records as Parquet, each type's fields in a few typed columns
(:mod:`spark_analysis.layout`; :func:`spark_analysis.load.read_records` reads them);
``tables/`` per-node stress and tree depths as Parquet. What the loading tasks count
besides the records (lines, bad lines, the per (node, topic, ev, detail) tally) reaches
the driver in an accumulator, not in files (:class:`spark_analysis.load.Counted`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_analysis"]


def run_analysis(*args: Any, **kwargs: Any) -> Any:
    """See :func:`spark_analysis.analysis.run_analysis` (imported lazily: pyspark is heavy)."""
    from spark_analysis.analysis import run_analysis as run

    return run(*args, **kwargs)

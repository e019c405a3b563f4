"""Spark analysis of overlay trace records (TRACES.md): summary.json, Parquet, report.html.

Entry point: :func:`spark_analysis.cli.main`; library entry: :func:`run_analysis`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_analysis"]


def run_analysis(*args: Any, **kwargs: Any) -> Any:
    """See :func:`spark_analysis.analysis.run_analysis` (imported lazily: pyspark is heavy)."""
    from spark_analysis.analysis import run_analysis as run

    return run(*args, **kwargs)

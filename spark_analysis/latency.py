"""Delivery latency: exact nearest-rank percentiles and the points of its CDF."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_analysis.stats import P50, P90, P99, P100, nearest_rank

SUMMARY_PERMILLES = (P50, P90, P99, P100)
# 0.5% steps for the CDF plot, plus the tail the summary reports.
CDF_PERMILLES = tuple(sorted({*range(5, 1001, 5), 1, 999, *SUMMARY_PERMILLES}))


def delivered_latencies(outcomes: DataFrame) -> DataFrame:
    """(topic, latency_ms) of every expected delivery that happened (first record)."""
    return outcomes.filter(F.col("expected") & F.col("delivered")).select("topic", "latency_ms")


def latency_percentiles(outcomes: DataFrame) -> DataFrame:
    """Per topic and overall: latency at the summary and CDF per-mille ranks.

    Output: topic, overall, permille, latency_ms, n.
    """
    return nearest_rank(delivered_latencies(outcomes), "latency_ms", CDF_PERMILLES)

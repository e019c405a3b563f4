"""Grouping per topic and overall in one pass, and exact nearest-rank percentiles."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

TOPIC = "topic"
# Set on the row that aggregates every topic; its ``topic`` is null. A separate flag,
# because a record may itself lack a topic.
OVERALL = "overall"

# Percentiles are given in per mille so that the rank is computed in integers:
# ceil(N * p) in floating point is off by one for some N (e.g. 0.99 * 100).
P50, P90, P99, P100 = 500, 900, 990, 1000


def per_topic_and_overall(
    df: DataFrame, aggs: Sequence[Column], keys: Sequence[str] = ()
) -> DataFrame:
    """``aggs`` per (topic, *keys) and per (*keys) over all topics, as one job.

    Output columns: ``topic`` (null on overall rows), ``overall`` (bool), ``keys``, aggs.
    """
    grouped = df.groupingSets([[TOPIC, *keys], list(keys)], TOPIC, *keys).agg(
        *aggs, F.grouping(TOPIC).alias("_all")
    )
    return grouped.withColumn(OVERALL, F.col("_all") == 1).drop("_all")


def nearest_rank_rank(n: int, permille: int) -> int:
    """1-based rank of the ``permille`` nearest-rank percentile among ``n`` values."""
    return max(1, (n * permille + 999) // 1000)


def nearest_rank(
    df: DataFrame, value: str, permilles: Iterable[int], by_topic: bool = True
) -> DataFrame:
    """Exact nearest-rank percentiles of ``value`` per topic and overall.

    The p-th percentile of N values is the value at rank ceil(p*N) in ascending order
    (1-based). Equal values are counted first (a hash aggregation, per topic and
    overall in one pass); a running sum over the distinct values in order then gives
    each value its ranks (cum - count, cum], and the per-mille percentiles landing
    there, in integers: rank ceil(N*p/1000) is in (lo, cum] exactly when
    floor(1000*lo/N) < p <= floor(1000*cum/N). No row per value is ranked or joined.
    Output: ``topic``, ``overall``, ``permille``, ``value`` (same type as the input),
    ``n``. (Grouping takes -0.0 as 0.0; differences of finite times never give -0.0.)
    """
    wanted = sorted({int(p) for p in permilles})
    values = df.filter(F.col(value).isNotNull())
    count = F.count(F.lit(1)).alias("c")
    if by_topic:
        counted = per_topic_and_overall(values, [count], keys=[value]).filter(
            F.col(OVERALL) | F.col(TOPIC).isNotNull()
        )
    else:
        counted = (
            values.groupBy(value)
            .agg(count)
            .select(F.lit(None).cast("string").alias(TOPIC), F.lit(True).alias(OVERALL), value, "c")
        )
    scope = Window.partitionBy(TOPIC, OVERALL)
    upto = scope.orderBy(value).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ranked = counted.select(
        TOPIC,
        OVERALL,
        value,
        "c",
        F.sum("c").over(upto).alias("cum"),
        F.sum("c").over(scope).alias("n"),
    )
    # Per-mille 0 has rank 1 too (ranks are at least 1): the first value's range
    # starts below it.
    first = F.expr("IF(cum = c, -1L, (1000 * (cum - c)) div n)")
    covered = ranked.select(
        TOPIC, OVERALL, value, "n", first.alias("p_lo"), F.expr("(1000 * cum) div n").alias("p_hi")
    ).filter(F.col("p_hi") > F.col("p_lo"))
    spread = covered.select(
        TOPIC,
        OVERALL,
        F.explode(F.sequence((F.col("p_lo") + 1).cast("int"), F.col("p_hi").cast("int"))).alias(
            "permille"
        ),
        value,
        "n",
    )
    return spread.filter(F.col("permille").isin(wanted))


def rows_by_scope(df: DataFrame) -> dict[str | None, list[dict[str, object]]]:
    """Collect a small per-topic/overall result: topic (None = overall) -> rows."""
    out: dict[str | None, list[dict[str, object]]] = {}
    for row in df.collect():
        d = row.asDict()
        overall = d.pop(OVERALL)
        scope = d.pop(TOPIC)
        if not overall and scope is None:
            continue  # records without a topic count only overall
        scope = None if overall else scope
        out.setdefault(scope, []).append(d)
    return out

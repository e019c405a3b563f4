"""Grouping per topic and overall in one pass, and exact nearest-rank percentiles."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
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
    (1-based). Ranks come from a window sort (exact, no sketch); percentiles map to
    ranks with integer arithmetic. Output: ``topic``, ``overall``, ``permille``,
    ``value`` (same type as the input), ``n``.
    """
    spark = df.sparkSession
    values = df.filter(F.col(value).isNotNull())
    scopes = [F.struct(F.lit(None).cast("string").alias(TOPIC), F.lit(True).alias(OVERALL))]
    if by_topic:
        scopes.insert(0, F.struct(F.col(TOPIC).alias(TOPIC), F.lit(False).alias(OVERALL)))
    scoped = values.select(F.explode(F.array(*scopes)).alias("s"), F.col(value).alias("v"))
    scoped = scoped.select("s.*", "v")
    if by_topic:
        scoped = scoped.filter(F.col(OVERALL) | F.col(TOPIC).isNotNull())
    group = [TOPIC, OVERALL]
    window = Window.partitionBy(*group).orderBy("v")
    ranked = scoped.withColumn("rn", F.row_number().over(window))
    counts = scoped.groupBy(*group).agg(F.count(F.lit(1)).alias("n"))
    pm = spark.createDataFrame(
        [(int(p),) for p in permilles], T.StructType([T.StructField("permille", T.IntegerType())])
    )
    wanted = counts.crossJoin(F.broadcast(pm)).withColumn(
        "rn", F.greatest(F.lit(1).cast("long"), F.expr("(n * permille + 999) div 1000"))
    )
    # null-safe join on topic: the overall row's topic is null.
    joined = wanted.alias("w").join(
        ranked.alias("r"),
        F.col("w.topic").eqNullSafe(F.col("r.topic"))
        & (F.col("w.overall") == F.col("r.overall"))
        & (F.col("w.rn") == F.col("r.rn")),
    )
    return joined.select(
        F.col("w.topic").alias(TOPIC),
        F.col("w.overall").alias(OVERALL),
        F.col("w.permille").alias("permille"),
        F.col("r.v").alias(value),
        F.col("w.n").alias("n"),
    )


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

"""Gossip coverage and redundancy, repairs and drops."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_analysis.schema import Ev
from spark_analysis.stats import per_topic_and_overall


def event_reach(records: DataFrame, pubs: DataFrame) -> DataFrame:
    """(topic, msg_id, reached): nodes that received or delivered each published event."""
    touched = (
        records.filter(F.col("ev").isin(Ev.RECV, Ev.DELIVER) & F.col("msg_id").isNotNull())
        .select("msg_id", "node")
        .distinct()
        .groupBy("msg_id")
        .agg(F.count(F.lit(1)).alias("reached"))
    )
    return pubs.select("topic", "msg_id").join(touched, "msg_id", "left").na.fill(0, ["reached"])


def coverage_stats(reach: DataFrame) -> DataFrame:
    """Per topic and overall: events and the sum of nodes reached (mean = sum/(events*nodes))."""
    return per_topic_and_overall(
        reach,
        [
            F.count(F.lit(1)).alias("coverage_events"),
            F.sum("reached").alias("reached_sum"),
            F.min("reached").alias("reached_min"),
        ],
    )


COUNTED = (Ev.FORWARD, Ev.RECV, Ev.REPAIR, Ev.DROP)


def record_counts(records: DataFrame) -> DataFrame:
    """Per topic and overall, in one pass: forward records, recv records and recv
    duplicates, repairs by kind, drops by reason.

    Output: topic, overall, ev, detail (repair kind, drop reason, else null), count,
    dups (recv records with ``dup`` true).
    """
    counted = records.filter(F.col("ev").isin(*COUNTED)).select(
        "topic",
        "ev",
        F.when(F.col("ev") == Ev.REPAIR, F.col("kind"))
        .when(F.col("ev") == Ev.DROP, F.col("reason"))
        .alias("detail"),
        "dup",
    )
    # Counted per (topic, ev, detail) first: the per-topic and overall grouping sets
    # then expand a few hundred rows instead of every forward and recv record.
    per_topic = counted.groupBy("topic", "ev", "detail").agg(
        F.count(F.lit(1)).alias("n"), F.count_if(F.col("dup")).alias("d")
    )
    return per_topic_and_overall(
        per_topic,
        [F.sum("n").alias("count"), F.sum("d").alias("dups")],
        keys=["ev", "detail"],
    )

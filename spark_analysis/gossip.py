"""Gossip coverage and redundancy, repairs and drops."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_analysis.load import of_type
from spark_analysis.schema import Ev
from spark_analysis.stats import per_topic_and_overall


def node_count(records: DataFrame) -> int:
    """Nodes that wrote at least one record: the population coverage is a share of."""
    return records.select("node").distinct().count()


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


def redundancy_stats(records: DataFrame) -> DataFrame:
    """Per topic and overall: ``recv`` records and those with ``dup`` true."""
    return per_topic_and_overall(
        of_type(records, Ev.RECV),
        [
            F.count(F.lit(1)).alias("recvs"),
            F.count_if(F.col("dup")).alias("recv_dups"),
        ],
    )


def repairs_by_kind(records: DataFrame) -> DataFrame:
    """Per topic and overall: ``repair`` records by kind."""
    return per_topic_and_overall(
        of_type(records, Ev.REPAIR), [F.count(F.lit(1)).alias("count")], keys=["kind"]
    )


def drops_by_reason(records: DataFrame) -> DataFrame:
    """Per topic and overall: ``drop`` records by reason."""
    return per_topic_and_overall(
        of_type(records, Ev.DROP), [F.count(F.lit(1)).alias("count")], keys=["reason"]
    )

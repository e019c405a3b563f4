"""Gossip coverage and redundancy, repairs and drops."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from spark_analysis.cost import record_tally
from spark_analysis.schema import Ev
from spark_analysis.stats import per_topic_and_overall

WORD_BITS = 64


def node_ids(nodes: DataFrame) -> DataFrame:
    """(node, nid): the distinct nodes of ``nodes`` numbered 0, 1, ... in name order.

    Nodes are few (one row per node of the run), so one unpartitioned window is fine.
    """
    distinct = nodes.select("node").filter(F.col("node").isNotNull()).distinct()
    return distinct.select("node", (F.row_number().over(Window.orderBy("node")) - 1).alias("nid"))


def event_reach(
    records: DataFrame,
    pubs: DataFrame,
    nodes: DataFrame | None = None,
    touched: DataFrame | None = None,
) -> DataFrame:
    """(topic, msg_id, reached): nodes that received or delivered each published event.

    Counted as bit sets, not as distinct (msg_id, node) pairs: each node gets a number
    (``nodes``, e.g. the per-node table, must hold every node that wrote a record;
    default: those of the ``recv`` and ``deliver`` records), each (msg_id, 64-node word)
    ORs its nodes' bits and the reach is the sum of the words' bit counts. The pairs
    are millions; the words, aggregated before the shuffle, are a few per event.
    ``touched`` is the (msg_id, node) pairs of those records, repeats allowed (loading
    writes them, fewer than the records), taken from ``records`` when not given.
    """
    if touched is None:
        touched = records.filter(
            F.col("ev").isin(Ev.RECV, Ev.DELIVER) & F.col("msg_id").isNotNull()
        ).select("msg_id", "node")
    ids = node_ids(touched if nodes is None else nodes)
    words = (
        touched.join(F.broadcast(ids), "node")
        .groupBy("msg_id", F.expr(f"nid div {WORD_BITS}").alias("word"))
        # The SQL shiftleft: pyspark's takes a constant shift only.
        .agg(F.bit_or(F.expr(f"shiftleft(1L, nid % {WORD_BITS})")).alias("bits"))
    )
    reached = words.groupBy("msg_id").agg(F.sum(F.bit_count("bits")).alias("reached"))
    return (
        pubs.select("topic", "msg_id")
        .join(reached, "msg_id", "left")
        .select("topic", "msg_id", F.coalesce("reached", F.lit(0)).cast("long").alias("reached"))
    )


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


def record_counts(records: DataFrame, tally: DataFrame | None = None) -> DataFrame:
    """Per topic and overall: forward records, recv records and recv duplicates,
    repairs by kind, drops by reason.

    Summed from ``tally`` (:func:`cost.record_tally` of ``records``, computed here when
    not given): the per-topic and overall grouping sets then expand a few thousand
    rows instead of every forward and recv record.
    Output: topic, overall, ev, detail (repair kind, drop reason, else null), count,
    dups (recv records with ``dup`` true).
    """
    counts = record_tally(records) if tally is None else tally
    return per_topic_and_overall(
        counts.filter(F.col("ev").isin(*COUNTED)),
        [F.sum("n").alias("count"), F.sum("dups").alias("dups")],
        keys=["ev", "detail"],
    )

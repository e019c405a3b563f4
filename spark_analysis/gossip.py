"""Gossip coverage and redundancy, repairs and drops."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_analysis.cost import record_tally
from spark_analysis.schema import Ev
from spark_analysis.stats import per_topic_and_overall

WORD_BITS = 64
# Up to this many 64-bit words (64 nodes each) an event's reach is one aggregation by
# ``msg_id`` with a column per word; past it, one by (msg_id, word) and one by msg_id.
MAX_WORD_COLUMNS = 16


# A schema object rather than DDL text: text would go through Spark's SQL parser.
_NODE_IDS = T.StructType(
    [T.StructField("node", T.StringType()), T.StructField("nid", T.IntegerType())]
)


def node_ids(nodes: Iterable[str]) -> dict[str, int]:
    """Each distinct node of ``nodes`` numbered 0, 1, ... in name order."""
    return {node: i for i, node in enumerate(sorted(set(nodes)))}


def event_reach(
    records: DataFrame,
    pubs: DataFrame,
    nodes: Sequence[str] | None = None,
    touched: DataFrame | None = None,
) -> DataFrame:
    """(topic, msg_id, reached): nodes that received or delivered each published event.

    Counted as bit sets, not as distinct (msg_id, node) pairs: each node gets a number
    (``nodes``, e.g. the nodes loading counted, must hold every node that wrote a
    record; default: those of the ``recv`` and ``deliver`` records, collected), each
    event ORs its nodes' bits into one 64-bit word per 64 nodes and the reach is the
    sum of the words' bit counts. The pairs are millions; the words, aggregated before
    the shuffle, are a few per event. With the nodes known in the driver, the words are
    columns of one aggregation by ``msg_id``: no stage numbers the nodes, and none
    aggregates the words again (see :data:`MAX_WORD_COLUMNS`).
    ``touched`` is the (msg_id, node) pairs of those records, repeats allowed, taken
    from ``records`` when not given.
    """
    if touched is None:
        touched = records.filter(
            F.col("ev").isin(Ev.RECV, Ev.DELIVER) & F.col("msg_id").isNotNull()
        ).select("msg_id", "node")
    if nodes is None:
        nodes = [r["node"] for r in touched.select("node").distinct().collect()]
    numbered = node_ids(n for n in nodes if n is not None)
    ids = records.sparkSession.createDataFrame(list(numbered.items()), _NODE_IDS)
    pairs = touched.join(F.broadcast(ids), "node")
    word = F.expr(f"nid div {WORD_BITS}")
    # The SQL shiftleft: pyspark's takes a constant shift only.
    bit = F.expr(f"shiftleft(1L, nid % {WORD_BITS})")
    # At least one word: with no nodes every event reaches none (and agg needs a column).
    n_words = max(1, -(-len(numbered) // WORD_BITS))
    if n_words <= MAX_WORD_COLUMNS:
        per_word = [F.bit_or(F.when(word == w, bit)).alias(f"w{w}") for w in range(n_words)]
        counts = [F.coalesce(F.bit_count(f"w{w}"), F.lit(0)) for w in range(n_words)]
        reached = (
            pairs.groupBy("msg_id")
            .agg(*per_word)
            .select("msg_id", reduce(operator.add, counts, F.lit(0)).alias("reached"))
        )
    else:
        words = pairs.groupBy("msg_id", word.alias("word")).agg(F.bit_or(bit).alias("bits"))
        reached = words.groupBy("msg_id").agg(F.sum(F.bit_count("bits")).alias("reached"))
    return (
        pubs.select("topic", "msg_id")
        .join(reached, "msg_id", "left")
        .select(
            "topic",
            "msg_id",
            F.coalesce("reached", F.lit(0)).cast(T.LongType()).alias("reached"),
        )
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

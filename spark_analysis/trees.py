"""Topic trees: membership when each topic last carried an event, and each member's depth."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_analysis.load import of_type
from spark_analysis.schema import Ev, order_key
from spark_analysis.stats import per_topic_and_overall


def last_event_per_topic(records: DataFrame) -> DataFrame:
    """(topic, last_event_ts): the latest ``publish`` or ``deliver`` record of each topic.

    One row per topic, so later joins broadcast it.
    """
    return (
        records.filter(F.col("ev").isin(Ev.PUBLISH, Ev.DELIVER) & F.col("topic").isNotNull())
        .groupBy("topic")
        .agg(F.max("ts").alias("last_event_ts"))
    )


def last_event_from_tally(tally: DataFrame) -> DataFrame:
    """:func:`last_event_per_topic` from a record tally (``cost.record_tally``), which
    keeps each group's latest ``ts``: no record is read again."""
    return (
        tally.filter(F.col("ev").isin(Ev.PUBLISH, Ev.DELIVER) & F.col("topic").isNotNull())
        .groupBy("topic")
        .agg(F.max("last_ts").alias("last_event_ts"))
    )


def tree_records_in_use(
    records: DataFrame, ev: str, last_event: DataFrame | None = None
) -> DataFrame:
    """``ev`` records (``tree`` or ``tree_leave``) of each topic up to its last ``publish``
    or ``deliver`` record; all of them for a topic that carried no event.

    TRACES.md defines depth by each node's latest ``tree`` record, dropping nodes with a
    later ``tree_leave``. Read over a whole trace that ends with every daemon stopping
    gracefully, every node has left and no tree remains. The tree that matters is the
    one that carried the events, so records after a topic's last event are left out.
    ``last_event`` (from :func:`last_event_per_topic`) can be passed in so that the
    large ``deliver`` partition is scanned once for both record types.
    """
    if last_event is None:
        last_event = last_event_per_topic(records)
    return (
        of_type(records, ev)
        .filter(F.col("topic").isNotNull())
        .join(F.broadcast(last_event), "topic", "left")
        .filter(F.col("last_event_ts").isNull() | (F.col("ts") <= F.col("last_event_ts")))
        .drop("last_event_ts")
    )


def tree_members(records: DataFrame, last_event: DataFrame | None = None) -> DataFrame:
    """(topic, node, parent, role) of every node in a topic tree when the topic last
    carried an event (see :func:`tree_records_in_use`).

    Each node's latest ``tree`` record gives its parent; a node whose latest ``tree``
    record is followed by a later ``tree_leave`` is not in the tree. "Later" is the
    node's record order (ts, then position in its trace), so a leave and a rejoin in
    the same simulated instant resolve the way they were written. ``last_event`` is
    :func:`last_event_per_topic` of the records, computed here when not given.
    """
    if last_event is None:
        last_event = last_event_per_topic(records)
    # Tiny (one row per topic) and used twice in this plan; from the tally (a local
    # relation of a few thousand rows) it costs less to aggregate twice than a query
    # and two jobs of its own (a localCheckpoint here did that).
    trees = tree_records_in_use(records, Ev.TREE, last_event)
    latest = trees.groupBy("topic", "node").agg(
        F.max_by(F.struct("parent", "role"), order_key()).alias("s"),
        F.max(order_key()).alias("joined_at"),
    )
    leaves = (
        tree_records_in_use(records, Ev.TREE_LEAVE, last_event)
        .groupBy("topic", "node")
        .agg(F.max(order_key()).alias("left_at"))
    )
    members = latest.join(leaves, ["topic", "node"], "left").filter(
        F.col("left_at").isNull() | (F.col("left_at") < F.col("joined_at"))
    )
    return members.select("topic", "node", "s.parent", "s.role")


DEPTH_SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType()),
        T.StructField("node", T.StringType()),
        T.StructField("parent", T.StringType()),
        T.StructField("role", T.StringType()),
        T.StructField("depth", T.IntegerType()),
    ]
)


def _topic_depths(table: pa.Table) -> pa.Table:
    """Breadth-first depths of one topic's members (one row per node)."""
    nodes = table.column("node").to_pylist()
    parents = table.column("parent").to_pylist()
    children: dict[str, list[int]] = {}
    depth: list[int | None] = [None] * len(nodes)
    level: list[int] = []
    for i, parent in enumerate(parents):
        if parent is None:
            depth[i] = 0
            level.append(i)
        else:
            children.setdefault(parent, []).append(i)
    d = 0
    while level:
        d += 1
        # Each node has one parent, so a child is reached at most once.
        level = [c for i in level for c in children.get(nodes[i], ())]
        for c in level:
            depth[c] = d
    return table.append_column("depth", pa.array(depth, pa.int32()))


def tree_depths(members: DataFrame) -> DataFrame:
    """``members`` plus ``depth``: parent edges to a root (a member without parent).

    Breadth-first from the roots, one level per step: members whose parent got depth d
    get depth d+1. Each node has one parent, so a node is assigned once and the walk
    ends when a level is empty. Members on a parent cycle or below a parent that is
    not in the tree are never reached: their depth stays null (counted as detached),
    rather than looping or guessing.

    A topic's members are one row per node, few next to the records, so each topic's
    walk runs in a Python worker over its whole group (``applyInArrow``): one Spark job
    for all topics, where iterative joins took two jobs per tree level.
    """
    return (
        members.select("topic", "node", "parent", "role")
        .groupBy("topic")
        .applyInArrow(_topic_depths, DEPTH_SCHEMA)
    )


def depth_histogram(depths: DataFrame) -> DataFrame:
    """Per topic and overall: members at each depth; depth null counts detached ones."""
    return per_topic_and_overall(depths, [F.count(F.lit(1)).alias("count")], keys=["depth"])

"""Topic trees: membership when each topic last carried an event, and each member's depth."""

from __future__ import annotations

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

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


def tree_members(records: DataFrame) -> DataFrame:
    """(topic, node, parent, role) of every node in a topic tree when the topic last
    carried an event (see :func:`tree_records_in_use`).

    Each node's latest ``tree`` record gives its parent; a node whose latest ``tree``
    record is followed by a later ``tree_leave`` is not in the tree. "Later" is the
    node's record order (ts, then position in its trace), so a leave and a rejoin in
    the same simulated instant resolve the way they were written.
    """
    # Tiny (one row per topic) and used twice: computed once, kept on the driver side.
    last_event = last_event_per_topic(records).localCheckpoint()
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


def tree_depths(members: DataFrame) -> DataFrame:
    """``members`` plus ``depth``: parent edges to a root (a member without parent).

    Breadth-first from the roots by iterative joins, one level per step: members whose
    parent got depth d in the last step get depth d+1. Each node has one parent, so a
    node is assigned once and the loop ends when a step assigns nobody, after at most
    as many steps as there are members. Members on a parent cycle or below a parent
    that is not in the tree are never reached: their depth stays null (counted as
    detached), rather than looping or guessing. Each step is checkpointed so the plan
    does not grow with the depth.

    Members are one row per (topic, node), tiny next to the records: the state is kept
    in one partition and the frontier broadcast, so a level costs one small task
    instead of a shuffle (every level used to shuffle the whole state twice).
    """
    state = (
        members.withColumn("depth", F.when(F.col("parent").isNull(), F.lit(0)).cast("int"))
        .coalesce(1)
        .localCheckpoint()
    )
    depth = 0
    while True:
        frontier = state.filter(F.col("depth") == depth).select(
            F.col("topic").alias("f_topic"), F.col("node").alias("f_node")
        )
        joined = state.join(
            F.broadcast(frontier),
            (F.col("topic") == F.col("f_topic"))
            & (F.col("parent") == F.col("f_node"))
            & F.col("depth").isNull(),
            "left",
        )
        # Counting the new level while checkpointing makes each level one Spark job.
        assigned = Observation()
        state = (
            joined.select(
                *members.columns,
                F.when(F.col("f_node").isNotNull(), F.lit(depth + 1))
                .otherwise(F.col("depth"))
                .cast("int")
                .alias("depth"),
            )
            .observe(assigned, F.count_if(F.col("depth") == depth + 1).alias("n"))
            .localCheckpoint()
        )
        depth += 1
        if not assigned.get.get("n"):
            return state


def depth_histogram(depths: DataFrame) -> DataFrame:
    """Per topic and overall: members at each depth; depth null counts detached ones."""
    return per_topic_and_overall(depths, [F.count(F.lit(1)).alias("count")], keys=["depth"])

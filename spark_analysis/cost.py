"""What dissemination costs: forwards per delivery, per-node stress, DHT lookups."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from spark_analysis.load import of_type
from spark_analysis.schema import ORDER_COLUMNS, TALLY_DETAIL, TALLY_KEYS, Ev


def child_load(records: DataFrame) -> DataFrame:
    """(node, children, peak_children): the children a node has at the end and the
    most it had at once, over all its topic trees, in one pass over the ``child``
    records. After a graceful stop every node ends with none, so the load a node
    carried is its peak, not its count at the end.

    A (topic, child) is held from an ``add`` until the next ``remove`` of it; a
    repeated ``add`` (or ``remove``) changes nothing. It counts at the end when its
    latest ``child`` record is an add. Nodes without a ``child`` record have no row.
    """
    child = of_type(records, Ev.CHILD).filter(
        F.col("topic").isNotNull() & F.col("child").isNotNull()
    )
    per_child = Window.partitionBy("node", "topic", "child").orderBy(*ORDER_COLUMNS)
    holds = F.coalesce(F.col("op") == "add", F.lit(False)).cast(T.IntegerType())
    held_before = F.coalesce(F.lag(holds).over(per_child), F.lit(0))
    # The (topic, child)'s latest record: nothing follows it in its window.
    last = F.lead(F.lit(1)).over(per_child).isNull().cast(T.IntegerType())
    change = child.select(
        "node",
        *ORDER_COLUMNS,
        (holds - held_before).alias("change"),
        (last * holds).alias("held_at_end"),
    )
    so_far = (
        Window.partitionBy("node")
        .orderBy(*ORDER_COLUMNS)
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    held = change.select("node", "held_at_end", F.sum("change").over(so_far).alias("held"))
    return held.groupBy("node").agg(
        F.sum("held_at_end").cast(T.LongType()).alias("children"),
        F.max("held").cast(T.LongType()).alias("peak_children"),
    )


def node_modes(records: DataFrame) -> DataFrame:
    """(mode, nodes): how many nodes announced each ``mode`` in a ``node_up`` record
    (``structured``: Chord and Scribe; ``unstructured``: gossip)."""
    return (
        of_type(records, Ev.NODE_UP)
        .filter(F.col("mode").isNotNull())
        .groupBy("mode")
        .agg(F.count_distinct("node").alias("nodes"))
    )


def record_tally(records: DataFrame) -> DataFrame:
    """(node, topic, ev, detail, n, dups, last_ts): all records counted in one pass.

    ``detail`` is a repair's kind and a drop's reason (else null), ``dups`` the records
    with ``dup`` true, ``last_ts`` their latest ``ts``. A few rows per node, topic and
    record type: the per-node stress, the per-topic counts and each topic's last event
    follow from it. Loading computes the same table as it parses
    (:func:`spark_analysis.load.partial_tally`, per file, summed), sparing the analysis
    this pass over every record; this is the definition it is tested against.
    """
    detail = F.lit(None).cast(T.StringType())
    for ev, name in TALLY_DETAIL.items():
        detail = F.when(F.col("ev") == ev, F.col(name)).otherwise(detail)
    return records.groupBy(*TALLY_KEYS[:-1], detail.alias(TALLY_KEYS[-1])).agg(
        F.count(F.lit(1)).alias("n"),
        F.count_if(F.col("dup")).alias("dups"),
        F.max("ts").alias("last_ts"),
    )


def node_stress(records: DataFrame, tally: DataFrame | None = None) -> DataFrame:
    """(node, forwards, recvs, delivers, children, peak_children): load each node
    carried; ``children`` at the end, ``peak_children`` the most at once.

    Every node that wrote a record has a row. Summed from ``tally``
    (:func:`record_tally` of ``records``, computed here when not given).
    """
    counts = record_tally(records) if tally is None else tally

    def of(ev: str, name: str) -> Column:
        return F.sum(F.when(F.col("ev") == ev, F.col("n")).otherwise(0)).alias(name)

    per_ev = counts.groupBy("node").agg(
        of(Ev.FORWARD, "forwards"), of(Ev.RECV, "recvs"), of(Ev.DELIVER, "delivers")
    )
    return per_ev.join(child_load(records), "node", "left").na.fill(
        0, ["children", "peak_children"]
    )


def stress_stats(stress: DataFrame) -> DataFrame:
    """One row: nodes, and mean/max forwards and children per node (sums for exact means)."""
    return stress.agg(
        F.count(F.lit(1)).alias("nodes"),
        F.sum("forwards").alias("forwards_sum"),
        F.max("forwards").alias("forwards_max"),
        F.sum("children").alias("children_sum"),
        F.max("children").alias("children_max"),
    )


def lookups(records: DataFrame) -> DataFrame:
    """The ``lookup`` records: (hops, ok, ms)."""
    return of_type(records, Ev.LOOKUP).select("hops", "ok", "ms")


def lookup_histogram(looks: DataFrame) -> DataFrame:
    """(hops, ok, count): small, and enough for every lookup figure.

    Hops are integers with few distinct values, so count, success rate, mean and the
    exact nearest-rank percentile all follow from this table.
    """
    return looks.groupBy("hops", "ok").agg(F.count(F.lit(1)).alias("count"))

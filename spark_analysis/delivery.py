"""Deliveries against expectations: delivered, missing, false and duplicate deliveries.

Reading of TRACES.md used here (one deliver record is counted once at most):

- a delivery is a distinct (node, sub, msg_id) with at least one ``deliver`` record
  without ``durable`` (a durable subscription's are the consumer check's);
- it is *delivered* when that key is an expected receiver of the event, *false* when
  it is not;
- a ``deliver`` record is a *duplicate* when an earlier ``deliver`` record of the same
  key exists, or when it says ``dup: true``; so a key's duplicates are
  ``(records - 1) + (1 if its first record says dup)``. The key still counts as
  delivered: the subscription got the event either way.
- a delivery's latency and hop are those of its first record;
- a delivery that was not expected but whose first record says ``replay: true`` (an
  event the subscription asked the topic's root for, maybe published before it
  began) is *replayed*, not false.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from spark_analysis.load import of_type
from spark_analysis.schema import ORDER_COLUMNS, Ev
from spark_analysis.stats import per_topic_and_overall

KEY = ["node", "sub", "msg_id"]
# A 64-bit hash of KEY, put before it wherever rows are sorted or joined by key.
KEY_HASH = "key_hash"


def _key_hash() -> Column:
    """Sorting and joining by (KEY_HASH, *KEY) gives the same groups as by KEY, only
    faster: Spark sorts rows by an 8-byte prefix of the first column first, and the
    first 8 characters of a ``node`` id (a few hundred nodes) rarely decide a
    comparison, so most comparisons read both whole rows; those of a hash nearly
    always do."""
    return F.xxhash64(*KEY)


def delivery_keys(records: DataFrame) -> DataFrame:
    """One row per delivered (node, sub, msg_id): first record's fields and duplicates.

    A window over each key in record order, not ``min_by`` of a struct: nearly every
    key has one record, so a partial aggregation saves no rows, and a struct buffer
    makes Spark aggregate by sorting; the window sorts once, after the shuffle. The
    count runs over the same ordered window (whole frame), so one window pass gives
    both.
    """
    # A durable subscription's deliveries (``durable`` set) are a work queue's share,
    # not a filter's promise: the consumer check (spark_analysis.consumers) reads them.
    delivers = of_type(records, Ev.DELIVER).filter(
        F.col("sub").isNotNull() & F.col("msg_id").isNotNull() & F.col("durable").isNull()
    )
    hashed = [KEY_HASH, *KEY]
    in_order = Window.partitionBy(*hashed).orderBy(*ORDER_COLUMNS)
    whole = in_order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    ranked = delivers.withColumn(KEY_HASH, _key_hash()).select(
        *hashed,
        "topic",
        "ts",
        "hop",
        "dup",
        "replay",
        F.row_number().over(in_order).alias("_rank"),
        F.count(F.lit(1)).over(whole).alias("_records"),
    )
    first_dup = F.coalesce(F.col("dup"), F.lit(False)).cast(T.LongType())
    return ranked.filter(F.col("_rank") == 1).select(
        *hashed,
        "topic",
        F.col("ts").alias("first_ts"),
        F.col("hop").alias("first_hop"),
        F.coalesce(F.col("replay"), F.lit(False)).alias("replay"),
        (F.col("_records") - 1 + first_dup).alias("duplicates"),
    )


def delivery_outcomes(expected: DataFrame, keys: DataFrame) -> DataFrame:
    """Every expected or actual delivery, one row per (node, sub, msg_id).

    ``keys`` is :func:`delivery_keys`' output. Columns: topic, msg_id, node, sub,
    expected, delivered, replayed (delivered by a replay without being expected),
    duplicates, hop, latency_ms (first record's ts minus the publish ts, for expected
    deliveries that happened). The topic is the event's for expected rows, the deliver
    record's for false ones.
    """
    hashed = [KEY_HASH, *KEY]
    e = expected.select(
        _key_hash().alias(KEY_HASH),
        *KEY,
        F.col("topic").alias("e_topic"),
        "pub_ts",
        F.lit(True).alias("_e"),
    )
    k = keys.select(
        *hashed,
        F.col("topic").alias("k_topic"),
        "first_ts",
        "first_hop",
        "replay",
        "duplicates",
        F.lit(True).alias("_k"),
    )
    # The keys arrive partitioned and sorted by (KEY_HASH, *KEY) from their window, so
    # only the expected side is shuffled and sorted for the join.
    joined = e.join(k, hashed, "full_outer")
    is_expected = F.col("_e").isNotNull()
    is_delivered = F.col("_k").isNotNull()
    hit = is_expected & is_delivered
    return joined.select(
        F.coalesce("e_topic", "k_topic").alias("topic"),
        "msg_id",
        "node",
        "sub",
        is_expected.alias("expected"),
        is_delivered.alias("delivered"),
        (~is_expected & F.coalesce("replay", F.lit(False))).alias("replayed"),
        F.coalesce("duplicates", F.lit(0)).alias("duplicates"),
        F.when(is_delivered, F.col("first_hop")).alias("hop"),
        F.when(hit, (F.col("first_ts") - F.col("pub_ts")) * 1000.0).alias("latency_ms"),
    )


def delivery_counts(outcomes: DataFrame) -> DataFrame:
    """Per topic and overall: expected, delivered, false_deliveries, replayed,
    duplicates."""
    return per_topic_and_overall(
        outcomes,
        [
            F.count_if("expected").alias("expected"),
            F.count_if(F.col("expected") & F.col("delivered")).alias("delivered"),
            F.count_if(~F.col("expected") & ~F.col("replayed")).alias("false_deliveries"),
            F.count_if("replayed").alias("replayed"),
            F.sum("duplicates").alias("duplicates"),
        ],
    )


def per_event(outcomes: DataFrame) -> DataFrame:
    """(topic, msg_id, expected, delivered) for events with at least one expected receiver."""
    return (
        outcomes.filter(F.col("expected"))
        .groupBy("topic", "msg_id")
        .agg(
            F.count(F.lit(1)).alias("expected"),
            F.count_if("delivered").alias("delivered"),
        )
    )


def reach_shares(events: DataFrame) -> DataFrame:
    """The bimodal check (pbcast): events reaching over 90% vs under 10% of receivers.

    Compared in integers (10 * delivered > 9 * expected), not with float ratios.
    """
    return per_topic_and_overall(
        events,
        [
            F.count(F.lit(1)).alias("events_with_receivers"),
            F.count_if(F.col("delivered") * 10 > F.col("expected") * 9).alias("events_over_90"),
            F.count_if(F.col("delivered") * 10 < F.col("expected")).alias("events_under_10"),
        ],
    )


def hop_histogram(outcomes: DataFrame) -> DataFrame:
    """Per topic and overall: delivered (expected) deliveries by hop count."""
    hits = outcomes.filter(F.col("expected") & F.col("delivered") & F.col("hop").isNotNull())
    return per_topic_and_overall(hits, [F.count(F.lit(1)).alias("count")], keys=["hop"])


def published_counts(pubs: DataFrame) -> DataFrame:
    """Per topic and overall: distinct published events."""
    return per_topic_and_overall(pubs, [F.count(F.lit(1)).alias("published")])

"""Durable consumers: what each (topic, durable) consumer acknowledged, redelivered,
dead-lettered and lost, its ack latency, and its lag over time (``consumer``, ``ack``,
``term``, ``redeliver``, ``dead_letter`` records at the topic's root; TRACES.md,
"Definitions the analysis uses").

Events are keyed by ``msg_id``, never by ``seq``: a partition merge renumbers events,
and a consumer's records before and after it name one event by two seqs.

The delivery check (one row per consumer and event in :func:`consumer_outcomes`):

- *expected*: the reliable events of the consumer's topic (those with a
  ``publish_ack``) published at or after the consumer's first record (and before its
  ``delete``, when the trace ends with it deleted), and every event it has a record of
  (a new consumer starts with all the root retains, so it may handle events older than
  itself; those it has no record of may have left retention before it existed and are
  not counted);
- *handled*: acknowledged, terminated or dead-lettered;
- *excluded*: not handled and dropped by some node for one of :data:`EXCLUDING_DROPS`
  (its ``ttl`` passed: ``too_old``);
- *pending_at_delete*: not handled nor excluded, of a consumer the trace ends with
  deleted (a ``consumer`` record with op ``delete`` after its last attach): the
  application ended the consumer with them;
- *lost*: expected, and none of the above. Retention writes no record when it drops an
  event, so an event it dropped before the consumer handled it counts as lost, and so
  does one still pending when the trace ends.
"""

from __future__ import annotations

import math

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from spark_analysis.load import of_type
from spark_analysis.schema import Ev
from spark_analysis.stats import OVERALL, P50, P99, TOPIC, nearest_rank

#: The record types a durable consumer's root writes.
CONSUMER_EVS = (Ev.CONSUMER, Ev.ACK, Ev.TERM, Ev.REDELIVER, Ev.DEAD_LETTER)
#: A consumer is its topic and its name.
CONSUMER = ["topic", "durable"]
EVENT = [*CONSUMER, "msg_id"]
#: Drop reasons that put an event outside the check: its ``ttl`` passed (``too_old``),
#: its hop limit ran out (``ttl``, gossip), its publisher gave up on it (``expired``).
EXCLUDING_DROPS = ("too_old", "ttl", "expired")
#: About this many bins across the span of a lag series.
LAG_BINS = 50
ACK_LATENCY_PERMILLES = (P50, P99)
# nearest_rank groups by a ``topic`` column; a consumer's two names travel in it as one
# JSON array (a name may hold any printable character, so no separator is safe).
_NAMES = T.ArrayType(T.StringType())


def consumer_records(records: DataFrame) -> DataFrame:
    """The records of durable consumers that name their consumer."""
    return records.filter(
        F.col("ev").isin(*CONSUMER_EVS) & F.col("topic").isNotNull() & F.col("durable").isNotNull()
    )


def consumers_seen(crecs: DataFrame) -> DataFrame:
    """(topic, durable, first_ts, deleted_ts, attaches, detaches, members): per
    consumer, the time of its first record, of its last ``delete`` when no attach
    follows it (null while the consumer exists at the end), its ``consumer`` records by
    op, and the distinct (member, sub) that attached."""
    is_consumer = F.col("ev") == Ev.CONSUMER
    attach = is_consumer & (F.col("op") == "attach")
    delete = is_consumer & (F.col("op") == "delete")
    seen = crecs.groupBy(*CONSUMER).agg(
        F.min("ts").alias("first_ts"),
        F.max(F.when(delete, F.col("ts"))).alias("_deleted"),
        F.max(F.when(attach, F.col("ts"))).alias("_attached"),
        F.count_if(attach).alias("attaches"),
        F.count_if(is_consumer & (F.col("op") == "detach")).alias("detaches"),
        F.count_distinct(F.when(attach, F.struct("member", "sub"))).alias("members"),
    )
    # An attach after the delete made the consumer again (with all the root retains).
    recreated = F.col("_attached").isNotNull() & (F.col("_attached") > F.col("_deleted"))
    return seen.select(
        *CONSUMER,
        "first_ts",
        F.when(~recreated, F.col("_deleted")).alias("deleted_ts"),
        "attaches",
        "detaches",
        "members",
    )


def event_handling(crecs: DataFrame) -> DataFrame:
    """(topic, durable, msg_id, acks, first_ack_ts, terms, redeliveries, dead_letters):
    per consumer and event, its records of each kind and the time of its first ack."""

    def count(ev: str) -> Column:
        return F.count_if(F.col("ev") == ev)

    return (
        crecs.filter(F.col("msg_id").isNotNull() & (F.col("ev") != Ev.CONSUMER))
        .groupBy(*EVENT)
        .agg(
            count(Ev.ACK).alias("acks"),
            F.min(F.when(F.col("ev") == Ev.ACK, F.col("ts"))).alias("first_ack_ts"),
            count(Ev.TERM).alias("terms"),
            count(Ev.REDELIVER).alias("redeliveries"),
            count(Ev.DEAD_LETTER).alias("dead_letters"),
        )
    )


def reliable_events(records: DataFrame, pubs: DataFrame) -> DataFrame:
    """(topic, msg_id, pub_ts): the events with a ``publish_ack``, at their publish
    record's time (``pubs``: expected.publishes), or their first ``publish_ack``'s when
    no publish record was written (its node was killed before it wrote it)."""
    acked = (
        of_type(records, Ev.PUBLISH_ACK)
        .filter(F.col("msg_id").isNotNull() & F.col("topic").isNotNull())
        .groupBy("topic", "msg_id")
        .agg(F.min("ts").alias("ack_ts"))
    )
    return acked.join(pubs.select("msg_id", "pub_ts"), "msg_id", "left").select(
        "topic", "msg_id", F.coalesce("pub_ts", "ack_ts").alias("pub_ts")
    )


def excluded_events(records: DataFrame) -> DataFrame:
    """(msg_id): events some node dropped for one of :data:`EXCLUDING_DROPS`."""
    return (
        of_type(records, Ev.DROP)
        .filter(F.col("reason").isin(*EXCLUDING_DROPS) & F.col("msg_id").isNotNull())
        .select("msg_id")
        .distinct()
    )


def consumer_outcomes(
    found: DataFrame,
    handling: DataFrame,
    reliable: DataFrame,
    pubs: DataFrame,
    excluded: DataFrame,
) -> DataFrame:
    """One row per consumer and expected event (module docs): topic, durable, msg_id,
    acks, terms, redeliveries, dead_letters, first_ack_ts, handled, excluded,
    pending_at_delete, lost, ack_latency_ms (first ack's ts minus the publish
    record's, when both exist)."""
    lifetimes = found.select(*CONSUMER, "first_ts", "deleted_ts")
    in_lifetime = (F.col("pub_ts") >= F.col("first_ts")) & (
        F.col("deleted_ts").isNull() | (F.col("pub_ts") < F.col("deleted_ts"))
    )
    in_window = reliable.join(lifetimes, "topic").filter(in_lifetime).select(*EVENT)
    expected = in_window.join(handling, EVENT, "full_outer")
    published = pubs.select("msg_id", "pub_ts")
    dropped = excluded.select("msg_id", F.lit(True).alias("_dropped"))
    joined = (
        expected.join(lifetimes.select(*CONSUMER, "deleted_ts"), CONSUMER, "left")
        .join(published, "msg_id", "left")
        .join(dropped, "msg_id", "left")
    )
    counts = ["acks", "terms", "redeliveries", "dead_letters"]
    filled = joined.fillna(0, subset=counts)
    handled = (F.col("acks") > 0) | (F.col("terms") > 0) | (F.col("dead_letters") > 0)
    excluded_col = ~handled & F.col("_dropped").isNotNull()
    pending_at_delete = ~handled & ~excluded_col & F.col("deleted_ts").isNotNull()
    return filled.select(
        *EVENT,
        *counts,
        "first_ack_ts",
        handled.alias("handled"),
        excluded_col.alias("excluded"),
        pending_at_delete.alias("pending_at_delete"),
        (~handled & ~excluded_col & ~pending_at_delete).alias("lost"),
        ((F.col("first_ack_ts") - F.col("pub_ts")) * 1000.0).alias("ack_latency_ms"),
    )


def consumer_counts(outcomes: DataFrame, found: DataFrame) -> DataFrame:
    """Per consumer: first_ts, deleted_ts, attaches, detaches, members and, over its
    expected events, expected, handled, acknowledged (events acked), acks (records),
    acked_more_than_once, terminated, redelivered (events), redeliveries (records),
    dead_lettered, excluded, pending_at_delete, lost."""
    counted = outcomes.groupBy(*CONSUMER).agg(
        F.count(F.lit(1)).alias("expected"),
        F.count_if("handled").alias("handled"),
        F.count_if(F.col("acks") > 0).alias("acknowledged"),
        F.sum("acks").alias("acks"),
        F.count_if(F.col("acks") > 1).alias("acked_more_than_once"),
        F.count_if(F.col("terms") > 0).alias("terminated"),
        F.count_if(F.col("redeliveries") > 0).alias("redelivered"),
        F.sum("redeliveries").alias("redeliveries"),
        F.count_if(F.col("dead_letters") > 0).alias("dead_lettered"),
        F.count_if("excluded").alias("excluded"),
        F.count_if("pending_at_delete").alias("pending_at_delete"),
        F.count_if("lost").alias("lost"),
    )
    totals = [c for c in counted.columns if c not in CONSUMER]
    # A consumer with records but no expected event (all of its records lack a msg_id).
    return (
        found.join(counted, CONSUMER, "left")
        .fillna(0, subset=totals)
        .select(*found.columns, *[F.col(c).cast(T.LongType()).alias(c) for c in totals])
    )


def ack_latency_percentiles(outcomes: DataFrame) -> DataFrame:
    """(topic, durable, overall, permille, latency_ms, n): exact nearest-rank ack
    latency per consumer and over all consumers (topic and durable null), over each
    event's first ack."""
    keyed = outcomes.select(
        F.to_json(F.array(*CONSUMER)).alias(TOPIC), F.col("ack_latency_ms").alias("latency_ms")
    )
    ranked = nearest_rank(keyed, "latency_ms", ACK_LATENCY_PERMILLES)
    names = F.from_json(TOPIC, _NAMES)
    return ranked.select(
        names[0].alias("topic"), names[1].alias("durable"), OVERALL, "permille", "latency_ms", "n"
    )


def lag_span(pubs: DataFrame, crecs: DataFrame, found: DataFrame) -> DataFrame:
    """(t_min, t_max): the time the lag series cover, from the first to the last of the
    consumers' records and the publishes on their topics."""
    topics = found.select("topic").distinct()
    published = pubs.join(topics, "topic").select(F.col("pub_ts").alias("ts"))
    both = published.unionByName(crecs.select("ts"))
    return both.agg(F.min("ts").alias("t_min"), F.max("ts").alias("t_max"))


def lag_bin_width(span: float, bins: int = LAG_BINS) -> float:
    """The smallest 1, 2 or 5 times a power of ten that cuts ``span`` seconds into at
    most ``bins`` bins (1 s for an empty span): round numbers on the plot's axis."""
    if not span > 0:
        return 1.0
    exponent = math.floor(math.log10(span / bins))
    for power in (exponent, exponent + 1):
        for step in (1, 2, 5):
            width = step * 10.0**power
            if width * bins >= span:
                return width
    raise AssertionError("unreachable: 10 ** (exponent + 1) >= span / bins")


def bin_of(ts: str, width: float) -> Column:
    """The bin holding ``ts`` on an axis of ``width`` second bins from time 0."""
    return F.floor(F.col(ts) / F.lit(width)).cast(T.LongType())


def lag_over_time(
    pubs: DataFrame, outcomes: DataFrame, found: DataFrame, t_min: float, t_max: float, width: float
) -> DataFrame:
    """(topic, durable, bin, ts, published, acknowledged, lag): per consumer and bin of
    ``width`` seconds from the one holding ``t_min`` to the one holding ``t_max``, the
    events published on its topic and the events it acknowledged (at their first ack)
    by the bin's end ``ts``, and their difference."""
    first = math.floor(t_min / width)
    bins = math.floor(t_max / width) - first + 1
    published = (
        pubs.join(found.select("topic").distinct(), "topic")
        .groupBy("topic", (bin_of("pub_ts", width) - first).alias("bin"))
        .agg(F.count(F.lit(1)).alias("_published"))
    )
    acked = (
        outcomes.filter(F.col("first_ack_ts").isNotNull())
        .groupBy(*CONSUMER, (bin_of("first_ack_ts", width) - first).alias("bin"))
        .agg(F.count(F.lit(1)).alias("_acked"))
    )
    grid = found.select(*CONSUMER, F.explode(F.sequence(F.lit(0), F.lit(bins - 1))).alias("bin"))
    so_far = Window.partitionBy(*CONSUMER).orderBy("bin")
    cumulative = (
        grid.join(published, ["topic", "bin"], "left")
        .join(acked, [*CONSUMER, "bin"], "left")
        .select(
            *CONSUMER,
            F.col("bin").cast(T.IntegerType()).alias("bin"),
            ((F.col("bin") + first + 1) * F.lit(width)).alias("ts"),
            F.sum(F.coalesce("_published", F.lit(0))).over(so_far).alias("published"),
            F.sum(F.coalesce("_acked", F.lit(0))).over(so_far).alias("acknowledged"),
        )
    )
    return cumulative.withColumn("lag", F.col("published") - F.col("acknowledged"))

"""Durable-log recovery: what each node loaded at its starts, how long it took, and the
stored data it dropped (``recover`` and ``storage_dropped`` records, TRACES.md).

A start is the set of one node's ``recover`` records with one ``ts``: the node writes
them in one step (one per topic), each with the load time of the whole store (``ms``),
so a start's load time is their ``ms`` (the max, should they differ). A node restarted
several times has several starts; the per-node figures are those of its latest start,
with the slowest load over all of them beside it. A node whose store held no topic
writes no ``recover`` record; its ``storage_dropped`` records still count.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_analysis.schema import Ev

#: The ``reason`` of a ``storage_dropped`` record without a topic: the whole file was
#: refused (its text names the file, which differs per node).
WHOLE_FILE = "whole file"
#: The record types this module reads.
RECOVERY_EVS = (Ev.RECOVER, Ev.STORAGE_DROPPED)


def recovery_starts(records: DataFrame) -> DataFrame:
    """(node, ts, ms, topics, events, bytes): one row per start with ``recover`` records."""
    return (
        records.filter(F.col("ev") == Ev.RECOVER)
        .groupBy("node", "ts")
        .agg(
            F.max("ms").alias("ms"),
            F.count(F.lit(1)).alias("topics"),
            F.coalesce(F.sum("events"), F.lit(0)).cast(T.LongType()).alias("events"),
            F.coalesce(F.sum("bytes"), F.lit(0)).cast(T.LongType()).alias("bytes"),
        )
    )


def node_recovery(starts: DataFrame) -> DataFrame:
    """(node, starts, ms, ms_max, topics, events, bytes): per node, its number of starts,
    the latest start's load time and what it loaded, and the slowest load of any start."""
    latest = F.max(F.struct("ts", "ms", "topics", "events", "bytes"))  # ts first: the latest
    grouped = starts.groupBy("node").agg(
        F.count(F.lit(1)).alias("starts"), latest.alias("_last"), F.max("ms").alias("ms_max")
    )
    return grouped.select(
        "node",
        "starts",
        F.col("_last.ms").alias("ms"),
        "ms_max",
        *[F.col(f"_last.{c}").alias(c) for c in ("topics", "events", "bytes")],
    )


def dropped_reason(reason: str = "reason", topic: str = "topic") -> F.Column:
    """The kind of a ``storage_dropped`` record: its reason without the seq or run of
    seqs it names (``event 17: checksum mismatch``, ``events 8-14: checksum mismatch``
    -> ``checksum mismatch``) or a trailing detail in parentheses (``undecodable
    (ValueError)`` -> ``undecodable``); :data:`WHOLE_FILE` for a record without a
    topic."""
    named = r"^events? [0-9]+(-[0-9]+)?: "
    bare = F.regexp_replace(F.regexp_replace(reason, named, ""), r" \(.*\)$", "")
    return F.when(F.col(topic).isNull(), F.lit(WHOLE_FILE)).otherwise(
        F.coalesce(bare, F.lit("unknown"))
    )


def dropped_by_reason(records: DataFrame) -> DataFrame:
    """(node, reason, count): ``storage_dropped`` records per node and kind of reason."""
    return (
        records.filter(F.col("ev") == Ev.STORAGE_DROPPED)
        .groupBy("node", dropped_reason().alias("reason"))
        .agg(F.count(F.lit(1)).alias("count"))
    )

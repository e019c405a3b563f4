"""Expected receivers: the subscriptions each published event should reach.

A subscription is expected to receive an event when it is on the event's topic, was
active at the event's ``publish`` time (subscribed before, not yet unsubscribed) and
its filter matches the event's attrs. Filters are evaluated inside Spark, in Python
workers (``mapInArrow``), with the project's ``matching`` package.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_analysis.load import of_type
from spark_analysis.schema import Ev, order_key

MISSING_FILTER = "subscribe record has no filter"

PAIR_COLUMNS = ("topic", "msg_id", "node", "sub", "pub_ts")
EXPECTED_SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType()),
        T.StructField("msg_id", T.StringType()),
        T.StructField("node", T.StringType()),
        T.StructField("sub", T.LongType()),
        T.StructField("pub_ts", T.DoubleType()),
        T.StructField("match_error", T.StringType()),
    ]
)
FILTER_STATUS_SCHEMA = T.StructType(
    [T.StructField("filter", T.StringType()), T.StructField("filter_error", T.StringType())]
)


def publishes(records: DataFrame) -> DataFrame:
    """One row per published event: the first ``publish`` record of each ``msg_id``."""
    pubs = of_type(records, Ev.PUBLISH).filter(
        F.col("msg_id").isNotNull() & F.col("topic").isNotNull()
    )
    first = pubs.groupBy("msg_id").agg(
        F.min_by(
            F.struct("topic", "node", "ts", "attrs", order_key().alias("at")), order_key()
        ).alias("p")
    )
    return first.select(
        "msg_id",
        F.col("p.topic").alias("topic"),
        F.col("p.node").alias("pub_node"),
        F.col("p.ts").alias("pub_ts"),
        F.col("p.at").alias("pub_at"),
        F.col("p.attrs").alias("attrs"),
    )


def subscriptions(records: DataFrame) -> DataFrame:
    """Each subscription's lifetime: (node, sub, topic, filter, start, end).

    A subscription ends at the first ``unsubscribe`` of the same (node, sub) written
    after its ``subscribe``; without one it is active until the end of the trace (a
    crash is a failure to deliver, not an unsubscription).
    """
    subs = (
        of_type(records, Ev.SUBSCRIBE)
        .filter(F.col("sub").isNotNull() & F.col("topic").isNotNull())
        .select(
            "node",
            "sub",
            "topic",
            "filter",
            F.col("ts").alias("start_ts"),
            order_key().alias("start_at"),
        )
    )
    unsubs = (
        of_type(records, Ev.UNSUBSCRIBE)
        .filter(F.col("sub").isNotNull())
        .select("node", "sub", F.col("ts").alias("end_ts"), order_key().alias("end_at"))
    )
    paired = subs.join(unsubs, ["node", "sub"], "left").filter(
        F.col("end_at").isNull() | (F.col("end_at") > F.col("start_at"))
    )
    ends = paired.groupBy("node", "sub", "start_at").agg(
        F.min_by(F.struct("end_ts", "end_at"), "end_at").alias("e")
    )
    return subs.join(ends, ["node", "sub", "start_at"], "left").select(
        "node",
        "sub",
        "topic",
        "filter",
        "start_ts",
        "start_at",
        F.col("e.end_ts").alias("end_ts"),
        F.col("e.end_at").alias("end_at"),
    )


def _filter_status(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for pdf in batches:
        errors: list[str | None] = []
        for text in pdf["filter"]:
            if text is None:
                errors.append(MISSING_FILTER)
            elif text == "":
                errors.append(None)  # matches everything; no parser needed
            else:
                errors.append(_parse_error(text))
        yield pd.DataFrame({"filter": pdf["filter"], "filter_error": errors})


def _parse_error(text: str) -> str | None:
    import matching  # imported in the worker

    try:
        matching.parse(text)
    except matching.FilterSyntaxError as exc:
        return str(exc)
    except Exception as exc:  # a parser bug must not stop the analysis
        return f"{type(exc).__name__}: {exc}"
    return None


def check_filters(subs: DataFrame) -> DataFrame:
    """``subs`` plus ``filter_error`` (null when the filter parses).

    Each distinct filter text is parsed once; the texts are few next to the events.
    """
    texts = subs.select("filter").distinct()
    status = texts.mapInPandas(_filter_status, FILTER_STATUS_SCHEMA)
    return subs.join(status, subs["filter"].eqNullSafe(status["filter"]), "left").drop(
        status["filter"]
    )


def active_at_publish(sub: str = "s", pub: str = "p") -> Column:
    """The subscription was active at the event's publish time.

    Active means subscribed at or before it and unsubscribed after it: [start, end)
    in ``ts``. When both records come from the same node and share a ``ts``, the
    node's own record order decides, since the node wrote them in that order.
    """
    s_ts, s_at, s_node = F.col(f"{sub}.start_ts"), F.col(f"{sub}.start_at"), F.col(f"{sub}.node")
    e_ts, e_at = F.col(f"{sub}.end_ts"), F.col(f"{sub}.end_at")
    p_ts, p_at, p_node = F.col(f"{pub}.pub_ts"), F.col(f"{pub}.pub_at"), F.col(f"{pub}.pub_node")
    same_node = s_node == p_node
    started = (s_ts < p_ts) | ((s_ts == p_ts) & (~same_node | (s_at < p_at)))
    not_ended = e_ts.isNull() | (e_ts > p_ts) | ((e_ts == p_ts) & same_node & (e_at > p_at))
    return started & not_ended


def candidate_pairs(pubs: DataFrame, subs: DataFrame) -> DataFrame:
    """(event, subscription) pairs on the same topic with the subscription active.

    Subscriptions are broadcast: a run has far fewer of them than events, and each
    event meets only its own topic's subscriptions.
    """
    joined = pubs.alias("p").join(
        F.broadcast(subs.alias("s")),
        (F.col("p.topic") == F.col("s.topic")) & active_at_publish("s", "p"),
    )
    return joined.select(
        F.col("p.topic").alias("topic"),
        F.col("p.msg_id").alias("msg_id"),
        F.col("s.node").alias("node"),
        F.col("s.sub").alias("sub"),
        F.col("p.pub_ts").alias("pub_ts"),
        F.col("p.attrs").alias("attrs"),
        F.col("s.filter").alias("filter"),
    )


def _decode_attrs(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("attrs is not an object")
    return value


def _match_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Keep the pairs whose filter matches; report pairs whose evaluation failed."""
    import matching  # imported in the worker

    parsed: dict[str, Any] = {}
    for batch in batches:
        filters = batch.column("filter").to_pylist()
        attrs_texts = batch.column("attrs").to_pylist()
        keep: list[int] = []
        errors: list[str | None] = []
        last_text: str | None = None
        attrs: dict[str, Any] | Exception = {}
        for i, (text, attrs_text) in enumerate(zip(filters, attrs_texts, strict=True)):
            # Pairs of one event arrive together: decode its attrs once.
            if i == 0 or attrs_text != last_text:
                last_text = attrs_text
                try:
                    attrs = _decode_attrs(attrs_text)
                except ValueError as exc:
                    attrs = exc
            flt = parsed.get(text)
            if flt is None:
                flt = parsed[text] = matching.parse(text)
            try:
                if isinstance(attrs, Exception):
                    raise attrs
                if flt.matches(attrs):
                    keep.append(i)
                    errors.append(None)
            except Exception as exc:  # matching promises none; count it, do not stop
                keep.append(i)
                errors.append(f"{type(exc).__name__}: {exc}")
        picked = batch.take(pa.array(keep, type=pa.int64()))
        yield pa.RecordBatch.from_arrays(
            [picked.column(name) for name in PAIR_COLUMNS] + [pa.array(errors, pa.string())],
            names=[*PAIR_COLUMNS, "match_error"],
        )


def match_pairs(pairs: DataFrame) -> DataFrame:
    """Pairs whose filter matches the event's attrs, plus pairs that failed to evaluate.

    The empty filter matches everything without a trip to Python. Pairs must only
    carry filters that parse (see :func:`check_filters`). Output: ``EXPECTED_SCHEMA``;
    ``match_error`` is null for a match.
    """
    match_all = pairs.filter(F.col("filter") == "").select(
        *PAIR_COLUMNS, F.lit(None).cast("string").alias("match_error")
    )
    evaluated = pairs.filter(F.col("filter") != "").mapInArrow(_match_batches, EXPECTED_SCHEMA)
    return match_all.unionByName(evaluated)


def expected_receivers(pubs: DataFrame, checked_subs: DataFrame) -> DataFrame:
    """(topic, msg_id, node, sub, pub_ts, match_error) for every expected delivery.

    Subscriptions whose filter does not parse match nothing. Rows with a
    ``match_error`` are not expected deliveries; they are kept to be counted.
    """
    valid = checked_subs.filter(F.col("filter_error").isNull())
    return match_pairs(candidate_pairs(pubs, valid))

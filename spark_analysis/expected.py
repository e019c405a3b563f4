"""Expected receivers: the subscriptions each published event should reach.

A subscription is expected to receive an event when it is on the event's topic, was
active at the event's ``publish`` time (subscribed before, not yet unsubscribed) and
its filter matches the event's attrs. Filters are evaluated inside Spark, in Python
workers (``mapInArrow``), with the project's ``matching`` package, once per event and
distinct filter text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_analysis.load import of_type
from spark_analysis.schema import Ev, order_key

MISSING_FILTER = "subscribe record has no filter"

VERDICT_SCHEMA = T.StructType(
    [
        T.StructField("msg_id", T.StringType()),
        T.StructField("filter", T.StringType()),
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


def _filter_status(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        errors: list[str | None] = []
        for text in batch.column("filter").to_pylist():
            if text is None:
                errors.append(MISSING_FILTER)
            elif text == "":
                errors.append(None)  # matches everything; no parser needed
            else:
                errors.append(_parse_error(text))
        yield pa.RecordBatch.from_arrays(
            [batch.column("filter"), pa.array(errors, pa.string())],
            names=["filter", "filter_error"],
        )


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
    # Arrow batches, not pandas: the worker never imports pandas for a few strings.
    status = texts.mapInArrow(_filter_status, FILTER_STATUS_SCHEMA)
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


def _pairs(pubs: DataFrame, subs: DataFrame, on_filter: bool) -> DataFrame:
    """Events joined with the broadcast subscriptions of their topic active at publish."""
    cond = (F.col("p.topic") == F.col("s.topic")) & active_at_publish("s", "p")
    if on_filter:
        cond = cond & (F.col("p.filter") == F.col("s.filter"))
    return pubs.alias("p").join(F.broadcast(subs.alias("s")), cond)


def _pair_columns(*extra: Column) -> list[Column]:
    """topic, msg_id, node, sub, pub_ts of a :func:`_pairs` row, then ``extra``."""
    return [
        F.col("p.topic").alias("topic"),
        F.col("p.msg_id").alias("msg_id"),
        F.col("s.node").alias("node"),
        F.col("s.sub").alias("sub"),
        F.col("p.pub_ts").alias("pub_ts"),
        *extra,
    ]


def candidate_pairs(pubs: DataFrame, subs: DataFrame) -> DataFrame:
    """(event, subscription) pairs on the same topic with the subscription active.

    Subscriptions are broadcast: a run has far fewer of them than events, and each
    event meets only its own topic's subscriptions.
    """
    return _pairs(pubs, subs, on_filter=False).select(
        *_pair_columns(F.col("p.attrs").alias("attrs"), F.col("s.filter").alias("filter"))
    )


def _decode_attrs(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("attrs is not an object")
    return value


def _verdict_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """(msg_id, filter, match_error) of the (event, filter) rows whose filter matches
    the event's attrs (error null) or failed to evaluate (error set); others dropped.

    Each filter text is parsed once per worker, each attrs text decoded once per batch.
    """
    import matching  # imported in the worker

    parsed: dict[str, Any] = {}
    for batch in batches:
        msg_ids = batch.column("msg_id")
        filters = batch.column("filter").to_pylist()
        attrs_texts = batch.column("attrs").to_pylist()
        decoded: dict[str | None, dict[str, Any] | Exception] = {}
        keep: list[int] = []
        errors: list[str | None] = []
        for i, (text, attrs_text) in enumerate(zip(filters, attrs_texts, strict=True)):
            attrs = decoded.get(attrs_text)
            if attrs is None:
                try:
                    attrs = _decode_attrs(attrs_text)
                except ValueError as exc:
                    attrs = exc
                decoded[attrs_text] = attrs
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
        picked = pa.array(keep, type=pa.int64())
        columns = [msg_ids.take(picked), batch.column("filter").take(picked)]
        yield pa.RecordBatch.from_arrays(
            [*columns, pa.array(errors, pa.string())], names=["msg_id", "filter", "match_error"]
        )


def filter_verdicts(pubs: DataFrame, subs: DataFrame) -> DataFrame:
    """(msg_id, filter, match_error) for each event and each distinct filter of its
    topic's subscriptions that matches the event's attrs (``match_error`` null) or
    failed to evaluate on them (``match_error`` set).

    Many subscriptions share a filter text, so evaluating each distinct filter once per
    event, rather than once per (event, subscription) pair, sends several times fewer
    rows through the Python workers. The empty filter matches everything without a
    trip to Python. ``subs`` must only carry filters that parse (see
    :func:`check_filters`).
    """
    filters = subs.select("topic", "filter").distinct()
    per_event = pubs.select("topic", "msg_id", "attrs").join(F.broadcast(filters), "topic")
    match_all = per_event.filter(F.col("filter") == "").select(
        "msg_id", "filter", F.lit(None).cast("string").alias("match_error")
    )
    evaluated = (
        per_event.filter(F.col("filter") != "")
        .select("msg_id", "filter", "attrs")
        .mapInArrow(_verdict_batches, VERDICT_SCHEMA)
    )
    return match_all.unionByName(evaluated)


def expected_receivers(pubs: DataFrame, checked_subs: DataFrame) -> DataFrame:
    """(topic, msg_id, node, sub, pub_ts, match_error) for every expected delivery.

    Subscriptions whose filter does not parse match nothing. Rows with a
    ``match_error`` are not expected deliveries; they are kept to be counted (one per
    pair, as each pair's evaluation would have failed).

    Each event carries its verdicts (one row per matching filter of its topic); the
    broadcast subscriptions then join on topic, the same filter text, and activity at
    the publish, so (event, subscription) pairs are only ever built for matches.
    """
    valid = checked_subs.filter(F.col("filter_error").isNull())
    events = pubs.join(filter_verdicts(pubs, valid), "msg_id")
    return _pairs(events, valid, on_filter=True).select(
        *_pair_columns(F.col("p.match_error").alias("match_error"))
    )


def subscription_counts(checked_subs: DataFrame) -> DataFrame:
    """One row: ``subscriptions`` and ``bad_filters`` (those whose filter does not parse)
    of :func:`check_filters`' output."""
    return checked_subs.agg(
        F.count(F.lit(1)).alias("subscriptions"),
        F.count_if(F.col("filter_error").isNotNull()).alias("bad_filters"),
    )


def match_error_count(expected: DataFrame) -> DataFrame:
    """One row: ``match_errors``, the (event, subscription) pairs of
    :func:`expected_receivers` whose filter failed to evaluate."""
    return expected.agg(F.count_if(F.col("match_error").isNotNull()).alias("match_errors"))

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
from pyspark.sql.window import Window

from spark_analysis.load import of_type
from spark_analysis.schema import Ev, order_key

MISSING_FILTER = "subscribe record has no filter"



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

    One window over each (node, sub)'s subscribe and unsubscribe records in the order
    they were written finds each subscribe's next unsubscribe: one shuffle, where
    joining every subscribe with every unsubscribe of its (node, sub), keeping the
    earliest later one and joining that back took three. An unsubscribe written at the
    same place in the order as a subscribe is not after it: at equal order, the
    unsubscribes sort first.
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
        .select(
            "node",
            "sub",
            F.struct(F.col("ts").alias("end_ts"), order_key().alias("end_at")).alias("_end"),
        )
    )
    # Each side's columns the other lacks are null in its rows.
    both = subs.unionByName(unsubs, allowMissingColumns=True).withColumn(
        "_at", F.coalesce(F.col("start_at"), F.col("_end.end_at"))
    )
    # Unsubscribes (start_at null) first among records at the same place in the order.
    after = (
        Window.partitionBy("node", "sub")
        .orderBy(F.col("_at"), F.col("start_at").isNotNull())
        .rowsBetween(1, Window.unboundedFollowing)
    )
    started = subs.columns
    ended = both.select(*started, F.first("_end", ignorenulls=True).over(after).alias("e"))
    return ended.filter(F.col("start_at").isNotNull()).select(
        *started,
        F.col("e.end_ts").alias("end_ts"),
        F.col("e.end_at").alias("end_at"),
    )


def _filter_status(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow: subscriptions -> the same plus ``filter_error``; each filter text is
    parsed once per worker."""
    errors_of: dict[str, str | None] = {}
    for batch in batches:
        errors: list[str | None] = []
        for text in batch.column("filter").to_pylist():
            if text is None:
                errors.append(MISSING_FILTER)
            elif text == "":
                errors.append(None)  # matches everything; no parser needed
            else:
                if text not in errors_of:
                    errors_of[text] = _parse_error(text)
                errors.append(errors_of[text])
        yield batch.append_column("filter_error", pa.array(errors, pa.string()))


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

    Subscriptions are few (a run has hundreds), so they pass through a Python worker
    whole, which parses each distinct filter text once: no distinct texts to shuffle
    and join back.
    """
    # Arrow batches, not pandas: the worker never imports pandas for a few strings.
    out = T.StructType([*subs.schema.fields, T.StructField("filter_error", T.StringType())])
    return subs.mapInArrow(_filter_status, out)


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
    """(event, filter) rows -> those whose filter matches the event's attrs (error
    null) or failed to evaluate (error set), without ``attrs``, plus ``match_error``;
    others dropped.

    Each filter text is parsed once per worker, each attrs text decoded once per batch.
    """
    import matching  # imported in the worker

    parsed: dict[str, Any] = {}
    for batch in batches:
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
        kept = batch.drop_columns(["attrs"]).take(pa.array(keep, type=pa.int64()))
        yield kept.append_column("match_error", pa.array(errors, pa.string()))


def judged_events(pubs: DataFrame, subs: DataFrame) -> DataFrame:
    """:func:`publishes`' events without ``attrs``, plus ``filter`` and
    ``match_error``: a row for each distinct filter of the event's topic's
    subscriptions that matches the event's attrs (``match_error`` null) or failed to
    evaluate on them (``match_error`` set).

    Many subscriptions share a filter text, so evaluating each distinct filter once per
    event, rather than once per (event, subscription) pair, sends several times fewer
    rows through the Python workers. The empty filter matches everything without a
    trip to Python. Each row carries its event's columns, so no join by ``msg_id``
    brings them back. ``subs`` must only carry filters that parse (see
    :func:`check_filters`).
    """
    filters = subs.select("topic", "filter").distinct()
    per_event = pubs.join(F.broadcast(filters), "topic")
    judged = [f for f in per_event.schema.fields if f.name != "attrs"]
    match_error = T.StructField("match_error", T.StringType())
    match_all = per_event.filter(F.col("filter") == "").select(
        *(f.name for f in judged), F.lit(None).cast(T.StringType()).alias("match_error")
    )
    evaluated = per_event.filter(F.col("filter") != "").mapInArrow(
        _verdict_batches, T.StructType([*judged, match_error])
    )
    return match_all.unionByName(evaluated)


def filter_verdicts(pubs: DataFrame, subs: DataFrame) -> DataFrame:
    """(msg_id, filter, match_error) of :func:`judged_events`."""
    return judged_events(pubs, subs).select("msg_id", "filter", "match_error")


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
    return _pairs(judged_events(pubs, valid), valid, on_filter=True).select(
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

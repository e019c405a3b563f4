"""Durable consumers (``consumer``, ``ack``, ``term``, ``redeliver``, ``dead_letter``
records): each step on a tiny in-line trace whose figures are worked out by hand below.

The trace: topic ``tasks`` has three consumers, ``workers`` (two members, first record
at 2.0, deleted at 9.25 and made again at 9.5), ``audit`` (one member, first record at
5.5) and ``gone`` (one member, first record at 4.5, deleted at 6.25); topic ``other``
has none.

========  =======  ===========  =================================================
event     publish  publish_ack  consumer records
========  =======  ===========  =================================================
m1 tasks  1.0      1.25         workers ack 2.5; audit ack 6.0
m2 tasks  3.0      3.25         workers ack 3.5, redeliver 4.0, ack 4.5
m3 tasks  4.0      4.25         workers redeliver 5.0 and 6.0, dead_letter 7.0;
                               gone ack 4.75
m4 tasks  5.0      5.25         workers term 5.5
m5 tasks  6.0      6.25         audit ack 6.5
m6 tasks  7.0      -            (unreliable: nobody's to handle)
m7 tasks  8.0      8.25         audit ack 9.0; dropped as too_old at 8.5
m8 other  5.0      5.25         -
m9 tasks  -        9.0          (its publish record was lost: published at 9.0)
========  =======  ===========  =================================================
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_analysis.consumers import (
    ack_latency_percentiles,
    consumer_counts,
    consumer_outcomes,
    consumer_records,
    consumers_seen,
    event_handling,
    excluded_events,
    lag_bin_width,
    lag_over_time,
    lag_span,
    reliable_events,
)
from spark_analysis.expected import publishes
from spark_analysis.parse import parse_text
from tests.spark.helpers import assert_df_equal, records_df

pytestmark = pytest.mark.spark

ROOT, PUBLISHER = "aa", "bb"
W, A, G = "workers", "audit", "gone"


def publish(msg_id: str, ts: float, topic: str = "tasks") -> dict[str, Any]:
    return {"ts": ts, "node": PUBLISHER, "ev": "publish", "topic": topic, "msg_id": msg_id,
            "attrs": "{}", "size": 1}


def published(msg_id: str, ts: float, topic: str = "tasks") -> dict[str, Any]:
    return {"ts": ts, "node": PUBLISHER, "ev": "publish_ack", "topic": topic, "msg_id": msg_id,
            "seq": int(ts * 4)}


def member(ts: float, durable: str, op: str, addr: str | None, sub: int | None
           ) -> dict[str, Any]:
    return {"ts": ts, "node": ROOT, "ev": "consumer", "topic": "tasks", "durable": durable,
            "op": op, "member": addr, "sub": sub}


def on_event(ev: str, ts: float, durable: str, msg_id: str, attempt: int) -> dict[str, Any]:
    record = {"ts": ts, "node": ROOT, "ev": ev, "topic": "tasks", "durable": durable,
              "seq": 1, "msg_id": msg_id}
    if ev == "dead_letter":
        return record | {"attempts": attempt, "to": None}
    return record | {"attempt": attempt} | ({} if ev == "redeliver" else {"member": "h:1"})


RECORDS = [
    *[publish(m, ts) for m, ts in [("m1", 1.0), ("m2", 3.0), ("m3", 4.0), ("m4", 5.0),
                                   ("m5", 6.0), ("m6", 7.0), ("m7", 8.0)]],
    publish("m8", 5.0, "other"),
    *[published(m, ts) for m, ts in [("m1", 1.25), ("m2", 3.25), ("m3", 4.25),
                                     ("m4", 5.25), ("m5", 6.25), ("m7", 8.25), ("m9", 9.0)]],
    published("m8", 5.25, "other"),
    member(2.0, W, "attach", "h:1", 1),
    member(2.0, W, "attach", "h:2", 2),
    on_event("ack", 2.5, W, "m1", 1),
    on_event("ack", 3.5, W, "m2", 1),
    on_event("redeliver", 4.0, W, "m2", 2),
    on_event("ack", 4.5, W, "m2", 2),
    on_event("redeliver", 5.0, W, "m3", 2),
    on_event("redeliver", 6.0, W, "m3", 3),
    on_event("dead_letter", 7.0, W, "m3", 3),
    on_event("term", 5.5, W, "m4", 1),
    member(8.5, W, "detach", "h:2", 2),
    member(9.25, W, "delete", None, None),
    member(9.5, W, "attach", "h:1", 1),  # the same member makes it again
    member(5.5, A, "attach", "h:3", 7),
    on_event("ack", 6.0, A, "m1", 1),
    on_event("ack", 6.5, A, "m5", 1),
    on_event("ack", 9.0, A, "m7", 1),
    member(4.5, G, "attach", "h:4", 9),
    on_event("ack", 4.75, G, "m3", 1),
    member(6.25, G, "delete", None, None),
    {"ts": 8.5, "node": "cc", "ev": "drop", "topic": "tasks", "msg_id": "m7",
     "reason": "too_old"},
    {"ts": 8.5, "node": "cc", "ev": "drop", "topic": "tasks", "msg_id": "m5",
     "reason": "overload"},
    # Names no consumer: left out.
    {"ts": 3.0, "node": ROOT, "ev": "ack", "topic": "tasks", "msg_id": "m2", "seq": 2},
]


def test_consumer_records_parse_with_their_types() -> None:
    lines = [member(2.0, W, "attach", "h:1", 1), on_event("redeliver", 5.0, W, "m3", 2),
             on_event("dead_letter", 7.0, W, "m3", 3)]
    table, tally = parse_text("".join(json.dumps(r) + "\n" for r in lines))
    assert not tally.bad
    attach, redeliver, dead = table.to_pylist()
    assert (attach["durable"], attach["op"], attach["member"], attach["sub"]) == (
        W, "attach", "h:1", 1)
    assert (redeliver["msg_id"], redeliver["attempt"]) == ("m3", 2)
    assert (dead["attempts"], dead["to"]) == (3, None)
    wrong = json.dumps(on_event("dead_letter", 1.0, W, "m3", 3) | {"attempts": "3"})
    _, tally = parse_text(wrong + "\n")
    assert tally.bad == {"field of the wrong type": 1}


def frames(spark: SparkSession) -> tuple[DataFrame, DataFrame, DataFrame, DataFrame]:
    """(records, consumer records, consumers seen, publishes)."""
    records = records_df(spark, RECORDS)
    crecs = consumer_records(records)
    return records, crecs, consumers_seen(crecs), publishes(records)


def outcomes_of(spark: SparkSession) -> tuple[DataFrame, DataFrame, DataFrame]:
    records, crecs, found, pubs = frames(spark)
    outcomes = consumer_outcomes(
        found,
        event_handling(crecs),
        reliable_events(records, pubs),
        pubs,
        excluded_events(records),
    )
    return outcomes, found, pubs


def test_each_consumer_is_seen_with_its_members(spark: SparkSession) -> None:
    _, _, found, _ = frames(spark)
    # workers: h:1 attached twice (3 attaches, 2 distinct members), h:2 left once; its
    # delete was followed by an attach. gone's was not.
    assert_df_equal(
        found,
        [("tasks", W, 2.0, None, 3, 1, 2), ("tasks", A, 5.5, None, 1, 0, 1),
         ("tasks", G, 4.5, 6.25, 1, 0, 1)],
        ["topic", "durable", "first_ts", "deleted_ts", "attaches", "detaches", "members"],
    )


def test_handling_counts_each_consumers_records_per_event(spark: SparkSession) -> None:
    _, crecs, _, _ = frames(spark)
    assert_df_equal(
        event_handling(crecs),
        [
            ("tasks", W, "m1", 1, 2.5, 0, 0, 0),
            ("tasks", W, "m2", 2, 3.5, 0, 1, 0),
            ("tasks", W, "m3", 0, None, 0, 2, 1),
            ("tasks", W, "m4", 0, None, 1, 0, 0),
            ("tasks", A, "m1", 1, 6.0, 0, 0, 0),
            ("tasks", A, "m5", 1, 6.5, 0, 0, 0),
            ("tasks", A, "m7", 1, 9.0, 0, 0, 0),
            ("tasks", G, "m3", 1, 4.75, 0, 0, 0),
        ],
        ["topic", "durable", "msg_id", "acks", "first_ack_ts", "terms", "redeliveries",
         "dead_letters"],
    )


def test_reliable_events_are_those_with_a_publish_ack(spark: SparkSession) -> None:
    records, _, _, pubs = frames(spark)
    # m6 had no publish_ack; m9 had no publish record, so its publish_ack's time.
    assert_df_equal(
        reliable_events(records, pubs),
        [("tasks", "m1", 1.0), ("tasks", "m2", 3.0), ("tasks", "m3", 4.0),
         ("tasks", "m4", 5.0), ("tasks", "m5", 6.0), ("tasks", "m7", 8.0),
         ("tasks", "m9", 9.0), ("other", "m8", 5.0)],
        ["topic", "msg_id", "pub_ts"],
    )
    assert_df_equal(excluded_events(records), [("m7",)], ["msg_id"])  # not the overload


def test_outcomes_are_the_expected_events_and_what_became_of_them(
    spark: SparkSession,
) -> None:
    outcomes, _, _ = outcomes_of(spark)
    # workers (from 2.0): m2, m3, m4, m5, m7, m9 published since, and m1 it handled.
    # audit (from 5.5): m5, m7, m9 published since, and m1 it handled. m6 is nobody's;
    # m7 is excluded for workers (too old) and handled by audit all the same.
    # gone (4.5 to its delete at 6.25): m4, m5 published then, left pending; m3 handled.
    assert_df_equal(
        outcomes,
        [
            ("tasks", W, "m1", True, False, False, False, 1500.0),
            ("tasks", W, "m2", True, False, False, False, 500.0),
            ("tasks", W, "m3", True, False, False, False, None),
            ("tasks", W, "m4", True, False, False, False, None),
            ("tasks", W, "m5", False, False, False, True, None),
            ("tasks", W, "m7", False, True, False, False, None),
            ("tasks", W, "m9", False, False, False, True, None),
            ("tasks", A, "m1", True, False, False, False, 5000.0),
            ("tasks", A, "m5", True, False, False, False, 500.0),
            ("tasks", A, "m7", True, False, False, False, 1000.0),
            ("tasks", A, "m9", False, False, False, True, None),
            ("tasks", G, "m3", True, False, False, False, 750.0),
            ("tasks", G, "m4", False, False, True, False, None),
            ("tasks", G, "m5", False, False, True, False, None),
        ],
        ["topic", "durable", "msg_id", "handled", "excluded", "pending_at_delete", "lost",
         "ack_latency_ms"],
    )


COUNT_COLUMNS = ["topic", "durable", "members", "expected", "handled", "acknowledged", "acks",
                 "acked_more_than_once", "terminated", "redelivered", "redeliveries",
                 "dead_lettered", "excluded", "pending_at_delete", "lost"]


def test_counts_per_consumer(spark: SparkSession) -> None:
    outcomes, found, _ = outcomes_of(spark)
    assert_df_equal(
        consumer_counts(outcomes, found),
        [
            # 7 expected: m1, m2 acked (m2 twice, once redelivered), m3 redelivered twice
            # then dead-lettered, m4 ended: 4 handled; m7 excluded; m5, m9 lost.
            ("tasks", W, 2, 7, 4, 2, 3, 1, 1, 2, 3, 1, 1, 0, 2),
            # 4 expected: m1, m5, m7 acked once each; m9 lost.
            ("tasks", A, 1, 4, 3, 3, 3, 0, 0, 0, 0, 0, 0, 0, 1),
            # 3 expected: m3 acked, m4 and m5 pending when it was deleted.
            ("tasks", G, 1, 3, 1, 1, 1, 0, 0, 0, 0, 0, 0, 2, 0),
        ],
        COUNT_COLUMNS,
    )


def test_a_consumer_without_events_counts_zeros(spark: SparkSession) -> None:
    records = records_df(spark, [RECORDS[0], member(2.0, W, "attach", "h:1", 1)])
    crecs = consumer_records(records)
    found, pubs = consumers_seen(crecs), publishes(records)
    outcomes = consumer_outcomes(
        found, event_handling(crecs), reliable_events(records, pubs), pubs,
        excluded_events(records),
    )
    assert_df_equal(
        consumer_counts(outcomes, found),
        [("tasks", W, 1, *[0] * 12)],
        COUNT_COLUMNS,
    )


def test_ack_latency_percentiles_per_consumer_and_overall(spark: SparkSession) -> None:
    outcomes, _, _ = outcomes_of(spark)
    # workers [500, 1500]: p50 rank 1, p99 rank 2. audit [500, 1000, 5000]: ranks 2, 3.
    # gone [750]. All six [500, 500, 750, 1000, 1500, 5000]: ranks 3 and 6.
    assert_df_equal(
        ack_latency_percentiles(outcomes),
        [
            ("tasks", W, False, 500, 500.0, 2),
            ("tasks", W, False, 990, 1500.0, 2),
            ("tasks", A, False, 500, 1000.0, 3),
            ("tasks", A, False, 990, 5000.0, 3),
            ("tasks", G, False, 500, 750.0, 1),
            ("tasks", G, False, 990, 750.0, 1),
            (None, None, True, 500, 750.0, 6),
            (None, None, True, 990, 5000.0, 6),
        ],
        ["topic", "durable", "overall", "permille", "latency_ms", "n"],
    )


def test_the_lag_spans_the_consumers_records_and_their_topics_publishes(
    spark: SparkSession,
) -> None:
    _, crecs, found, pubs = frames(spark)
    # From m1's publish (1.0) to workers' last attach (9.5); m8's topic has no consumer.
    assert_df_equal(lag_span(pubs, crecs, found), [(1.0, 9.5)], ["t_min", "t_max"])


@pytest.mark.parametrize(
    ("span", "width"),
    [(8.5, 0.2), (100.0, 2.0), (49.0, 1.0), (50.0, 1.0), (1e6, 20_000.0), (0.0, 1.0),
     (0.003, 0.0001)],
)
def test_lag_bins_are_round_and_at_most_fifty(span: float, width: float) -> None:
    assert lag_bin_width(span) == pytest.approx(width, rel=1e-12)
    assert lag_bin_width(span) * 50 >= span


def test_lag_is_published_minus_acknowledged_by_each_bins_end(spark: SparkSession) -> None:
    outcomes, found, pubs = outcomes_of(spark)
    # Bins of 2 s from 0: 1.0-9.5 is bins 0..4, ending at 2, 4, 6, 8, 10. Publishes on
    # tasks (by publish record): m1 | m2 | m3 m4 | m5 m6 | m7 -> 1, 2, 4, 6, 7 so far.
    # workers' first acks: m1 2.5, m2 3.5 -> 0, 2, 2, 2, 2.
    # audit's: m1 6.0, m5 6.5, m7 9.0 -> 0, 0, 0, 2, 3. gone's: m3 4.75 -> 0, 0, 1, 1, 1.
    lag = lag_over_time(pubs, outcomes, found, 1.0, 9.5, 2.0)
    ends = [2.0, 4.0, 6.0, 8.0, 10.0]
    published = [1, 2, 4, 6, 7]
    acked = {W: [0, 2, 2, 2, 2], A: [0, 0, 0, 2, 3], G: [0, 0, 1, 1, 1]}
    assert_df_equal(
        lag,
        [
            ("tasks", d, b, ends[b], published[b], acked[d][b], published[b] - acked[d][b])
            for d in (W, A, G)
            for b in range(5)
        ],
        ["topic", "durable", "bin", "ts", "published", "acknowledged", "lag"],
    )

"""Subscriptions, active-at-publish pairs, delivery outcomes, duplicates, bimodal shares."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from spark_analysis import delivery, expected
from spark_analysis.stats import rows_by_scope
from tests.spark.helpers import assert_df_equal, records_df

pytestmark = pytest.mark.spark


def sub(ts: float, node: str, sid: int, flt: str = "", topic: str = "t") -> dict[str, object]:
    return {"ts": ts, "node": node, "ev": "subscribe", "topic": topic, "sub": sid, "filter": flt}


def unsub(ts: float, node: str, sid: int) -> dict[str, object]:
    return {
        "ts": ts,
        "node": node,
        "ev": "unsubscribe",
        "topic": "t",
        "sub": sid,
        "reason": "client",
    }


def pub(ts: float, node: str, mid: str, attrs: str = "{}") -> dict[str, object]:
    return {
        "ts": ts,
        "node": node,
        "ev": "publish",
        "topic": "t",
        "msg_id": mid,
        "attrs": attrs,
        "size": 1,
    }


def dlv(
    ts: float,
    node: str,
    sid: int,
    mid: str,
    dup: bool = False,
    hop: int = 1,
    replay: bool | None = None,
) -> dict[str, object]:
    record: dict[str, object] = {
        "ts": ts,
        "node": node,
        "ev": "deliver",
        "topic": "t",
        "msg_id": mid,
        "sub": sid,
        "hop": hop,
        "dup": dup,
    }
    if replay is not None:
        record["replay"] = replay
    return record


def test_active_subscriptions_at_publish_time(spark: SparkSession) -> None:
    records = records_df(
        spark,
        [
            sub(1.0, "a", 1),
            sub(5.0, "b", 1),  # same ts as m1 on another node: active ([start, end))
            sub(9.0, "c", 1),  # after m1
            unsub(5.0, "a", 1),  # a ends at 5.0: not active for m1 at 5.0
            sub(5.0, "p", 7),  # publisher's own node, written before the publish: active
            pub(5.0, "p", "m1"),
            sub(5.0, "p", 8),  # written after the publish on the same node: not active
            pub(4.0, "p", "m0"),
        ],
    )
    subs = expected.check_filters(expected.subscriptions(records))
    pairs = expected.candidate_pairs(expected.publishes(records), subs)
    assert_df_equal(
        pairs.select("msg_id", "node", "sub"), [("m1", "b", 1), ("m1", "p", 7), ("m0", "a", 1)]
    )


def test_each_subscription_ends_at_its_next_unsubscribe(spark: SparkSession) -> None:
    same_place = {"src_row": 90}  # two records of one node at one place in its order
    records = records_df(
        spark,
        [
            unsub(0.5, "a", 1),  # before any subscribe: ends nothing
            sub(1.0, "a", 1),
            unsub(2.0, "a", 1),
            unsub(2.5, "a", 1),  # a second unsubscribe: the first one ended it
            sub(3.0, "a", 1),  # the same id again: a subscription of its own
            unsub(4.0, "a", 1),
            sub(5.0, "a", 1),  # never unsubscribed
            sub(1.0, "b", 1),
            unsub(1.0, "b", 2),  # another sub id
            sub(6.0, "c", 1) | same_place,
            unsub(6.0, "c", 1) | same_place,  # not after the subscribe
            unsub(7.0, "c", 1),
        ],
    )
    assert_df_equal(
        expected.subscriptions(records).select("node", "start_ts", "end_ts", "end_at.src_row"),
        [
            ("a", 1.0, 2.0, 2),
            ("a", 3.0, 4.0, 5),
            ("a", 5.0, None, None),
            ("b", 1.0, None, None),
            ("c", 6.0, 7.0, 11),
        ],
    )


def test_outcomes_duplicates_and_false_deliveries(spark: SparkSession) -> None:
    records = records_df(
        spark,
        [
            sub(1.0, "a", 1),
            sub(1.0, "b", 1),
            sub(1.0, "c", 1),
            pub(2.0, "p", "m1"),
            dlv(2.5, "a", 1, "m1"),
            dlv(2.7, "a", 1, "m1", dup=True),  # flagged and repeated: one duplicate
            dlv(2.8, "a", 1, "m1"),  # repeated without the flag: still a duplicate
            dlv(2.2, "b", 1, "m1", dup=True, hop=3),  # only record says dup: delivered + dup
            dlv(2.4, "z", 9, "m1"),  # nobody expected z: false
            dlv(2.6, "y", 8, "m1", replay=True),  # not expected, but asked for: replayed
            # c never gets m1: missing
        ],
    )
    subs = expected.check_filters(expected.subscriptions(records))
    pubs = expected.publishes(records)
    exp = expected.expected_receivers(pubs, subs).drop("match_error")
    outcomes = delivery.delivery_outcomes(exp, delivery.delivery_keys(records))
    assert_df_equal(
        outcomes.select("node", "sub", "expected", "delivered", "duplicates", "hop"),
        [
            ("a", 1, True, True, 2, 1),
            ("b", 1, True, True, 1, 3),
            ("c", 1, True, False, 0, None),
            ("y", 8, False, True, 0, 1),
            ("z", 9, False, True, 0, 1),
        ],
    )
    lat = {r["node"]: r["latency_ms"] for r in outcomes.collect()}
    assert lat["a"] == pytest.approx(500.0) and lat["b"] == pytest.approx(200.0)
    assert lat["c"] is None and lat["z"] is None and lat["y"] is None
    counts = rows_by_scope(delivery.delivery_counts(outcomes))[None][0]
    assert counts == {
        "expected": 3,
        "delivered": 2,
        "false_deliveries": 1,
        "replayed": 1,
        "duplicates": 3,
    }
    shares = rows_by_scope(delivery.reach_shares(delivery.per_event(outcomes)))["t"][0]
    # 2 of 3 delivered: neither over 90% nor under 10%
    assert shares == {"events_with_receivers": 1, "events_over_90": 0, "events_under_10": 0}


def test_first_delivery_record_is_the_first_written(spark: SparkSession) -> None:
    """Records of one key in ts order, and equal ts in the node's write order: rotation
    rank, then the line."""
    first_of_all = {"src_rank": 1, "src_row": 9}
    records = records_df(
        spark,
        [
            dlv(2.0, "a", 1, "m1", hop=4),
            dlv(2.0, "a", 1, "m1", hop=5, dup=True, replay=True) | first_of_all,
            dlv(1.5, "b", 1, "m1", hop=6, dup=True),
            dlv(1.0, "b", 1, "m1", hop=7),
            dlv(3.0, "d", 1, "m1", hop=2, dup=True) | {"src_row": 3},
            dlv(3.0, "d", 1, "m1", hop=3) | {"src_row": 2},
        ],
    )
    assert_df_equal(
        delivery.delivery_keys(records).select(
            "node", "first_ts", "first_hop", "replay", "duplicates"
        ),
        [
            ("a", 2.0, 5, True, 2),  # rank 1 (rotated) before the live file
            ("b", 1.0, 7, False, 1),  # earlier ts first, whatever the line order
            ("d", 3.0, 3, False, 1),  # lower line first
        ],
    )


def test_filters_decide_and_bad_filters_match_nothing(spark: SparkSession) -> None:
    records = records_df(
        spark,
        [
            sub(1.0, "a", 1, "price > 50"),
            sub(1.0, "b", 1, "urgent = TRUE"),
            sub(1.0, "c", 1, "price >"),  # does not parse
            sub(1.0, "d", 1, "n = 1"),
            pub(2.0, "p", "m1", '{"price": 70.5, "urgent": true, "n": 1}'),
            pub(2.0, "p", "m2", '{"price": 10, "urgent": 1, "n": true}'),
        ],
    )
    subs = expected.check_filters(expected.subscriptions(records))
    assert [r["node"] for r in subs.filter("filter_error is not null").collect()] == ["c"]
    assert_df_equal(expected.subscription_counts(subs), [(4, 1)], check_schema=False)
    exp = expected.expected_receivers(expected.publishes(records), subs)
    assert_df_equal(
        exp.select("msg_id", "node", "match_error"),
        [("m1", "a", None), ("m1", "b", None), ("m1", "d", None)],
    )
    assert_df_equal(expected.match_error_count(exp), [(0,)])


def test_each_distinct_filter_is_judged_once_per_event(spark: SparkSession) -> None:
    records = records_df(
        spark,
        [
            sub(1.0, "a", 1, "price > 50"),
            sub(1.0, "b", 1, "price > 50"),  # same text: one verdict serves both
            sub(1.0, "c", 1, ""),
            sub(1.0, "d", 1, "price > 50", topic="other"),  # other topic: not paired
            sub(3.0, "e", 1, "price > 50"),  # after m1, before m2
            pub(2.0, "p", "m1", '{"price": 70}'),
            pub(4.0, "p", "m2", '{"price": 10}'),
        ],
    )
    subs = expected.check_filters(expected.subscriptions(records))
    pubs = expected.publishes(records)
    verdicts = expected.filter_verdicts(pubs, subs)
    assert_df_equal(verdicts, [("m1", "price > 50", None), ("m1", "", None), ("m2", "", None)])
    exp = expected.expected_receivers(pubs, subs)
    assert_df_equal(
        exp.select("msg_id", "node", "sub", "pub_ts", "match_error"),
        [
            ("m1", "a", 1, 2.0, None),
            ("m1", "b", 1, 2.0, None),
            ("m1", "c", 1, 2.0, None),
            ("m2", "c", 1, 4.0, None),
        ],
    )


def test_attrs_that_fail_to_decode_count_once_per_pair(spark: SparkSession) -> None:
    records = records_df(
        spark,
        [
            sub(1.0, "a", 1, "price > 50"),
            sub(1.0, "b", 1, "price > 50"),
            pub(2.0, "p", "m1", "[1]"),  # not an object: the evaluation fails
        ],
    )
    subs = expected.check_filters(expected.subscriptions(records))
    exp = expected.expected_receivers(expected.publishes(records), subs)
    rows = exp.select("node", "match_error").collect()
    assert sorted(r["node"] for r in rows) == ["a", "b"]
    assert all(r["match_error"] for r in rows)
    assert_df_equal(expected.match_error_count(exp), [(2,)])

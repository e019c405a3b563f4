"""Tree membership and depth by iterative joins, with cycles and dangling parents."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from spark_analysis.cost import record_tally
from spark_analysis.stats import rows_by_scope
from spark_analysis.trees import (
    depth_histogram,
    last_event_from_tally,
    last_event_per_topic,
    tree_depths,
    tree_members,
)
from tests.spark.helpers import assert_df_equal, records_df, schema

pytestmark = pytest.mark.spark

MEMBERS = schema(
    ("topic", T.StringType()),
    ("node", T.StringType()),
    ("parent", T.StringType()),
    ("role", T.StringType()),
)


def tree(ts: float, node: str, parent: str | None, topic: str = "t") -> dict[str, object]:
    return {
        "ts": ts,
        "node": node,
        "ev": "tree",
        "topic": topic,
        "parent": parent,
        "role": "root" if parent is None else "member",
    }


def test_latest_tree_record_wins_and_leave_removes(spark: SparkSession) -> None:
    records = records_df(
        spark,
        [
            tree(1.0, "r", None),
            tree(1.0, "a", "r"),
            tree(2.0, "a", "b"),  # a moved under b
            tree(1.0, "b", "r"),
            tree(1.0, "c", "a"),
            {"ts": 3.0, "node": "c", "ev": "tree_leave", "topic": "t"},  # c left
            {"ts": 4.0, "node": "d", "ev": "tree_leave", "topic": "t"},
            tree(4.0, "d", "r"),  # same ts, written after the leave: d is in
            tree(5.0, "e", "r"),
            {"ts": 5.0, "node": "e", "ev": "tree_leave", "topic": "t"},  # written after: e is out
            tree(1.0, "r", None, topic="u"),
        ],
    )
    assert_df_equal(
        tree_members(records).select("topic", "node", "parent"),
        [("t", "r", None), ("t", "a", "b"), ("t", "b", "r"), ("t", "d", "r"), ("u", "r", None)],
    )


def test_tree_records_after_the_topics_last_event_are_left_out(spark: SparkSession) -> None:
    # Graceful shutdown: every node leaves after the last delivery; the tree that
    # carried topic t's events is still the one measured. Topic u had no events, so
    # its whole trace counts (its leave removes b).
    records = records_df(
        spark,
        [
            tree(1.0, "r", None),
            tree(1.0, "a", "r"),
            tree(1.0, "b", "a"),
            {"ts": 2.0, "node": "r", "ev": "publish", "topic": "t", "msg_id": "m"},
            {"ts": 2.5, "node": "b", "ev": "deliver", "topic": "t", "msg_id": "m"},
            tree(3.0, "b", "r"),  # moved after the last event: not counted
            {"ts": 9.0, "node": "r", "ev": "tree_leave", "topic": "t"},
            {"ts": 9.0, "node": "a", "ev": "tree_leave", "topic": "t"},
            {"ts": 9.0, "node": "b", "ev": "tree_leave", "topic": "t"},
            tree(1.0, "b", None, topic="u"),
            tree(1.0, "c", "b", topic="u"),
            {"ts": 9.0, "node": "b", "ev": "tree_leave", "topic": "u"},
        ],
    )
    want = [("t", "r", None), ("t", "a", "r"), ("t", "b", "a"), ("u", "c", "b")]
    assert_df_equal(tree_members(records).select("topic", "node", "parent"), want)
    # the same from the record tally that loading writes (each group's latest ts)
    last_event = last_event_from_tally(record_tally(records))
    assert_df_equal(last_event, last_event_per_topic(records))
    assert_df_equal(last_event, [("t", 2.5)])
    assert_df_equal(tree_members(records, last_event).select("topic", "node", "parent"), want)


def test_depths_with_cycle_dangling_parent_and_two_topics(spark: SparkSession) -> None:
    members = spark.createDataFrame(
        [
            ("t", "r", None, "root"),
            ("t", "a", "r", "member"),
            ("t", "b", "a", "member"),
            ("t", "c", "b", "member"),
            ("t", "x", "y", "member"),  # y is not in the tree
            ("t", "p", "q", "member"),  # p and q form a cycle
            ("t", "q", "p", "member"),
            ("t", "s", "s", "member"),  # its own parent
            ("u", "b", None, "root"),  # b is also root of another topic
            ("u", "r", "b", "member"),
        ],
        MEMBERS,
    )
    depths = tree_depths(members)
    assert_df_equal(
        depths.select("topic", "node", "depth"),
        [
            ("t", "r", 0),
            ("t", "a", 1),
            ("t", "b", 2),
            ("t", "c", 3),
            ("t", "x", None),
            ("t", "p", None),
            ("t", "q", None),
            ("t", "s", None),
            ("u", "b", 0),
            ("u", "r", 1),
        ],
    )
    hist = rows_by_scope(depth_histogram(depths))
    assert sorted((-1 if r["depth"] is None else r["depth"], r["count"]) for r in hist["t"]) == [
        (-1, 4),
        (0, 1),
        (1, 1),
        (2, 1),
        (3, 1),
    ]
    assert sorted((-1 if r["depth"] is None else r["depth"], r["count"]) for r in hist[None]) == [
        (-1, 4),
        (0, 2),
        (1, 2),
        (2, 1),
        (3, 1),
    ]


def test_depths_of_an_empty_tree(spark: SparkSession) -> None:
    assert tree_depths(spark.createDataFrame([], MEMBERS)).count() == 0


def test_depths_of_a_long_chain_and_a_wide_level(spark: SparkSession) -> None:
    chain = [("t", "n0", None, "root")] + [
        ("t", f"n{i}", f"n{i - 1}", "member") for i in range(1, 60)
    ]
    wide = [("t", f"w{i}", "n0", "member") for i in range(5)]
    depths = tree_depths(spark.createDataFrame(chain + wide, MEMBERS))
    got = {r["node"]: r["depth"] for r in depths.collect()}
    assert got == {**{f"n{i}": i for i in range(60)}, **{f"w{i}": 1 for i in range(5)}}

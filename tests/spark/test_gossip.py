"""Per-topic and overall record counts (forward, recv and duplicates, repairs, drops)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from spark_analysis.gossip import event_reach, record_counts
from spark_analysis.stats import rows_by_scope
from tests.spark.helpers import records_df, schema

pytestmark = pytest.mark.spark


def test_record_counts_per_topic_and_overall(spark: SparkSession) -> None:
    def rec(ev: str, topic: str | None, **more: object) -> dict[str, object]:
        return {"ts": 1.0, "node": "a", "ev": ev, "topic": topic, **more}

    records = records_df(
        spark,
        [
            rec("forward", "t"),
            rec("forward", "t"),
            rec("forward", "u"),
            rec("recv", "t", dup=True),
            rec("recv", "t", dup=False),
            rec("recv", "u"),  # dup missing: not a duplicate
            rec("repair", "t", kind="gap"),
            rec("repair", "u", kind="gap"),
            rec("drop", "u", reason="ttl"),
            rec("drop", None, reason="ttl"),  # no topic: counted only overall
            rec("deliver", "t"),  # not counted here
        ],
    )
    got = {
        scope: sorted((r["ev"], r["detail"], r["count"], r["dups"]) for r in rows)
        for scope, rows in rows_by_scope(record_counts(records)).items()
    }
    assert got == {
        "t": [("forward", None, 2, 0), ("recv", None, 2, 1), ("repair", "gap", 1, 0)],
        "u": [
            ("drop", "ttl", 1, 0),
            ("forward", None, 1, 0),
            ("recv", None, 1, 0),
            ("repair", "gap", 1, 0),
        ],
        None: [
            ("drop", "ttl", 2, 0),
            ("forward", None, 3, 0),
            ("recv", None, 3, 1),
            ("repair", "gap", 2, 0),
        ],
    }


def test_event_reach_counts_distinct_nodes_across_bit_words(spark: SparkSession) -> None:
    # 70 nodes: their numbers span two 64-bit words.
    nodes = [f"n{i:02d}" for i in range(70)]
    rows: list[dict[str, object]] = [
        {"ts": 1.0, "node": n, "ev": "recv", "topic": "t", "msg_id": "m1"} for n in nodes
    ]
    rows += [
        {"ts": 2.0, "node": "n00", "ev": "recv", "topic": "t", "msg_id": "m1"},  # again
        {"ts": 3.0, "node": "n69", "ev": "deliver", "topic": "t", "msg_id": "m1"},
        {"ts": 3.0, "node": "n01", "ev": "deliver", "topic": "u", "msg_id": "m3"},
        {"ts": 3.0, "node": "n02", "ev": "recv", "topic": "u", "msg_id": "m3"},
        {"ts": 3.0, "node": "n03", "ev": "forward", "topic": "u", "msg_id": "m3"},  # not counted
        {"ts": 3.0, "node": "n04", "ev": "recv", "topic": "u", "msg_id": "m9"},  # unpublished
    ]
    records = records_df(spark, rows)
    pubs = spark.createDataFrame(
        [("t", "m1"), ("u", "m3"), ("u", "m2")],
        schema(("topic", T.StringType()), ("msg_id", T.StringType())),
    )
    want = [("t", "m1", 70), ("u", "m2", 0), ("u", "m3", 2)]
    got = sorted(tuple(r) for r in event_reach(records, pubs).collect())
    assert got == want
    # Numbered from a wider node table (every node that wrote a record): same reach.
    everyone = spark.createDataFrame(
        [(n,) for n in ["a", "zz", *nodes]], schema(("node", T.StringType()))
    )
    got = sorted(tuple(r) for r in event_reach(records, pubs, everyone).collect())
    assert got == want

"""Per-topic and overall record counts (forward, recv and duplicates, repairs, drops)."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from spark_analysis import gossip
from spark_analysis.cost import child_load, node_stress, record_tally
from spark_analysis.gossip import event_reach, record_counts
from spark_analysis.stats import rows_by_scope
from tests.spark.helpers import assert_df_equal, records_df, schema

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


def test_one_tally_gives_node_stress_and_record_counts(spark: SparkSession) -> None:
    rows: list[dict[str, object]] = [
        {"ts": 1.0, "node": "a", "ev": "forward", "topic": "t"},
        {"ts": 1.1, "node": "a", "ev": "forward", "topic": "u"},
        {"ts": 1.2, "node": "a", "ev": "recv", "topic": "t", "dup": True},
        {"ts": 1.3, "node": "a", "ev": "deliver", "topic": "t", "dup": True},
        {"ts": 1.4, "node": "a", "ev": "child", "topic": "t", "child": "b", "op": "add"},
        {"ts": 1.5, "node": "b", "ev": "recv", "topic": "t", "dup": False},
        {"ts": 1.6, "node": "b", "ev": "drop", "reason": "ttl"},
        {"ts": 1.7, "node": "c", "ev": "node_up"},  # wrote a record: a row of zeros
    ]
    records = records_df(spark, rows)
    tally = record_tally(records)
    got = {
        (r["node"], r["topic"], r["ev"], r["detail"]): (r["n"], r["dups"]) for r in tally.collect()
    }
    assert got[("a", "t", "forward", None)] == (1, 0)
    assert got[("a", "t", "recv", None)] == (1, 1)
    assert got[("a", "t", "deliver", None)] == (1, 1)  # dups of any type are tallied
    assert got[("b", None, "drop", "ttl")] == (1, 0)
    assert sum(n for n, _ in got.values()) == len(rows)
    stress = sorted(tuple(r) for r in node_stress(records, tally).collect())
    # (node, forwards, recvs, delivers, children at the end, most children at once)
    assert stress == [("a", 2, 1, 1, 1, 1), ("b", 0, 1, 0, 0, 0), ("c", 0, 0, 0, 0, 0)]
    assert stress == sorted(tuple(r) for r in node_stress(records).collect())

    def counts(df: DataFrame) -> list[tuple[object, ...]]:
        return sorted(
            (str(r["topic"]), r["overall"], r["ev"], str(r["detail"]), r["count"], r["dups"])
            for r in df.collect()
        )

    assert counts(record_counts(records, tally)) == counts(record_counts(records))
    assert ("None", True, "recv", "None", 2, 1) in counts(record_counts(records))


def test_peak_children_counts_what_was_held_at_once(spark: SparkSession) -> None:
    """After a graceful stop every node ends with no children; the peak still shows
    the load. A repeated add or a remove of a child never added changes nothing."""

    def child(ts: float, node: str, topic: str, kid: str, op: str) -> dict[str, object]:
        return {"ts": ts, "node": node, "ev": "child", "topic": topic, "child": kid, "op": op}

    records = records_df(
        spark,
        [
            child(1.0, "a", "t", "b", "add"),
            child(2.0, "a", "t", "c", "add"),
            child(3.0, "a", "u", "b", "add"),  # another topic's tree: held as well
            child(4.0, "a", "t", "b", "add"),  # already held
            child(5.0, "a", "t", "b", "remove"),
            child(6.0, "a", "u", "b", "remove"),
            child(7.0, "a", "t", "c", "remove"),
            child(1.0, "b", "t", "x", "remove"),  # never added
            # same instant: the line order decides (remove, then add: held at the end)
            child(2.0, "b", "t", "y", "add"),
            child(3.0, "b", "t", "y", "remove"),
            child(3.0, "b", "t", "y", "add"),
            {"ts": 9.0, "node": "c", "ev": "node_down", "reason": "stop"},
        ],
    )
    assert_df_equal(
        node_stress(records).select("node", "children", "peak_children"),
        [("a", 0, 3), ("b", 1, 1), ("c", 0, 0)],
    )
    # c wrote no child record: child_load has no row for it, node_stress fills in 0.
    assert_df_equal(child_load(records), [("a", 0, 3), ("b", 1, 1)], check_schema=False)
    assert [f.dataType for f in child_load(records).schema.fields[1:]] == [T.LongType()] * 2


def test_event_reach_counts_distinct_nodes_across_bit_words(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    # Numbered from a wider node list (every node that wrote a record): same reach.
    everyone = ["a", "zz", *nodes]
    got = sorted(tuple(r) for r in event_reach(records, pubs, everyone).collect())
    assert got == want
    # No node numbered: nothing is reached (no node's pairs survive the join).
    got = sorted(tuple(r) for r in event_reach(records, pubs, []).collect())
    assert got == [(topic, msg, 0) for topic, msg, _ in want]
    # Past MAX_WORD_COLUMNS words: aggregated by (msg_id, word), then by msg_id.
    monkeypatch.setattr(gossip, "MAX_WORD_COLUMNS", 1)
    got = sorted(tuple(r) for r in event_reach(records, pubs, everyone).collect())
    assert got == want

"""Per-topic and overall record counts (forward, recv and duplicates, repairs, drops)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from spark_analysis.gossip import record_counts
from spark_analysis.stats import rows_by_scope
from tests.spark.helpers import records_df

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

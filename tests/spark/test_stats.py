"""Exact nearest-rank percentiles and per-topic/overall grouping."""

from __future__ import annotations

import math
import random

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_analysis.stats import (
    RESULT,
    collect_results,
    nearest_rank,
    nearest_rank_rank,
    per_topic_and_overall,
    rows_by_scope,
    scoped,
    tagged_union,
)
from spark_analysis.summary import nearest_rank_in_histogram
from tests.spark.helpers import assert_df_equal, schema

pytestmark = pytest.mark.spark

VALUES = schema(("topic", T.StringType()), ("v", T.DoubleType()))


def brute_nearest_rank(values: list[float], permille: int) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(len(ordered) * permille / 1000)) - 1]


@pytest.mark.parametrize(
    ("n", "permille", "rank"),
    [
        (1, 500, 1),
        (2, 500, 1),
        (3, 500, 2),
        (10, 900, 9),
        (100, 990, 99),
        (101, 990, 100),
        (5, 990, 5),
        (1000, 1000, 1000),
        (7, 1, 1),
    ],
)
def test_rank_arithmetic(n: int, permille: int, rank: int) -> None:
    assert nearest_rank_rank(n, permille) == rank


def test_nearest_rank_matches_brute_force(spark: SparkSession) -> None:
    rng = random.Random(7)
    rows = [(rng.choice("abc"), float(rng.randint(0, 50))) for _ in range(357)]
    # A value without a topic counts overall only; a null value nowhere.
    rows += [("d", 4.0), ("a", None), (None, 17.0)]
    df = spark.createDataFrame(rows, VALUES)
    permilles = [0, 1, 100, 500, 900, 990, 999, 1000]
    got = {
        (r["topic"], r["overall"], r["permille"]): r["v"]
        for r in nearest_rank(df, "v", permilles).collect()
    }
    groups: dict[str | None, list[float]] = {None: []}
    for topic, v in rows:
        if v is not None:
            if topic is not None:
                groups.setdefault(topic, []).append(v)
            groups[None].append(v)
    want = {
        (t, t is None, p): brute_nearest_rank(vs, p) for t, vs in groups.items() for p in permilles
    }
    assert got == want
    overall = {
        (r["topic"], r["overall"], r["permille"], r["n"]): r["v"]
        for r in nearest_rank(df, "v", permilles, by_topic=False).collect()
    }
    n = len(groups[None])
    assert overall == {(None, True, p, n): want[(None, True, p)] for p in permilles}


def test_nearest_rank_of_one_value_and_of_ties(spark: SparkSession) -> None:
    # One value: every rank is that value. All equal: the value's range is every rank.
    df = spark.createDataFrame([("a", 3.0), ("b", 2.0), ("b", 2.0), ("b", 2.0)], VALUES)
    got = sorted(
        (r["topic"], r["permille"], r["v"], r["n"])
        for r in nearest_rank(df, "v", [1, 500, 1000]).collect()
        if not r["overall"]
    )
    assert got == [
        ("a", 1, 3.0, 1),
        ("a", 500, 3.0, 1),
        ("a", 1000, 3.0, 1),
        ("b", 1, 2.0, 3),
        ("b", 500, 2.0, 3),
        ("b", 1000, 2.0, 3),
    ]


def test_per_topic_and_overall(spark: SparkSession) -> None:
    df = spark.createDataFrame([("a", 1.0), ("a", 2.0), ("b", 5.0), (None, 1.0)], VALUES)
    out = per_topic_and_overall(df, [F.count(F.lit(1)).alias("n"), F.sum("v").alias("s")])
    assert_df_equal(
        out,
        [("a", False, 2, 3.0), ("b", False, 1, 5.0), (None, False, 1, 1.0), (None, True, 4, 9.0)],
        columns=["topic", "overall", "n", "s"],
    )


@pytest.mark.parametrize("permille", [1, 500, 900, 990, 1000])
def test_nearest_rank_in_histogram_matches_expanded_list(permille: int) -> None:
    rng = random.Random(permille)
    hist = [(v, rng.randint(1, 9)) for v in rng.sample(range(30), 12)]
    expanded = [float(v) for v, c in hist for _ in range(c)]
    assert nearest_rank_in_histogram(hist, permille) == brute_nearest_rank(expanded, permille)
    assert nearest_rank_in_histogram([], permille) is None


def test_results_collected_together_keep_their_rows_and_types(spark: SparkSession) -> None:
    df = spark.createDataFrame([("a", 1.0), ("a", 2.5), ("b", 5.0), (None, 1.0)], VALUES)
    per_scope = per_topic_and_overall(df, [F.count(F.lit(1)).alias("n"), F.sum("v").alias("s")])
    # Same column names with other types in another result: each keeps its own.
    other = df.groupBy("topic").agg(F.max("v").cast("long").alias("n"))
    empty = df.filter(F.col("v") > 100).select("v")
    results = {"scoped": per_scope, "other": other, "empty": empty}
    got = collect_results(results)
    assert list(got) == ["scoped", "other", "empty"]
    assert scoped(got["scoped"]) == rows_by_scope(per_scope)
    assert sorted(got["other"], key=lambda r: r["topic"] or "") == [
        {"topic": None, "n": 1},
        {"topic": "a", "n": 2},
        {"topic": "b", "n": 5},
    ]
    assert got["empty"] == []
    union = tagged_union(results)
    assert union.columns == [RESULT, "scoped", "other", "empty"]
    for name, df in results.items():
        fields = union.schema[name].dataType.fields
        assert [(f.name, f.dataType) for f in fields] == [
            (f.name, f.dataType) for f in df.schema.fields
        ]
    assert union.filter(F.col(RESULT) == "scoped").count() == per_scope.count()


def test_no_results_to_collect_together_is_misuse(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="at least one result"):
        tagged_union({})

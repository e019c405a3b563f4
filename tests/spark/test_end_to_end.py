"""The whole job on a synthetic trace directory, checked against a plain-Python reading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_analysis.analysis import run_analysis
from spark_analysis.summary import TOPIC_KEYS
from spark_analysis.synthetic import Spec, generate
from tests.spark import oracle
from tests.spark.helpers import matching_available

pytestmark = pytest.mark.spark

RUN = "synthetic"


def _check(spark: SparkSession, traces: Path, out: Path) -> dict[str, object]:
    result = run_analysis(spark, str(traces), out, run=RUN)
    summary = json.loads((out / "summary.json").read_text())  # valid JSON, no NaN
    assert summary == json.loads(json.dumps(result.summary))
    want = oracle.analyze(traces, run=RUN)
    oracle.assert_summary_matches(summary, want)
    for key in ("records", "bad_lines"):
        assert isinstance(summary[key], int)
    for scope in [summary["overall"], *summary["topics"].values()]:
        assert set(TOPIC_KEYS) <= set(scope)
    for key in ("count", "ok_rate", "hops_mean", "hops_p99"):
        assert key in summary["lookup"]
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 6
    assert "http://" not in page and "https://" not in page  # opens offline
    assert sorted(p.name for p in (out / "records").glob("ev=*"))  # Parquet by ev
    return summary


def test_match_all_filters_against_plain_python(spark: SparkSession, tmp_path: Path) -> None:
    info = generate(tmp_path / "traces", Spec(seed=3, events=150, filters=False))
    summary = _check(spark, info.out_dir, tmp_path / "out")
    # the generator injected every kind of fault; the analysis must see them
    overall = summary["overall"]
    assert summary["bad_lines"] == info.bad_lines > 0
    assert overall["false_deliveries"] > 0 and overall["duplicates"] > 0
    assert 0 < overall["delivery_ratio"] < 1
    assert overall["tree_detached"] > 0
    assert summary["lookup"]["hops_p99"] < 99  # the other run's lookups are filtered out


@pytest.mark.skipif(not matching_available(), reason="matching package not landed yet")
def test_real_filters_against_plain_python(spark: SparkSession, tmp_path: Path) -> None:
    info = generate(tmp_path / "traces", Spec(seed=5, events=150, filters=True))
    summary = _check(spark, info.out_dir, tmp_path / "out")
    assert summary["bad_filters"] > 0

"""The whole job on a synthetic trace directory, checked against a plain-Python reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_analysis.analysis import run_analysis
from spark_analysis.summary import TOPIC_KEYS
from spark_analysis.synthetic import Spec, generate
from tests.spark import oracle
from tests.spark.conftest import LocalRun

pytestmark = pytest.mark.spark

RUN = "synthetic"


def _check(traces: Path, out: Path, summary_in_memory: dict[str, Any]) -> dict[str, Any]:
    summary = json.loads((out / "summary.json").read_text())  # valid JSON, no NaN
    assert summary == json.loads(json.dumps(summary_in_memory))
    want = oracle.analyze(traces, run=RUN)
    oracle.assert_summary_matches(summary, want)
    assert set(summary["topics"]) == set(want["topics"])
    for key in ("records", "bad_lines"):
        assert isinstance(summary[key], int)
    for scope in [summary["overall"], *summary["topics"].values()]:
        assert set(TOPIC_KEYS) <= set(scope)
    for key in ("count", "ok_rate", "hops_mean", "hops_p99"):
        assert key in summary["lookup"]
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 6
    # No node recovered a durable log: the summary says so, the report shows no section.
    assert summary["recovery"]["nodes"] == 0 and "Recovery at start" not in page
    # Nor any durable consumer: no word of them in either.
    assert "consumers" not in summary and "Durable consumers" not in page
    assert "http://" not in page and "https://" not in page  # opens offline
    assert sorted(p.name for p in (out / "records").glob("ev=*"))  # Parquet by ev
    # Written through Hadoop's raw local file system: no .crc file beside each file.
    assert not sorted(out.rglob("*.crc"))
    return summary


def test_match_all_filters_against_plain_python(match_all_run: LocalRun) -> None:
    summary = _check(match_all_run.traces, match_all_run.out, match_all_run.summary)
    # the generator injected every kind of fault; the analysis must see them
    overall = summary["overall"]
    assert summary["bad_lines"] == match_all_run.bad_lines > 0
    assert overall["false_deliveries"] > 0 and overall["duplicates"] > 0
    assert 0 < overall["delivery_ratio"] < 1
    assert overall["tree_detached"] > 0
    assert summary["lookup"]["hops_p99"] < 99  # the other run's lookups are filtered out


def test_real_filters_against_plain_python(spark: SparkSession, tmp_path: Path) -> None:
    info = generate(tmp_path / "traces", Spec(seed=5, events=150, filters=True))
    result = run_analysis(spark, str(info.out_dir), tmp_path / "out", run=RUN)
    summary = _check(info.out_dir, tmp_path / "out", result.summary)
    assert summary["bad_filters"] > 0

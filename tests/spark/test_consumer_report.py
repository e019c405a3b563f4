"""Durable consumers in summary.json and report.html: the summary folded from collected
rows, the report's section, and a whole run over trace files of the hand-made trace of
test_consumers (its figures worked out there), also read by the plain-Python oracle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_analysis.analysis import run_analysis
from spark_analysis.cli import format_summary
from spark_analysis.report import consumers_section
from spark_analysis.summary import Collected, ConsumerRows, build_summary, consumers_summary
from tests.spark import consumer_oracle, oracle
from tests.spark.test_consumers import RECORDS, A, G, W

pytestmark = pytest.mark.spark

COUNT_KEYS = ("first_ts", "deleted_ts", "attaches", "detaches", "members", "expected",
              "handled", "acknowledged", "acks", "acked_more_than_once", "terminated",
              "redelivered", "redeliveries", "dead_lettered", "excluded", "pending_at_delete",
              "lost")
WORKERS = dict(zip(COUNT_KEYS, (2.0, None, 3, 1, 2, 7, 4, 2, 3, 1, 1, 2, 3, 1, 1, 0, 2),
                   strict=True))
AUDIT = dict(zip(COUNT_KEYS, (5.5, None, 1, 0, 1, 4, 3, 3, 3, 0, 0, 0, 0, 0, 0, 0, 1),
                 strict=True))
GONE = dict(zip(COUNT_KEYS, (4.5, 6.25, 1, 0, 1, 3, 1, 1, 1, 0, 0, 0, 0, 0, 0, 2, 0),
                strict=True))


def latency(durable: str | None, permille: int, ms: float) -> dict[str, Any]:
    return {"topic": None if durable is None else "tasks", "durable": durable,
            "overall": durable is None, "permille": permille, "latency_ms": ms, "n": 1}


def lag(durable: str, bin_: int, published: int, acked: int) -> dict[str, Any]:
    return {"topic": "tasks", "durable": durable, "bin": bin_, "ts": 2.0 * (bin_ + 1),
            "published": published, "acknowledged": acked, "lag": published - acked}


ROWS = ConsumerRows(
    counts=[{"topic": "tasks", "durable": W, **WORKERS}, {"topic": "tasks", "durable": A, **AUDIT}],
    latency=[latency(W, 500, 500.0), latency(W, 990, 1500.0), latency(A, 500, 1000.0),
             latency(A, 990, 5000.0), latency(None, 500, 1000.0), latency(None, 990, 5000.0)],
    # Out of bin order, as collect() may give them.
    lag=[lag(W, 1, 2, 2), lag(W, 0, 1, 0), lag(W, 2, 4, 2), lag(A, 2, 4, 0), lag(A, 0, 1, 0),
         lag(A, 1, 2, 0)],
    lag_bin_seconds=2.0,
)


def collected(rows: ConsumerRows) -> Collected:
    return Collected(records=0, lines=0, bad_lines=0, run=None, published={}, deliveries={},
                     latency={}, depth_hist={}, hops_hist={}, counts={}, reach={},
                     coverage={}, lookup_hist=[], modes={}, stress={}, bad_filters=0,
                     subscriptions=0, match_errors=0, consumers=rows)


def test_the_summary_gives_each_consumer_and_the_sums() -> None:
    summary = consumers_summary(collected(ROWS))
    assert summary is not None
    workers = summary["per_consumer"]["tasks"][W]
    assert {k: workers[k] for k in COUNT_KEYS} == WORKERS
    assert (workers["ack_latency_ms_p50"], workers["ack_latency_ms_p99"]) == (500.0, 1500.0)
    assert workers["none_lost"] is False
    assert workers["lag"] == {"ts": [2.0, 4.0, 6.0], "published": [1, 2, 4],
                              "acknowledged": [0, 2, 2], "lag": [1, 0, 2]}
    assert summary["per_consumer"]["tasks"][A]["lag"]["lag"] == [1, 2, 4]
    assert (summary["consumers"], summary["lag_bin_seconds"]) == (2, 2.0)
    assert summary["overall"] == {
        "members": 3, "expected": 11, "handled": 7, "acknowledged": 5, "acks": 6,
        "acked_more_than_once": 1, "terminated": 1, "redelivered": 2, "redeliveries": 3,
        "dead_lettered": 1, "excluded": 1, "pending_at_delete": 0, "lost": 3,
        "ack_latency_ms_p50": 1000.0, "ack_latency_ms_p99": 5000.0, "none_lost": False,
        "lag": {"ts": [2.0, 4.0, 6.0], "published": [2, 4, 8], "acknowledged": [0, 2, 2],
                "lag": [2, 2, 6]},
    }


def test_without_consumers_nothing_is_said_of_them() -> None:
    summary = build_summary(collected(ConsumerRows()))
    assert "consumers" not in summary
    assert consumers_section(summary) == ""
    assert "consumers" not in format_summary(summary)


def test_the_report_shows_the_check_each_consumer_and_the_lag() -> None:
    summary = build_summary(collected(ROWS))
    page = consumers_section(summary)
    assert "Durable consumers" in page and "3 lost of 11 expected" in page
    assert page.count("data:image/png;base64,") == 1
    assert page.index(f"<td>{A}</td>") < page.index(f"<td>{W}</td>")  # by name
    assert "durable consumers 2  expected 11  acknowledged 5" in format_summary(summary)


def test_a_run_whose_traces_hold_consumers_reports_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    for node in sorted({r["node"] for r in RECORDS}):
        lines = [r | ({"attrs": {}} if "attrs" in r else {}) for r in RECORDS
                 if r["node"] == node]
        (traces / f"{node}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    run_analysis(spark, str(traces), tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    consumers = summary["consumers"]
    # The plain-Python reading agrees on all of it (the lag series too)...
    want = consumer_oracle.analyze(traces)
    assert want is not None
    oracle.assert_summary_matches(consumers, want)
    # ...and both on the figures worked out by hand.
    for name, want in ((W, WORKERS), (A, AUDIT), (G, GONE)):
        got = consumers["per_consumer"]["tasks"][name]
        assert {k: got[k] for k in COUNT_KEYS} == want
    # From 1.0 to 9.5: 8.5 s in 0.2 s bins, bins 5 (1.0-1.2) to 47 (9.4-9.6).
    assert consumers["lag_bin_seconds"] == 0.2
    workers_lag = consumers["per_consumer"]["tasks"][W]["lag"]
    assert len(workers_lag["ts"]) == 43
    # By the end all seven publish records of tasks are in: 7 - 2, 7 - 3 and 7 - 1
    # acknowledged.
    assert workers_lag["lag"][-1] == 5
    assert consumers["per_consumer"]["tasks"][A]["lag"]["lag"][-1] == 4
    assert consumers["per_consumer"]["tasks"][G]["lag"]["lag"][-1] == 6
    assert consumers["overall"]["ack_latency_ms_p99"] == 5000.0
    assert consumers["overall"]["pending_at_delete"] == 2
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Durable consumers" in page

"""Durable-log recovery per node (``recover`` and ``storage_dropped`` records): steps on
tiny in-line frames, the summary and the report's section, and one whole run over trace
files that hold such records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_analysis.analysis import run_analysis
from spark_analysis.recovery import dropped_by_reason, node_recovery, recovery_starts
from spark_analysis.report import recovery_section
from spark_analysis.summary import Collected, recovery_summary
from tests.spark.helpers import assert_df_equal, records_df

pytestmark = pytest.mark.spark

A, B, C = "aa", "bb", "cc"


def recover(node: str, ts: float, topic: str, events: int, size: int, ms: float) -> dict[str, Any]:
    return {
        "ts": ts,
        "node": node,
        "ev": "recover",
        "topic": topic,
        "events": events,
        "bytes": size,
        "ms": ms,
    }


def dropped(node: str, topic: str | None, reason: str) -> dict[str, Any]:
    return {"ts": 1.0, "node": node, "ev": "storage_dropped", "topic": topic, "reason": reason}


RECORDS = [
    # A started twice: two topics at its first start, one at its latest.
    recover(A, 10.0, "t", 3, 30, 5.0),
    recover(A, 10.0, "u", 2, 20, 5.0),
    recover(A, 100.0, "t", 1, 10, 2.0),
    recover(B, 50.0, "t", 0, 0, 7.5),
    dropped(B, "t", "event 17: checksum mismatch"),
    dropped(B, "u", "events 3-9: checksum mismatch"),  # a run (the daemon's store)
    dropped(B, "v", "events 4-4: undecodable (ValueError)"),
    # C's file was refused whole: it loaded nothing, so wrote no recover record.
    dropped(C, None, "/var/lib/overlay/topics.sqlite3: damaged (file is not a database)"),
    {"ts": 10.0, "node": A, "ev": "drop", "topic": "t", "reason": "ttl", "ms": 99.0},
]


def test_starts_are_a_nodes_recover_records_of_one_ts(spark: SparkSession) -> None:
    starts = recovery_starts(records_df(spark, RECORDS))
    assert_df_equal(
        starts,
        [(A, 10.0, 5.0, 2, 5, 50), (A, 100.0, 2.0, 1, 1, 10), (B, 50.0, 7.5, 1, 0, 0)],
        ["node", "ts", "ms", "topics", "events", "bytes"],
    )


def test_a_node_shows_its_latest_start_and_its_slowest_load(spark: SparkSession) -> None:
    nodes = node_recovery(recovery_starts(records_df(spark, RECORDS)))
    assert_df_equal(
        nodes,
        [(A, 2, 2.0, 5.0, 1, 1, 10), (B, 1, 7.5, 7.5, 1, 0, 0)],
        ["node", "starts", "ms", "ms_max", "topics", "events", "bytes"],
    )


def test_drops_are_counted_per_node_by_kind_of_reason(spark: SparkSession) -> None:
    assert_df_equal(
        dropped_by_reason(records_df(spark, RECORDS)),
        [(B, "checksum mismatch", 2), (B, "undecodable", 1), (C, "whole file", 1)],
        ["node", "reason", "count"],
    )


def collected(nodes: list[dict[str, Any]], drops: list[dict[str, Any]]) -> Collected:
    return Collected(
        records=0,
        lines=0,
        bad_lines=0,
        run=None,
        published={},
        deliveries={},
        latency={},
        depth_hist={},
        hops_hist={},
        counts={},
        reach={},
        coverage={},
        lookup_hist=[],
        modes={},
        stress={},
        bad_filters=0,
        subscriptions=0,
        match_errors=0,
        recovery_nodes=nodes,
        recovery_dropped=drops,
    )


NODE_ROWS = [
    {"node": A, "starts": 2, "ms": 2.0, "ms_max": 5.0, "topics": 1, "events": 1, "bytes": 10},
    {"node": B, "starts": 1, "ms": 7.5, "ms_max": 7.5, "topics": 1, "events": 0, "bytes": 0},
]
DROP_ROWS = [
    {"node": B, "reason": "checksum mismatch", "count": 2},
    {"node": C, "reason": "whole file", "count": 1},
    {"node": B, "reason": "undecodable", "count": 1},
]


def test_the_summary_gives_each_node_and_the_totals() -> None:
    summary = recovery_summary(collected(NODE_ROWS, DROP_ROWS))
    assert summary == {
        "nodes": 3,
        "starts": 3,
        "ms_mean": 4.75,
        "ms_max": 7.5,
        "topics": 2,
        "events": 1,
        "bytes": 10,
        "dropped": {"checksum mismatch": 2, "undecodable": 1, "whole file": 1},
        "per_node": {
            A: {
                "starts": 2,
                "ms": 2.0,
                "ms_max": 5.0,
                "topics": 1,
                "events": 1,
                "bytes": 10,
                "dropped": {},
            },
            B: {
                "starts": 1,
                "ms": 7.5,
                "ms_max": 7.5,
                "topics": 1,
                "events": 0,
                "bytes": 0,
                "dropped": {"checksum mismatch": 2, "undecodable": 1},
            },
            C: {
                "starts": 0,
                "ms": None,
                "ms_max": None,
                "topics": 0,
                "events": 0,
                "bytes": 0,
                "dropped": {"whole file": 1},
            },
        },
    }
    assert recovery_summary(collected([], [])) == {
        "nodes": 0,
        "starts": 0,
        "ms_mean": None,
        "ms_max": None,
        "topics": 0,
        "events": 0,
        "bytes": 0,
        "dropped": {},
        "per_node": {},
    }


def test_the_report_lists_the_slowest_load_first_and_hides_an_empty_section() -> None:
    page = recovery_section({"recovery": recovery_summary(collected(NODE_ROWS, DROP_ROWS))})
    assert "Recovery at start" in page
    assert (
        page.index(f"<td>{B}</td>") < page.index(f"<td>{A}</td>") < page.index(f"<td>{C}</td>")
    )  # 7.5 ms, 2 ms, none
    assert "checksum mismatch: 2, undecodable: 1" in page
    assert recovery_section({"recovery": recovery_summary(collected([], []))}) == ""
    assert recovery_section({}) == ""  # a summary from before recovery was reported


def test_a_run_whose_traces_hold_recoveries_reports_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    up = [
        {
            "ts": 9.0,
            "node": n,
            "ev": "node_up",
            "addr": f"h:{i}",
            "mode": "structured",
            "version": 1,
        }
        for i, n in enumerate((A, B, C))
    ]
    for node in (A, B, C):
        lines = [r for r in up + RECORDS if r["node"] == node]
        (traces / f"{node}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    result = run_analysis(spark, str(traces), tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["recovery"] == recovery_summary(collected(NODE_ROWS, DROP_ROWS))
    assert result.report_path is not None
    assert "Recovery at start" in (tmp_path / "out" / "report.html").read_text()

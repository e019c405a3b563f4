"""The analysis on traces the protocol code itself wrote, in the deterministic simulator.

The synthetic generator writes lines by hand; these runs write them through the same
tracer the daemons use, so a record the nodes write and the analysis rejects (a field
of another type than the schema's, say) shows up here as a bad line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from overlay.gossip.config import STRATEGY_NAMES
from overlay.sim.scenarios.gossip import GossipScenario, run_gossip
from overlay.sim.scenarios.scribe import ChordRing, ScribeScenario, run_scribe
from spark_analysis.analysis import run_analysis
from tests.spark import oracle

pytestmark = pytest.mark.spark


def _lines(traces: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in traces.glob("*.jsonl*"))


def _analyze(spark: SparkSession, traces: Path, out: Path) -> dict[str, Any]:
    run_analysis(spark, str(traces), out, report=False)
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    assert summary["bad_lines"] == 0, summary["bad_line_samples"]
    assert summary["records"] == _lines(traces)
    oracle.assert_summary_matches(summary, oracle.analyze(traces))
    return summary


def test_scribe_on_chord_traces(spark: SparkSession, tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    scenario = ScribeScenario(nodes=24, topics=3, subscribers=12, publishes=40, seed=3)
    sim = run_scribe(scenario, ChordRing(bootstrap="join", stabilize_interval=1.0), traces)
    summary = _analyze(spark, traces, tmp_path / "out")
    overall = summary["overall"]
    # The simulator's own reading of the same traces (overlay.sim.scenarios.trace_check).
    assert overall["published"] == 40
    assert overall["expected"] == sim["expected"] > 0
    assert overall["delivery_ratio"] == sim["delivery_ratio"] == 1.0
    assert overall["tree_depth_max"] >= 1
    # No loss, no crash: every route ends where it should, at the owner or at a tree
    # node adopting a JOIN on its way (chord.routing acks for it).
    assert summary["lookup"]["count"] > 0 and summary["lookup"]["ok_rate"] == 1.0


def test_scribe_traces_with_crashes_and_loss(spark: SparkSession, tmp_path: Path) -> None:
    """Crashed nodes (a root among them) and lost messages: missed deliveries, read the
    same by the analysis, the oracle and the simulator."""
    traces = tmp_path / "traces"
    scenario = ScribeScenario(nodes=30, topics=3, subscribers=12, publishes=40, crash=0.1,
                              crash_roots=1, loss=0.02, seed=4)
    sim = run_scribe(scenario, ChordRing(warmup=10.0), traces)
    summary = _analyze(spark, traces, tmp_path / "out")
    overall = summary["overall"]
    assert overall["expected"] == sim["expected"] > 0
    assert overall["delivery_ratio"] == pytest.approx(sim["delivery_ratio"], abs=1e-6)
    assert overall["delivery_ratio"] < 1.0


@pytest.mark.parametrize("strategy", [*STRATEGY_NAMES, "selective"])
def test_gossip_traces(spark: SparkSession, tmp_path: Path, strategy: str) -> None:
    """Each strategy writes its own mix of records (repairs, duplicates, walks' hops)."""
    traces = tmp_path / "traces"
    selective = strategy == "selective"
    scenario = GossipScenario(nodes=16, strategy="pbcast" if selective else strategy,
                              selective=selective, topics=2, subscribers=6, publishes=12,
                              loss=0.05, seed=5)
    run_gossip(scenario, traces)
    summary = _analyze(spark, traces, tmp_path / "out")
    assert summary["overall"]["published"] == 12
    assert summary["overall"]["delivered"] > 0

"""Scribe on the Chord core in the simulator, with fixed seeds, checked from the traces."""

from __future__ import annotations

from pathlib import Path

from overlay.sim.scenarios.scribe import ChordRing, ScribeScenario, run_scribe


def test_trees_on_a_chord_ring_formed_by_joins_deliver_everything(tmp_path: Path) -> None:
    scenario = ScribeScenario(nodes=60, topics=3, subscribers=20, publishes=90, groups=0.3,
                              seed=2)
    summary = run_scribe(scenario, ChordRing(bootstrap="join", stabilize_interval=1.0),
                         tmp_path)
    assert summary["expected"] > 300 and summary["group_services"] > 50
    assert summary["delivery_ratio"] == 1.0
    assert summary["false_deliveries"] == summary["duplicates"] == summary["group_extra"] == 0
    assert summary["roots_per_topic_max"] == 1 and summary["detached"] == 0


def test_trees_on_chord_recover_from_crashes_of_nodes_and_roots(tmp_path: Path) -> None:
    scenario = ScribeScenario(nodes=200, topics=4, subscribers=50, publishes=300, crash=0.1,
                              crash_roots=2, seed=4)
    summary = run_scribe(scenario, ChordRing(warmup=10.0), tmp_path)
    assert summary["crashed"] == 20
    assert summary["events_after_repair"] > 100
    assert summary["delivery_ratio_after_repair"] == 1.0
    assert summary["false_after_repair"] == summary["duplicates_after_repair"] == 0
    assert summary["roots_per_topic_max"] == 1
    assert summary["topics_without_root"] == summary["detached"] == 0

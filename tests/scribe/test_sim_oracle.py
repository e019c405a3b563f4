"""Seeded simulations on the oracle ring (perfect finger tables), checked from the traces.

They exercise Scribe's own logic at scale, independent of the Chord core's convergence.
"""

from __future__ import annotations

import math
from pathlib import Path

from overlay.core.ids import format_id, hash_id
from overlay.sim.engine import Simulator
from overlay.sim.scenarios.scribe import ScribeScenario, run_scribe
from overlay.sim.scenarios.trace_check import TraceCheck
from scribe import ScribeApp, ScribeConfig
from tests.scribe.fakekbr import OracleRingBuilder

BASE = ScribeScenario(nodes=200, topics=4, subscribers=50, publishes=200, seed=3)


def run(tmp_path: Path, **changes: object) -> dict[str, object]:
    scenario = ScribeScenario(**{**BASE.__dict__, **changes})  # type: ignore[arg-type]  # scenario fields from a shared dict of mixed types
    return run_scribe(scenario, OracleRingBuilder(), tmp_path / "traces")


def test_every_expected_event_arrives_once_on_connected_trees(tmp_path: Path) -> None:
    summary = run(tmp_path)
    assert summary["expected"] > 2000
    assert summary["delivery_ratio"] == 1.0
    assert summary["false_deliveries"] == summary["duplicates"] == 0
    assert summary["topics"] == 4 and summary["roots_per_topic_max"] == 1
    assert summary["topics_without_root"] == summary["detached"] == 0
    # Joins travel O(log N) hops; trees are about as deep as a DHT route is long.
    assert summary["tree_depth_max"] <= math.log2(200) + 2


def test_summaries_save_forwards_without_losing_a_delivery(tmp_path: Path) -> None:
    pruned = run(tmp_path / "on")
    flooded = run(tmp_path / "off", summaries=False)
    assert pruned["delivery_ratio"] == flooded["delivery_ratio"] == 1.0
    assert pruned["deliveries"] == flooded["deliveries"]
    assert pruned["forwards_per_delivery"] < 0.8 * flooded["forwards_per_delivery"]


def test_each_group_gets_each_matching_event_exactly_once(tmp_path: Path) -> None:
    summary = run(tmp_path, groups=0.5)
    assert summary["group_services"] > 300
    assert summary["delivery_ratio"] == 1.0
    assert summary["group_extra"] == summary["false_deliveries"] == 0


def test_the_children_bound_holds_and_deepens_the_trees(tmp_path: Path) -> None:
    free = run(tmp_path / "free")
    bounded = run(tmp_path / "bounded", max_children=3)
    assert bounded["delivery_ratio"] == 1.0
    assert free["stress"]["children_per_tree_max"] > 3
    assert bounded["stress"]["children_per_tree_max"] <= 3
    assert bounded["tree_depth_mean"] > free["tree_depth_mean"]


def test_trees_are_repaired_after_a_tenth_of_the_nodes_and_two_roots_crash(
        tmp_path: Path) -> None:
    summary = run(tmp_path, crash=0.1, crash_roots=2, publishes=300)
    assert summary["crashed"] == 20
    assert summary["repair_time"] < 15
    assert summary["events_after_repair"] > 50
    assert summary["delivery_ratio_after_repair"] == 1.0
    assert summary["false_after_repair"] == summary["duplicates_after_repair"] == 0
    assert summary["roots_per_topic_max"] == 1 and summary["detached"] == 0


def test_same_seed_same_figures(tmp_path: Path) -> None:
    small = {"nodes": 60, "publishes": 40, "groups": 0.3}
    first = run(tmp_path / "a", **small)
    second = run(tmp_path / "b", **small)
    first.pop("wall_s")
    second.pop("wall_s")
    assert first == second


def test_root_roles_follow_the_keys_when_nodes_join_the_ring(tmp_path: Path) -> None:
    sim = Simulator(5, trace_dir=tmp_path)
    builder = OracleRingBuilder()
    hosts = builder.build(sim, 30, lambda host: ScribeApp(host, ScribeConfig()))
    ring = builder.ring
    assert ring is not None
    topics = [f"topic-{i}" for i in range(8)]
    for sub_id, topic in enumerate(topics * 6):
        host = sim.rng.choice(hosts)
        sim.at(sim.rng.uniform(0, 1), lambda h=host, t=topic, s=sub_id: sim.invoke(
            h.address, lambda core, now: core.app.subscribe(now, t, "", s)))
    sim.run(until=5.0)
    owners_before = {t: ring.succ(hash_id(t, ring.bits)) for t in topics}
    for i in range(70):
        sim.at(5.0 + i / 70, lambda i=i: ring.add(
            f"10.9.0.{i}:7400", lambda host: ScribeApp(host, ScribeConfig())))
    for n in range(100):
        topic = sim.rng.choice(topics)
        sim.at(10.0 + n / 5, lambda t=topic, n=n: sim.invoke(
            sim.rng.choice(hosts).address,
            lambda core, now: core.app.publish(now, t, {"n": n})))
    sim.run(until=35.0)
    sim.close()
    owners = {t: ring.succ(hash_id(t, ring.bits)) for t in topics}
    assert sum(owners[t] != owners_before[t] for t in topics) >= 2
    check = TraceCheck(tmp_path)
    trees = check.trees()
    assert trees["topics"] == 8 and trees["roots_per_topic_max"] == 1
    assert trees["topics_without_root"] == trees["detached"] == 0
    roots = {t: node for t, members in check.tree_members().items()
             for node, parent in members.items() if parent is None}
    assert roots == {t: format_id(owners[t], ring.bits) for t in topics}
    delivery = check.delivery(after=10.0)
    assert delivery["expected"] > 400 and delivery["delivery_ratio"] == 1.0
    assert delivery["duplicates"] == delivery["false_deliveries"] == 0

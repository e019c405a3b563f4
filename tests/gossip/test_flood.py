"""Flooding core: exact effects, and a seeded simulation checked from its traces."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

import pytest

from matching import FilterSyntaxError, parse
from overlay.core.effects import Deliver, Send, Trace
from overlay.gossip.flood import FloodConfig, FloodEvent, FloodNode
from overlay.sim.scenarios.flood import FloodScenario, run_flood


def node(addr: str, neighbours: list[str], ttl: int = 3) -> FloodNode:
    n = FloodNode(addr, random.Random(1), FloodConfig(ttl=ttl, dedup_seconds=10))
    n.neighbours = list(neighbours)
    return n


def event(hop: int, ttl: int = 3, msg_id: str = "ab") -> FloodEvent:
    return FloodEvent("t", msg_id, {"x": 5}, b"p", "ff", 1.0, hop, ttl)


def test_publish_delivers_locally_and_forwards_to_every_neighbour() -> None:
    n = node("a:1", ["b:1", "c:1"])
    n.subscribe(0.0, "t", "x > 3", 7)
    n.subscribe(0.0, "t", "x > 9", 8)
    n.drain_effects()
    msg_id = n.publish(1.0, "t", {"x": 5}, b"p", msg_id="ab")
    effects = n.drain_effects()
    assert msg_id == "ab"
    assert [e.dest for e in effects if isinstance(e, Send)] == ["b:1", "c:1"]
    assert all(e.msg.hop == 1 for e in effects if isinstance(e, Send))
    assert [e.sub for e in effects if isinstance(e, Deliver)] == [7]
    assert [e.ev for e in effects if isinstance(e, Trace)] == [
        "publish", "deliver", "forward", "forward"]


def test_first_copy_is_forwarded_except_to_its_sender_duplicates_are_not() -> None:
    n = node("b:1", ["a:1", "c:1", "d:1"])
    n.on_message(1.0, "a:1", event(hop=1))
    first = n.drain_effects()
    assert [e.dest for e in first if isinstance(e, Send)] == ["c:1", "d:1"]
    n.on_message(1.1, "c:1", event(hop=2))
    second = n.drain_effects()
    assert not [e for e in second if isinstance(e, Send)]
    (recv,) = [e for e in second if isinstance(e, Trace)]
    assert recv.ev == "recv" and recv.fields["dup"] is True and recv.fields["hop"] == 2


def test_ttl_stops_the_flood_with_a_drop_record() -> None:
    n = node("b:1", ["a:1", "c:1"])
    n.on_message(1.0, "a:1", event(hop=3, ttl=3))
    effects = n.drain_effects()
    assert not [e for e in effects if isinstance(e, Send)]
    assert [e.fields["reason"] for e in effects if isinstance(e, Trace) and e.ev == "drop"] == [
        "ttl"]


def test_seen_ids_expire_and_unreachable_neighbours_are_dropped() -> None:
    n = node("b:1", ["a:1", "c:1"])
    n.on_message(1.0, "a:1", event(hop=1))
    assert n.next_deadline() == 11.0
    n.on_timer(11.5)
    assert n.next_deadline() is None
    n.on_unreachable(12.0, "c:1", event(hop=1))
    assert n.neighbours == ["a:1"]


def test_a_bad_filter_is_refused() -> None:
    with pytest.raises(FilterSyntaxError):
        node("a:1", []).subscribe(0.0, "t", "x >", 1)


def test_simulated_flood_delivers_exactly_the_expected_events(tmp_path: Path) -> None:
    scenario = FloodScenario(nodes=30, degree=3, topics=2, subscribers=6, publishes=40,
                             duration=30.0, ttl=10, seed=5)
    result = run_flood(scenario, tmp_path)
    records = [json.loads(line) for f in tmp_path.iterdir() for line in f.read_text().splitlines()]
    subs = {(r["node"], r["sub"]): r for r in records if r["ev"] == "subscribe"}
    expected = set()
    for pub in (r for r in records if r["ev"] == "publish"):
        for (node_hex, sub), s in subs.items():
            if s["topic"] == pub["topic"] and s["ts"] <= pub["ts"] and parse(
                    s["filter"]).matches(pub["attrs"]):
                expected.add((node_hex, sub, pub["msg_id"]))
    delivered = defaultdict(int)
    for r in records:
        if r["ev"] == "deliver":
            delivered[(r["node"], r["sub"], r["msg_id"])] += 1
    assert expected and set(delivered) == expected
    assert max(delivered.values()) == 1
    assert result["deliveries"] == len(expected)
    again = run_flood(scenario, None)  # same seed, same run (without traces)
    assert {**again, "wall_s": 0} == {**result, "wall_s": 0}

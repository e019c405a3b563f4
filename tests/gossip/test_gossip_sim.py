"""GossipNode in the simulator: every strategy, selective routing, loss, crashes.

Seeded runs; every figure is read back from the trace files by the scenario's
plain-Python reader (GossipTraces), so these tests check what the nodes recorded.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from overlay.cli import main as cli_main
from overlay.core.limits import SizeLimits
from overlay.gossip.node import ROUND, GossipNode
from overlay.sim.engine import Simulator
from overlay.sim.network import NetworkConfig
from overlay.sim.scenarios.gossip import (
    GossipScenario,
    GossipTraces,
    build,
    components,
    run_gossip,
    schedule_traffic,
)

SMALL = dict(nodes=60, publishes=20, subscribers=8, publish_window=10.0, drain=20.0)


def run(**changes: object) -> dict[str, object]:
    return run_gossip(GossipScenario(**{**SMALL, **changes}))  # type: ignore[arg-type]  # scenario fields from a shared dict of mixed types


@pytest.mark.parametrize("strategy", ["flood", "blind-counter", "anti-entropy", "pbcast"])
def test_reliable_strategies_deliver_every_match_once_and_nothing_else(strategy: str) -> None:
    summary = run(strategy=strategy)
    assert summary["expected_deliveries"] > 0
    assert summary["delivery_ratio"] == 1.0
    assert summary["false_deliveries"] == 0
    assert summary["duplicate_deliveries"] == 0


@pytest.mark.parametrize("strategy", ["rumor", "random-walk"])
def test_probabilistic_strategies_reach_most_without_false_or_duplicate_deliveries(
        strategy: str) -> None:
    summary = run(strategy=strategy)
    assert 0.5 < summary["delivery_ratio"] <= 1.0  # type: ignore[operator]  # summary values are numbers for these keys
    assert summary["false_deliveries"] == 0
    assert summary["duplicate_deliveries"] == 0


def test_rumor_counter_leaves_less_residue_as_k_grows() -> None:
    residues = [run(strategy="rumor", counter=k, view="full")["residue"] for k in (1, 3)]
    assert residues[0] > residues[1]  # type: ignore[operator]  # summary values are numbers for these keys


@pytest.mark.parametrize("strategy", ["flood", "pbcast"])
@pytest.mark.parametrize("seed", [1, 2])
def test_selective_routing_delivers_as_much_with_far_fewer_messages(
        strategy: str, seed: int) -> None:
    plain = run(strategy=strategy, seed=seed)
    selective = run(strategy=strategy, seed=seed, selective=True)
    assert selective["expected_deliveries"] == plain["expected_deliveries"] > 0
    assert selective["delivery_ratio"] >= plain["delivery_ratio"]  # type: ignore[operator]  # summary values are numbers for these keys
    assert selective["delivery_ratio"] == 1.0
    assert selective["false_deliveries"] == selective["duplicate_deliveries"] == 0
    assert selective["messages_per_delivery"] < 0.3 * plain["messages_per_delivery"]  # type: ignore[operator]  # summary values are numbers for these keys


def _run_with_crashes(strategy: str, selective: bool, seed: int) -> dict[str, object]:
    """A fifth of the nodes without subscriptions crash at once, 2 s into publishing."""
    scenario = GossipScenario(**{**SMALL, "nodes": 80, "publishes": 30},  # type: ignore[arg-type]  # scenario fields from a shared dict of mixed types
                              strategy=strategy, selective=selective, seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        sim = Simulator(seed, NetworkConfig(unreachable_after=0.5), trace_dir=Path(tmp))
        nodes = build(sim, scenario)
        schedule_traffic(sim, scenario, nodes)
        sim.run(until=scenario.publish_from + 2.0)
        idle = [n.address for n in nodes if not n.subs.topics()]
        for addr in idle[:len(nodes) // 5]:
            sim.crash(addr)
        sim.run(until=scenario.end)
        sim.close()
        return GossipTraces(Path(tmp)).summary()


@pytest.mark.parametrize("strategy", ["flood", "pbcast"])
def test_selective_routing_reroutes_around_crashed_nodes(strategy: str) -> None:
    # Routes through a crashed relay are taken again by the node whose copy failed, and
    # the tables settle without it; pbcast's digests follow the routes that are left.
    plain = _run_with_crashes(strategy, False, 4)
    selective = _run_with_crashes(strategy, True, 4)
    assert selective["expected_deliveries"] == plain["expected_deliveries"] > 0
    assert selective["delivery_ratio"] >= plain["delivery_ratio"]  # type: ignore[operator]  # summary values are numbers for these keys
    assert selective["messages_per_delivery"] < 0.3 * plain["messages_per_delivery"]  # type: ignore[operator]  # summary values are numbers for these keys


def test_pbcast_repairs_what_ten_percent_loss_took() -> None:
    lossy = run(strategy="pbcast", loss=0.1)
    assert lossy["repairs"] > 0  # type: ignore[operator]  # summary values are numbers for these keys
    assert lossy["delivery_ratio"] >= 0.99  # type: ignore[operator]  # summary values are numbers for these keys
    assert lossy["duplicate_deliveries"] == 0


def test_same_seed_same_run_other_seed_other_run() -> None:
    def figures(seed: int) -> tuple[object, ...]:
        s = run(strategy="rumor", seed=seed)
        return s["messages_per_node"], s["delivery_ratio"], s["latency_p50_s"], s["sim_events"]

    assert figures(3) == figures(3)
    assert figures(3) != figures(4)


def _connected(nodes: list[GossipNode], alive: set[str]) -> bool:
    """Whether the survivors' active views (as undirected links) form one component."""
    return len(components(nodes, alive)) == 1


def test_hyparview_survivors_reconnect_after_half_the_nodes_crash() -> None:
    scenario = GossipScenario(nodes=100, seed=5)
    with tempfile.TemporaryDirectory() as tmp:
        sim = Simulator(5, NetworkConfig(unreachable_after=0.5), trace_dir=Path(tmp))
        nodes = build(sim, scenario)
        sim.run(until=20.0)
        assert _connected(nodes, {n.address for n in nodes})
        victims = [n.address for n in nodes[::2]]
        for addr in victims:
            sim.crash(addr)
        alive = {n.address for n in nodes} - set(victims)
        rounds = 0
        while not _connected(nodes, alive) and rounds < 10:
            rounds += 1
            sim.run(until=20.0 + rounds * scenario.round_interval)
        assert _connected(nodes, alive), "survivors still split after 10 rounds"
        # Within a few more rounds every crashed peer is out of the survivors' views.
        sim.run(until=sim.now + 5 * scenario.round_interval)
        survivors = [n for n in nodes if n.address in alive]
        stale = {n.address: set(n.peers.neighbours()) - alive for n in survivors}
        assert not any(stale.values()), stale
        assert _connected(nodes, alive)
        sim.close()


def test_round_timer_never_falls_due_at_the_time_it_ran() -> None:
    # A round time that is not exactly representable once made the next round land on
    # ``now`` itself and the simulator spun at one instant.
    with tempfile.TemporaryDirectory() as tmp:
        sim = Simulator(1, NetworkConfig(), trace_dir=Path(tmp))
        nodes = build(sim, GossipScenario(nodes=30, round_interval=0.1, join_window=1.0))
        sim.run(until=5.0, max_events=200_000)
        assert sim.now >= 4.9
        for node in nodes:
            deadline = node.timers.next_deadline()
            assert deadline is not None and deadline > sim.now
            assert ROUND in node.timers
        sim.close()


def test_cli_runs_unstructured_mode(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["sim", "--mode", "unstructured", "--strategy", "blind-counter",
                     "--nodes", "40", "--publishes", "5", "--subscribers", "5", "--seed", "2"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["mode"] == "unstructured" and summary["strategy"] == "blind-counter"
    assert summary["events"] == 5 and 0 < summary["coverage"] <= 1
    assert {"messages_per_node", "t99_s", "delivery_ratio"} <= set(summary)


def test_cli_refuses_bad_gossip_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["sim", "--mode", "unstructured", "--nodes", "0"])
    assert code == 2
    assert "nodes" in capsys.readouterr().err


@pytest.mark.parametrize("strategy", ["rumor", "anti-entropy", "pbcast"])
def test_batches_of_the_largest_events_fit_max_frame_and_all_arrive(strategy: str) -> None:
    """Rumor pushes, digests and repairs of events at the payload limit of the smallest
    max_frame: each message a node builds fits it (every message crosses the codec and
    is held to max_frame), and the repairing strategies still deliver every match."""
    sizes = SizeLimits(1 << 16)
    scenario = GossipScenario(**{**SMALL, "strategy": strategy, "publishes": 40,  # type: ignore[arg-type]  # scenario fields from a shared dict of mixed types
                                 "publish_window": 2.0, "loss": 0.05,
                                 "payload_bytes": sizes.max_payload, "max_frame": sizes.max_frame})
    summary = run_gossip(scenario, check_wire=True)
    assert summary["false_deliveries"] == summary["duplicate_deliveries"] == 0
    if strategy != "rumor":
        assert summary["delivery_ratio"] == 1.0

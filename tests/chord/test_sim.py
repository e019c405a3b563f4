"""Chord rings in the simulator: forming by joins, lookups, failures, partitions.

Every run has a fixed seed; the ground truth is the sorted ring of live nodes."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from chord.config import ChordConfig
from overlay.sim.engine import Simulator
from overlay.sim.scenarios.chord import ChordScenario, run_chord
from overlay.sim.scenarios.chord_world import ChordWorld

FAST = ChordConfig(bits=64).with_maintenance_interval(1.0)


def joined_world(count: int, seed: int, config: ChordConfig = FAST, spacing: float = 0.1,
                 check_wire: bool = True) -> ChordWorld:
    """``count`` nodes joined one by one through random earlier nodes."""
    sim = Simulator(seed, check_wire=check_wire)
    world = ChordWorld(sim, config)
    nodes = [world.spawn() for _ in range(count)]
    world.create(nodes[0])
    for i in range(1, count):
        seed_node = nodes[sim.rng.randrange(i)]
        sim.at(i * spacing, lambda n=nodes[i], s=seed_node: world.join(n, s))
    return world


def run_until_correct(world: ChordWorld, deadline: float, fingers: bool = True) -> float:
    """Run until every live node's tables are right; the simulated time it took."""
    sim = world.sim
    while world.errors(fingers=fingers, limit=1):
        assert sim.now < deadline, world.errors(fingers=fingers, limit=5)
        sim.run(until=sim.now + 1.0)
    return sim.now


@pytest.fixture(scope="module")
def joined_200() -> tuple[ChordWorld, float]:
    """200 nodes joined one by one (a join every 0.1 s), run until every table is exact."""
    world = joined_world(200, seed=11, check_wire=True)
    return world, run_until_correct(world, deadline=200.0)


def test_two_hundred_nodes_joining_one_by_one_form_the_exact_ring(
        joined_200: tuple[ChordWorld, float]) -> None:
    world, settled = joined_200
    assert len(world.live()) == 200 and not world.errors(fingers=True)
    assert settled < 120.0  # the last join was at 19.9 s


def test_lookups_in_a_joined_ring_find_the_true_owner_in_about_half_log_n_hops(
        joined_200: tuple[ChordWorld, float]) -> None:
    world, _ = joined_200
    sim = world.sim
    results: list[dict[str, Any]] = []
    sim.on_notice.append(lambda addr, notice, now: results.append(notice.data))
    members = world.live()
    for i in range(1000):
        origin, key = sim.rng.choice(members), sim.rng.getrandbits(FAST.bits)
        sim.at(sim.now + i * 0.02, lambda o=origin, k=key: sim.invoke(
            o.address, lambda core, now: core.lookup(now, k)))
    sim.run(until=sim.now + 30.0)
    assert len(results) == 1000
    assert all(r["owner"] == world.true_owner(r["key"]) for r in results)
    hops = sorted(r["hops"] for r in results)
    half_log = 0.5 * math.log2(200)
    assert abs(sum(hops) / len(hops) - half_log) <= 0.1 * half_log
    assert hops[989] <= math.log2(200) + 1  # the 99th percentile (nearest rank)


def test_after_a_fifth_of_the_nodes_fail_at_once_the_survivors_repair_the_ring() -> None:
    summary = run_chord(ChordScenario(nodes=200, lookups=1500, duration=150.0,
                                      bootstrap="oracle", crash=0.2, crash_at=40.0,
                                      stabilize_interval=1.0, seed=5))
    assert summary["crashed"] == 40 and summary["live_nodes"] == 160
    assert summary["repair_s"] is not None and summary["repair_s"] < 30.0
    assert summary["before_crash"]["ok_rate"] == 1.0
    assert summary["after_repair"]["ok_rate"] == 1.0
    assert summary["ring_errors"] == 0


def test_the_ring_is_exact_again_fingers_included_after_failures() -> None:
    world = joined_world(120, seed=8)
    run_until_correct(world, deadline=150.0)
    sim = world.sim
    for node in sim.rng.sample(world.live(), 24):
        world.crash(node)
    run_until_correct(world, deadline=sim.now + 120.0)
    assert len(world.live()) == 96


def test_a_partitioned_ring_merges_back_into_one_after_the_partition_heals() -> None:
    world = joined_world(60, seed=4)
    run_until_correct(world, deadline=100.0)
    sim = world.sim
    nodes = world.live()
    half = [n.address for n in nodes[::2]]  # interleaved: both sides span the ring
    sim.partition([half])
    sim.run(until=sim.now + 60.0)
    # Each side has become a ring of its own.
    side = [n for n in nodes if n.address in half]
    assert all(n.successor().addr in half for n in side)
    sim.heal()
    run_until_correct(world, deadline=sim.now + 200.0)
    assert len(world.live()) == 60


def test_lossy_links_cost_retries_not_correctness() -> None:
    summary = run_chord(ChordScenario(nodes=150, lookups=600, duration=100.0,
                                      bootstrap="oracle", loss=0.05, stabilize_interval=1.0,
                                      seed=6))
    assert summary["ok_rate"] == 1.0 and summary["ring_errors"] == 0


def test_same_seed_same_run() -> None:
    scenario = ChordScenario(nodes=60, lookups=200, duration=60.0, stabilize_interval=1.0,
                             seed=9, crash=0.1, crash_at=40.0)
    first, second = run_chord(scenario), run_chord(scenario)
    first.pop("wall_s")
    second.pop("wall_s")
    assert first == second


@pytest.mark.parametrize("seeding", ["each-other", "a-cycle"])
def test_nodes_started_together_seeded_with_each_other_form_one_ring(seeding: str) -> None:
    """A whole-overlay restart from one configuration: no node is a member to join
    through. After ``bootstrap_rounds`` failed attempts (at least one through each seed)
    the lowest id of each seed set creates the ring
    and the rest join it; with seed sets that are not the same for all (each node seeded
    with the next only), several rings may start, and merge probes zip them together."""
    sim = Simulator(9)
    world = ChordWorld(sim, FAST)
    nodes = [world.spawn() for _ in range(12)]
    for i, node in enumerate(nodes):
        seeds = [n for n in nodes if n is not node] if seeding == "each-other" \
            else [nodes[(i + 1) % len(nodes)]]
        world.join(node, *seeds)
    # 11 seeds: the lowest tries each once (a join retry every 2 s) before it creates
    # the ring; the others find it as their attempts come round to it.
    sim.run(until=60.0)
    assert all(n.joined for n in nodes)
    run_until_correct(world, deadline=200.0)
    assert len(world.live()) == 12


def test_without_bootstrap_rounds_nodes_seeded_with_each_other_wait_for_a_member() -> None:
    sim = Simulator(9)
    world = ChordWorld(sim, dataclasses.replace(FAST, bootstrap_rounds=0))
    nodes = [world.spawn() for _ in range(4)]
    for node in nodes:
        world.join(node, *[n for n in nodes if n is not node])
    sim.run(until=120.0)
    assert not any(n.joined for n in nodes)


def test_a_node_whose_seed_is_in_a_ring_never_creates_one_of_its_own() -> None:
    """The join fails past the seed (the joiner reaches only its seed); with the lowest
    id it still does not create a ring: one of one would own every key meanwhile."""
    world = joined_world(8, seed=5)
    run_until_correct(world, deadline=100.0)
    sim = world.sim
    lowest = min(world.live(), key=lambda n: n.local.id)
    while True:  # a newcomer below every member: it would be the one to bootstrap
        newcomer = world.spawn()
        if newcomer.local.id < lowest.local.id:
            break
        sim.crash(newcomer.address)
    seed = world.live()[3]
    others = [n.address for n in world.live() if n is not seed]
    sim.partition([[newcomer.address, seed.address], others])
    world.join(newcomer, seed)
    sim.run(until=sim.now + 60.0)
    assert newcomer.maintenance.bootstrapped is False
    assert newcomer.lookups.seed_answers == {seed.address: "member"}
    # Cut off from its seed too, it still waits: an unreachable seed may be a ring.
    while (loner := world.spawn()).local.id > seed.local.id:  # the lower id of the two
        sim.crash(loner.address)
    sim.partition([[loner.address], [n.address for n in world.live()]])
    world.join(loner, seed)
    sim.run(until=sim.now + 60.0)
    assert not loner.joined and loner.lookups.seed_answers == {seed.address: "unreachable"}

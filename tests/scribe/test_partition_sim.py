"""A partition splits the overlay in two while both sides publish on the same topics;
each side's root numbers them; the partition heals. Every acknowledged event reaches
every subscription, once, and no subscription sees seq go backwards (scribe.merge).
Seeded simulator runs with durable logs (sync = always)."""

from __future__ import annotations

import random

import pytest

from overlay.core.storage import SyncPolicy
from overlay.sim.network import NetworkConfig
from overlay.sim.scenarios.chord_world import sim_address
from tests.scribe.test_durable_sim import TOPICS, World, build

NODES = 12
STREAM_AT = 8.0
SPLIT_AT = 14.0
HEAL_AT = 40.0


def subscribe_everywhere(world: World, at: float) -> None:
    sim = world.sim
    for addr in sorted(world.nodes):
        for n, topic in enumerate(TOPICS):
            sim.at(at, lambda a=addr, t=topic, n=n: sim.invoke(
                a, lambda core, now: core.app.subscribe(now, t, "", 1 + n)))


def publish_from(world: World, addrs: list[str], start: float, count: int, tag: int) -> None:
    """``count`` reliable publishes from ``addrs`` in turn, 50 ms apart, round the topics."""
    sim = world.sim
    for i in range(count):
        addr, topic = addrs[i % len(addrs)], TOPICS[i % len(TOPICS)]
        msg_id = f"{tag:08x}{i:08x}"
        sim.at(start + i * 0.05, lambda a=addr, t=topic, m=msg_id: sim.alive(a) and sim.invoke(
            a, lambda core, now: core.app.publish(now, t, {}, b"x", m, reliable=True)))


def run(seed: int) -> World:
    world = build(seed, NODES, SyncPolicy("always"))
    sim = world.sim
    addrs = sorted(world.nodes)
    subscribe_everywhere(world, 0.5)
    publish_from(world, addrs, 1.0, 3, 0)  # one per topic: the roots start numbering
    publish_from(world, addrs, STREAM_AT, 30, 1)
    half = addrs[: NODES // 2]
    other = addrs[NODES // 2:]
    sim.at(SPLIT_AT, lambda: sim.partition([half]))
    # Each side publishes on every topic: some of its roots are on the other side, and
    # the side's new owner of the key waits for members' positions, then numbers.
    publish_from(world, half, SPLIT_AT + 12.0, 60, 2)
    publish_from(world, other, SPLIT_AT + 12.0, 60, 3)
    sim.at(HEAL_AT, sim.heal)
    publish_from(world, addrs, HEAL_AT + 25.0, 30, 4)
    sim.run(until=HEAL_AT + 60.0)
    return world


@pytest.mark.parametrize("seed", [3, 8])
def test_after_the_heal_every_acknowledged_event_reaches_every_subscription_once(
        seed: int) -> None:
    world = run(seed)
    acked = world.acked
    # Both sides had events acknowledged while split (the test needs the fork).
    assert sum(1 for _, m in acked if m.startswith("00000002")) >= 40
    assert sum(1 for _, m in acked if m.startswith("00000003")) >= 40
    for addr in sorted(world.nodes):
        for n, topic in enumerate(TOPICS):
            got = world.delivered.get((addr, 1 + n), [])
            ids = [m for _, m, _ in got]
            assert len(ids) == len(set(ids)), f"{addr} {topic}: an event delivered twice"
            seqs = [s for _, _, s in got]
            assert seqs == sorted(seqs), f"{addr} {topic}: seq went backwards"
            wanted = {m for t, m in acked if t == topic}
            missing = wanted - set(ids)
            assert not missing, f"{addr} {topic}: {len(missing)} acknowledged events missing"


def test_the_replay_after_the_heal_has_each_event_once() -> None:
    world = run(3)
    sim = world.sim
    reader = sim_address(2)
    for n, topic in enumerate(TOPICS):
        sim.invoke(reader, lambda core, now, t=topic, n=n: core.app.subscribe(
            now, t, "", 900 + n, replay_since=0))
    sim.run(until=sim.now + 15.0)
    for n, topic in enumerate(TOPICS):
        got = world.delivered.get((reader, 900 + n), [])
        ids = [m for _, m, _ in got]
        assert len(ids) == len(set(ids))
        assert {m for t, m in world.acked if t == topic} <= set(ids)


# -- the lab's shape: a few nodes, 5% loss, each side publishing its own run ------------------


def lab_shape(seed: int, sizes: tuple[int, ...] = (5, 6, 6, 8, 10),
              ) -> tuple[World, list[str], float]:
    """The shape of the namespace lab (tests/deploy/test_lab.py) drawn from ``seed``, set
    up and not run: a ring of one of ``sizes``, 5% loss, subscriptions on up to four
    nodes, a first event, a split into halves, a run of six reliable events on each side
    (one after the other, or overlapping), the heal. Returns the world, the subscribers
    and the time of the heal."""
    shape = random.Random(seed * 7919)
    nodes = shape.choice(sizes)
    overlapping = shape.choice([False, True])
    world = build(seed, nodes, SyncPolicy("always"), NetworkConfig(loss=0.05, jitter=0.01))
    sim, topic = world.sim, TOPICS[0]
    addrs = sorted(world.nodes)
    rng = random.Random(seed)
    subscribers = rng.sample(addrs, min(4, nodes - 1))
    for addr in subscribers:
        sim.at(0.5, lambda a=addr: sim.invoke(
            a, lambda core, now: core.app.subscribe(now, topic, "", 1)))

    def publish(addr: str, msg_id: str, at: float) -> None:
        sim.at(at, lambda: sim.alive(addr) and sim.invoke(
            addr, lambda core, now: core.app.publish(now, topic, {}, b"x", msg_id,
                                                     reliable=True)))

    publish(addrs[0], "ff1", 3.0)
    half = rng.sample(addrs, nodes // 2)
    other = [a for a in addrs if a not in half]
    split = rng.choice([6.0, 10.0])
    sim.at(split, lambda: sim.partition([half]))
    first = split + rng.uniform(3, 10)
    for i in range(6):
        publish(half[0], f"a{i}", first + i * rng.uniform(0.05, 0.5))
    second = first + rng.uniform(0, 1) if overlapping else first + 3.0 + rng.uniform(0, 3)
    for i in range(6):
        publish(other[0], f"b{i}", second + i * rng.uniform(0.05, 0.5))
    heal = second + 3 + rng.uniform(0, 5)
    sim.at(heal, sim.heal)
    return world, subscribers, heal


def lab_like(seed: int) -> tuple[World, list[str]]:
    """The lab's shape (:func:`lab_shape`), run until 40 s after the heal."""
    world, subscribers, heal = lab_shape(seed)
    world.sim.run(until=heal + 40)
    return world, subscribers


@pytest.mark.parametrize("seed", [183, 424])
def test_the_lab_shape_delivers_every_acknowledged_event_once_in_order(seed: int) -> None:
    world, subscribers = lab_like(seed)
    acked = {m for _, m in world.acked}
    assert {f"a{i}" for i in range(6)} | {f"b{i}" for i in range(6)} <= acked
    for addr in subscribers:
        got = world.delivered.get((addr, 1), [])
        ids = [m for _, m, _ in got]
        assert len(ids) == len(set(ids)), f"{addr}: an event delivered twice"
        assert [s for _, _, s in got] == sorted(s for _, _, s in got), f"{addr}: seq backwards"
        # The first event counts where this subscriber began with it (as the lab's probe).
        wanted = acked if ids[:1] == ["ff1"] else acked - {"ff1"}
        assert not wanted - set(ids), f"{addr}: missing {sorted(wanted - set(ids))}"

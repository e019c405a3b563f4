"""A partition splits the overlay in two while both sides publish on the same topics;
each side's root numbers them; the partition heals. Every acknowledged event reaches
every subscription, once, and no subscription sees seq go backwards (scribe.merge).
Seeded simulator runs with durable logs (sync = always)."""

from __future__ import annotations

import pytest

from overlay.core.storage import SyncPolicy
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

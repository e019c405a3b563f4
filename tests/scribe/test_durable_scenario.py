"""Issue 26's simulator scenario: 300 nodes, 10 topics, reliable publishes; the root and
both replicas of several topics crash together, losing what their disks had not synced,
and restart from their disks; later the whole overlay crashes and restarts mid-run.

Subscribers behave as durable applications do: when their node restarts they subscribe
again with ``replay since_seq`` one past the last seq they saw. Every acknowledged event
reaches every subscriber application exactly once. Nodes rejoin one by one after the
whole crash: a node back before the holders of a topic's latest log stands in for them
and numbers nothing until they are back (scribe.standin), so no log forks and no event
is renumbered (docs/DESIGN.md, "Restarts and forks"). With ``sync = never`` the same run
loses acknowledged events (the setting matters). Seeded: the same seed, the same run."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from overlay.core.effects import Notice
from overlay.core.pubsub import DeliveredEvent
from overlay.core.storage import SyncPolicy
from overlay.sim.engine import Simulator
from tests.scribe.test_durable_sim import World, place_nodes

NODES = 300
TOPICS = tuple(f"topic-{i}" for i in range(10))
APPS_PER_TOPIC = 4
STREAM_AT = 8.0
#: The roots and replicas of three topics crash here, and come back 2 s later.
GROUP_CRASH_AT = 14.0
#: Every node crashes here, and comes back 1 s later.
WHOLE_CRASH_AT = 24.0
END = 60.0


@dataclass
class Subscriber:
    """An application subscribed to ``topic`` on node ``addr``."""

    addr: str
    topic: str
    #: msg_id -> times received, the seqs it came with, and the highest seq seen.
    received: dict[str, int] = field(default_factory=dict)
    seqs: dict[str, set[int]] = field(default_factory=dict)
    last_seq: int = 0


@dataclass
class Scenario(World):
    """test_durable_sim's world (its node settings), with applications subscribed."""

    subscribers: list[Subscriber] = field(default_factory=list)
    #: (addr, sub id) -> the subscriber it serves.
    handles: dict[tuple[str, int], Subscriber] = field(default_factory=dict)
    next_sub: int = 1

    def subscribe(self, sub: Subscriber, replay: bool) -> None:
        sid, self.next_sub = self.next_sub, self.next_sub + 1
        self.handles[(sub.addr, sid)] = sub
        since = sub.last_seq + 1 if replay else None
        self.sim.invoke(sub.addr, lambda core, now: core.app.subscribe(
            now, sub.topic, "", sid, replay_since=since))

    def restart(self, addrs: list[str], seed_from: list[str]) -> None:
        """Start ``addrs`` again from their disks, joining through a live node (the first
        creates the ring when none is), and their applications subscribe again."""
        sim = self.sim
        for i, addr in enumerate(addrs):
            self.back_from_disk(addr)
            seeds = [a for a in seed_from if sim.alive(a) and a not in addrs] or [addrs[0]]
            joins_at = sim.now + 0.05 * (i + 1)
            if seeds[0] == addr:
                sim.invoke(addr, lambda core, now: core.create(now))
            else:
                sim.at(joins_at, lambda a=addr, s=seeds[0]: sim.invoke(
                    a, lambda core, now: core.join(now, [s])))
            # (A daemon answers not_ready before it joined: the application retries.)
            for sub in self.subscribers:
                if sub.addr == addr:
                    sim.at(joins_at + 3.0, lambda sub=sub: self.subscribe(sub, replay=True))


def build(seed: int, sync: SyncPolicy) -> Scenario:
    sim = Simulator(seed, sync=sync)
    world = Scenario(sim)

    def on_notice(addr: str, notice: Notice, now: float) -> None:
        if notice.kind == "published":
            world.acked[(notice.data["topic"], notice.data["msg_id"])] = notice.data["seq"]

    def on_deliver(addr: str, sub_id: int, event: DeliveredEvent, now: float) -> None:
        sub = world.handles.get((addr, sub_id))
        if sub is not None:
            sub.received[event.msg_id] = sub.received.get(event.msg_id, 0) + 1
            sub.seqs.setdefault(event.msg_id, set()).add(event.seq or 0)
            sub.last_seq = max(sub.last_seq, event.seq or 0)

    sim.on_notice.append(on_notice)
    sim.on_deliver.append(on_deliver)
    place_nodes(world, NODES)
    rng = random.Random(seed)
    addrs = sorted(world.nodes)
    for topic in TOPICS:
        for addr in rng.sample(addrs, APPS_PER_TOPIC):
            world.subscribers.append(Subscriber(addr, topic))
    for sub in world.subscribers:
        sim.at(0.5, lambda sub=sub: world.subscribe(sub, replay=False))
    return world


def publish_stream(world: Scenario, start: float, count: int, seed: int) -> None:
    """``count`` reliable publishes from random nodes, 20 ms apart, round the topics."""
    sim, addrs, rng = world.sim, sorted(world.nodes), random.Random(seed)
    for i in range(count):
        addr, topic = rng.choice(addrs), TOPICS[i % len(TOPICS)]
        msg_id = f"{i:032x}"
        sim.at(start + i * 0.02, lambda a=addr, t=topic, m=msg_id: sim.alive(a) and sim.invoke(
            a, lambda core, now: core.app.publish(now, t, {}, b"x", m, reliable=True)))


def run(seed: int, sync: SyncPolicy) -> Scenario:
    world = build(seed, sync)
    sim = world.sim
    addrs = sorted(world.nodes)
    publish_stream(world, 1.0, len(TOPICS), seed)  # the roots start numbering
    publish_stream(world, STREAM_AT, 1000, seed + 1)  # 8 s .. 28 s, across both crashes
    crashed = sorted({a for topic in TOPICS[:3] for a in world.holders(topic)})

    def crash_group() -> None:
        for addr in crashed:
            sim.crash(addr)

    sim.at(GROUP_CRASH_AT, crash_group)
    sim.at(GROUP_CRASH_AT + 2.0, lambda: world.restart(crashed, addrs))

    def crash_all() -> None:
        for addr in addrs:
            sim.crash(addr)

    sim.at(WHOLE_CRASH_AT, crash_all)
    sim.at(WHOLE_CRASH_AT + 1.0, lambda: world.restart(addrs, []))
    sim.run(until=END)
    return world


def lost(world: Scenario) -> dict[str, int]:
    """Per subscriber (node/topic): acknowledged events it never received."""
    found = {}
    for sub in world.subscribers:
        wanted = {m for t, m in world.acked if t == sub.topic}
        missing = len(wanted - set(sub.received))
        if missing:
            found[f"{sub.addr}/{sub.topic}"] = missing
    return found


def test_every_acknowledged_event_reaches_every_subscriber_once_across_crashes() -> None:
    world = run(5, SyncPolicy("always"))
    # Most of the stream was acknowledged (some publishers crashed with their events).
    assert len(world.acked) >= 800, len(world.acked)
    assert not lost(world)
    # Exactly once: no application got an event twice, under one number or another.
    again = {f"{s.addr}/{s.topic}": [m for m, n in s.received.items() if n > 1]
             for s in world.subscribers}
    assert not any(again.values()), again
    # ... and each under the number it was acknowledged with.
    moved = [(s.addr, m) for s in world.subscribers for m, seqs in s.seqs.items()
             if (s.topic, m) in world.acked and seqs != {world.acked[(s.topic, m)]}]
    assert not moved, moved[:5]


def test_with_sync_never_the_same_run_loses_acknowledged_events() -> None:
    world = run(5, SyncPolicy("never"))
    assert lost(world), "sync = never lost nothing: the crashes did not test the setting"

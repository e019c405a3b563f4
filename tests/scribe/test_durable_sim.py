"""Durable topic logs in the simulator: every node crashes at once, losing what its disk
had not synced, and restarts from its disk. With ``sync = always`` every acknowledged
event comes back, in order, with its seq; with ``never`` acknowledged events are lost
(the setting matters). Seeded: the same seed gives the same run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from chord.config import ChordConfig
from chord.node import ChordNode
from chord.oracle import build_tables
from overlay.core.effects import Notice
from overlay.core.pubsub import DeliveredEvent
from overlay.core.storage import SyncPolicy
from overlay.sim.engine import Simulator
from overlay.sim.network import NetworkConfig
from overlay.sim.scenarios.chord_world import sim_address
from scribe.app import ScribeApp
from scribe.config import ScribeConfig
from scribe.durability import MemoryLogs

TOPICS = ("orders", "prices", "alerts")
CHORD = ChordConfig(bits=32, stabilize_interval=0.5, fix_fingers_interval=0.5,
                    check_predecessor_interval=0.5)
SCRIBE = ScribeConfig(durable=True, heartbeat_interval=0.5, parent_timeout=1.8,
                      retain_count=100_000, retain_seconds=100_000.0)


@dataclass
class World:
    sim: Simulator
    nodes: dict[str, ChordNode] = field(default_factory=dict)
    #: (topic, msg_id) -> seq, for every acknowledged publish.
    acked: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (addr, sub) -> delivered (topic, msg_id, seq), in delivery order.
    delivered: dict[tuple[str, int], list[tuple[str, str, int]]] = field(default_factory=dict)

    def node(self, addr: str) -> ChordNode:
        node = ChordNode(addr, self.sim.node_rng(addr), CHORD)
        node.app = ScribeApp(node, SCRIBE)
        self.nodes[addr] = node
        return node

    def back_from_disk(self, addr: str) -> None:
        """``addr`` starts again (a new node object, not in the ring yet) from what its
        disk kept: logs, durable consumers, the key range it owned."""
        node = self.node(addr)
        self.sim.add_node(node, node.node_hex)  # the crashed node's disk
        disk = self.sim.storage(addr)
        assert isinstance(disk, MemoryLogs)
        logs, consumers, start = disk.load(), disk.consumers(), disk.range_start
        self.sim.invoke(addr, lambda core, now: core.app.restore(
            now, logs, consumers=consumers, range_start=start))

    def holders(self, topic: str, count: int = 3) -> list[str]:
        """The topic's root and its next ``count - 1`` successors: its replicas (the ring
        of every node placed, whether alive or not)."""
        key = self.app(min(self.nodes)).state.mid(topic)
        ring = sorted(self.nodes.values(), key=lambda n: n.local.id)
        first = next((i for i, n in enumerate(ring) if n.local.id >= key), 0)
        return [ring[(first + k) % len(ring)].address for k in range(count)]

    def app(self, addr: str) -> ScribeApp:
        app = self.nodes[addr].app
        assert isinstance(app, ScribeApp)
        return app


def build(seed: int, count: int, sync: SyncPolicy, network: NetworkConfig | None = None,
          trace_dir: Path | None = None) -> World:
    sim = Simulator(seed, network=network, sync=sync, trace_dir=trace_dir)
    world = World(sim)

    def on_notice(addr: str, notice: Notice, now: float) -> None:
        if notice.kind == "published":
            data = notice.data
            world.acked[(data["topic"], data["msg_id"])] = data["seq"]

    def on_deliver(addr: str, sub_id: int, event: DeliveredEvent, now: float) -> None:
        world.delivered.setdefault((addr, sub_id), []).append(
            (event.topic, event.msg_id, event.seq))

    sim.on_notice.append(on_notice)
    sim.on_deliver.append(on_deliver)
    place_nodes(world, count)
    return world


def place_nodes(world: World, count: int) -> None:
    """``count`` nodes, each with an empty disk, in a ring with exact tables."""
    sim = world.sim
    nodes = [world.node(sim_address(i)) for i in range(count)]
    for node in nodes:
        sim.add_node(node, node.node_hex, storage=MemoryLogs())
    build_tables(nodes, 0.0)
    for node in nodes:
        sim.invoke(node.address, lambda core, now: None)


def publish_stream(world: World, start: float, count: int) -> None:
    """``count`` reliable publishes from random nodes, 10 ms apart, round the topics;
    msg_ids unique per start time."""
    sim, addrs = world.sim, sorted(world.nodes)
    for i in range(count):
        addr = addrs[sim.rng.randrange(len(addrs))]
        topic = TOPICS[i % len(TOPICS)]
        msg_id = f"{int(start * 1000):016x}{i:016x}"

        def publish(addr: str = addr, topic: str = topic, msg_id: str = msg_id) -> None:
            if sim.alive(addr):
                sim.invoke(addr, lambda core, now: core.app.publish(
                    now, topic, {"i": int(msg_id[16:], 16)}, b"x", msg_id, reliable=True))
        sim.at(start + i * 0.01, publish)


def crash_and_restart_everyone(world: World, at: float) -> None:
    sim = world.sim
    addrs = sorted(world.nodes)

    def crash_all() -> None:
        for addr in addrs:
            sim.crash(addr)

    def restart_all() -> None:
        first = None
        for i, addr in enumerate(addrs):
            world.back_from_disk(addr)
            if first is None:
                first = addr
                sim.invoke(addr, lambda core, now: core.create(now))
            else:
                sim.at(sim.now + 0.05 * i, lambda a=addr, s=first: sim.invoke(
                    a, lambda core, now: core.join(now, [s])))

    sim.at(at, crash_all)
    sim.at(at + 1.0, restart_all)


def replay_everything(world: World, addr: str, at: float) -> None:
    sim = world.sim
    for n, topic in enumerate(TOPICS):
        sim.at(at, lambda topic=topic, n=n: sim.invoke(addr, lambda core, now: core.app.subscribe(
            now, topic, "", 900 + n, replay_since=0)))


#: A root that knows nothing of a topic waits a few seconds before numbering (members
#: may tell it where a lost root was): the stream starts once the roots number.
STREAM_AT = 8.0


def run(seed: int, sync: SyncPolicy) -> tuple[World, list[tuple[str, str, int]]]:
    world = build(seed, 24, sync)
    publish_stream(world, 1.0, 3)  # one per topic: the roots start numbering
    publish_stream(world, STREAM_AT, 150)
    crash_and_restart_everyone(world, STREAM_AT + 1.2)  # mid-stream: 120 of 150 sent
    replay_everything(world, sim_address(5), 25.0)
    world.sim.run(until=45.0)
    replayed = [e for n in range(len(TOPICS))
                for e in world.delivered.get((sim_address(5), 900 + n), [])]
    return world, replayed


def test_every_acknowledged_event_survives_a_crash_of_every_node() -> None:
    world, replayed = run(7, SyncPolicy("always"))
    assert len(world.acked) >= 60  # most of the stream was acknowledged before the crash
    by_id = {(topic, msg_id): seq for topic, msg_id, seq in replayed}
    missing = {k: s for k, s in world.acked.items() if k not in by_id}
    assert not missing, f"{len(missing)} acknowledged events lost: {sorted(missing)[:5]}"
    # ... with the seq it was acknowledged with, once each, in seq order per topic.
    assert all(by_id[k] == seq for k, seq in world.acked.items())
    assert len(by_id) == len(replayed)
    for topic in TOPICS:
        seqs = [seq for t, _, seq in replayed if t == topic]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_numbering_goes_on_after_the_restart_without_reusing_a_seq() -> None:
    world = build(11, 12, SyncPolicy("always"))
    publish_stream(world, 1.0, 3)
    publish_stream(world, STREAM_AT, 60)
    crash_and_restart_everyone(world, STREAM_AT + 0.4)
    publish_stream_after = [(t, f"{0xff00 + i:032x}") for i, t in enumerate(TOPICS * 5)]
    sim = world.sim
    for i, (topic, msg_id) in enumerate(publish_stream_after):
        sim.at(20.0 + i * 0.05, lambda t=topic, m=msg_id: sim.invoke(
            sim_address(3), lambda core, now: core.app.publish(now, t, {}, b"", m)))
    sim.run(until=35.0)
    for topic in TOPICS:
        seqs = [seq for (t, _), seq in world.acked.items() if t == topic]
        assert len(seqs) == len(set(seqs)), f"{topic}: a seq was given twice"
    assert all((t, m) in world.acked for t, m in publish_stream_after)


def test_with_sync_never_acknowledged_events_are_lost() -> None:
    world, replayed = run(7, SyncPolicy("never"))
    by_id = {(topic, msg_id) for topic, msg_id, _ in replayed}
    lost = [k for k in world.acked if k not in by_id]
    assert lost, "sync = never lost nothing: the crash did not test the setting"


def test_a_root_log_damaged_in_the_middle_comes_back_from_the_replicas() -> None:
    """The whole overlay crashes; the disk of the node that owns "orders" comes back with
    a damaged event in the middle of the topic's log: the load drops it and what follows,
    and the node, claiming the topic, gets them back from its replicas."""
    world = build(7, 24, SyncPolicy("always"))
    publish_stream(world, 1.0, 3)
    publish_stream(world, STREAM_AT, 150)
    sim = world.sim
    app = world.app(sim_address(0))
    key = app.state.mid("orders")
    ring = sorted(world.nodes.values(), key=lambda n: n.local.id)
    owner = next((n for n in ring if n.local.id >= key), ring[0]).address
    crash_and_restart_everyone(world, STREAM_AT + 4.0)  # after the stream

    def damage() -> None:
        logs = sim.storage(owner)
        assert isinstance(logs, MemoryLogs)
        logs.damage("orders", 20)

    sim.at(STREAM_AT + 4.5, damage)  # crashed, not yet restarted
    replay_everything(world, sim_address(5), 25.0)
    sim.run(until=45.0)
    logs = sim.storage(owner)
    assert isinstance(logs, MemoryLogs) and logs.dropped == [
        ("orders", "event 20: checksum mismatch")]
    replayed = {(t, m) for t, m, _ in world.delivered.get((sim_address(5), 900), [])}
    acked = {k for k in world.acked if k[0] == "orders"}
    assert len(acked) >= 45 and acked <= replayed


def test_a_root_killed_while_unreliable_events_linger_gives_no_seq_twice() -> None:
    """Persists nobody waits for linger before their transaction (``LINGER_SECONDS``;
    here 0.5 s, so that the crash falls inside it): the root numbers unreliable events,
    sends them down, and crashes before its disk has them. Its members hold them: the
    topic's numbering goes on after them (no seq names two events), and what is
    published after the restart reaches every subscription."""
    world = build(3, 12, SyncPolicy("always"))
    sim = world.sim
    sim.linger_seconds = 0.5
    root = world.holders("orders", 1)[0]
    others = [a for a in sorted(world.nodes) if a != root]
    subscribers, publisher = others[:4], others[4]
    for n, addr in enumerate(subscribers):
        sim.at(0.5, lambda a=addr, n=n: sim.invoke(a, lambda core, now: core.app.subscribe(
            now, "orders", "", 700 + n)))

    def publish(msg_id: str) -> None:
        if sim.alive(publisher):
            sim.invoke(publisher, lambda core, now: core.app.publish(
                now, "orders", {}, b"x", msg_id, reliable=False))

    before = [f"{i:032x}" for i in range(10)]
    after = [f"{0xff00 + i:032x}" for i in range(10)]
    for i, msg_id in enumerate(before):
        sim.at(STREAM_AT + i * 0.01, lambda m=msg_id: publish(m))
    crash_at = STREAM_AT + 0.3  # every event delivered, none synced at the root
    sim.at(crash_at, lambda: sim.crash(root))
    sim.at(crash_at + 1.0, lambda: world.back_from_disk(root))
    sim.at(crash_at + 1.0, lambda: sim.invoke(root, lambda core, now: core.join(
        now, [subscribers[0]])))
    for i, msg_id in enumerate(after):
        sim.at(crash_at + 15.0 + i * 0.05, lambda m=msg_id: publish(m))
    seen_at_crash: list[int] = []
    kept: list[int] = []

    def look() -> None:  # crashed, not restarted: what the disk kept
        seen_at_crash.extend(seq for events in world.delivered.values()
                             for t, _, seq in events if t == "orders")
        disk = sim.storage(root)
        assert isinstance(disk, MemoryLogs)
        kept.extend(e.seq or 0 for log in disk.load() if log.topic == "orders"
                    for e in log.events)

    sim.at(crash_at + 0.5, look)
    sim.run(until=crash_at + 25.0)
    # The crash lost events the subscribers have: the case is tested.
    assert max(seen_at_crash) > max(kept, default=0)
    names: dict[int, str] = {}
    for (addr, sub), events in world.delivered.items():
        ids = [m for t, m, _ in events if t == "orders"]
        assert set(after) <= set(ids), f"{addr} sub {sub} lacks events published after"
        for topic, msg_id, seq in events:
            if topic == "orders":
                assert names.setdefault(seq, msg_id) == msg_id, f"seq {seq} named two events"

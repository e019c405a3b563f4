"""Durable consumers in the simulator (scribe.consumer_root, scribe.consumer_members):
a work queue of two members on two nodes, acknowledging what they get; one member's node
crashes with events in flight. Every acknowledged publish is acknowledged by a member
(the crashed member's events go to the other once its lease has run out and their ack
wait has passed). Seeded."""

from __future__ import annotations

from collections import Counter

from overlay.core.effects import Notice
from overlay.core.ids import hash_id
from overlay.core.pubsub import DeliveredEvent
from overlay.core.storage import SyncPolicy
from overlay.sim.scenarios.chord_world import sim_address
from scribe.consumer_values import ConsumerConfig
from scribe.durability import MemoryLogs
from tests.scribe.test_durable_sim import SCRIBE, World, build

TOPIC = "tasks"
CONFIG = ConsumerConfig(ack=True, ack_wait=2.0, max_inflight=4)


def run(seed: int, crash_at: float | None, root_crash_at: float | None = None
        ) -> tuple[World, list[tuple[str, str, int]], Counter[str]]:
    world = build(seed, 12, SyncPolicy("always"))
    sim = world.sim
    members = {sim_address(2): 1, sim_address(7): 2}
    deliveries: list[tuple[str, str, int]] = []  # (member node, msg_id, attempt)
    acked: Counter[str] = Counter()

    def on_deliver(addr: str, sub_id: int, event: DeliveredEvent, now: float) -> None:
        if members.get(addr) != sub_id:
            return
        deliveries.append((addr, event.msg_id, event.attempt))
        if crash_at is not None and addr == sim_address(2) and now >= crash_at - 1.0:
            return  # this application hangs before it acknowledges, then its node dies

        def ack() -> None:
            if sim.alive(addr):
                acked[event.msg_id] += 1
                sim.invoke(addr, lambda core, now: core.app.durable_ack(
                    now, sub_id, "ack", (event.msg_id,)))
        sim.at(now + 0.05, ack)

    sim.on_deliver.append(on_deliver)
    for addr, sub in members.items():
        sim.at(0.5, lambda a=addr, s=sub: sim.invoke(
            a, lambda core, now: core.app.durable_subscribe(now, TOPIC, "workers", s, "",
                                                            CONFIG)))
    addrs = sorted(world.nodes)
    for i in range(40):
        addr = addrs[(3 * i) % len(addrs)]
        sim.at(8.0 + 0.1 * i, lambda a=addr, i=i: sim.alive(a) and sim.invoke(
            a, lambda core, now: core.app.publish(now, TOPIC, {"i": i}, b"task",
                                                  f"{i + 1:032x}", reliable=True)))
    if crash_at is not None:
        sim.at(crash_at, lambda: sim.crash(sim_address(2)))
    if root_crash_at is not None:
        key = world.app(addrs[0]).state.mid(TOPIC)
        ring = sorted(world.nodes.values(), key=lambda n: n.local.id)
        root = next((n for n in ring if n.local.id >= key), ring[0]).address
        assert root not in members
        sim.at(root_crash_at, lambda: sim.crash(root))
    sim.run(until=40.0)
    return world, deliveries, acked


def test_a_work_queue_shares_the_events_and_each_is_acknowledged_once() -> None:
    world, deliveries, acked = run(3, crash_at=None)
    published = {m for t, m in world.acked if t == TOPIC}
    assert len(published) == 40
    assert set(acked) == published and set(acked.values()) == {1}
    by_member = Counter(addr for addr, _, _ in deliveries)
    assert set(by_member) == {sim_address(2), sim_address(7)}  # both took a share
    assert all(attempt == 1 for _, _, attempt in deliveries)


def test_events_in_flight_at_a_crashed_member_go_to_the_other() -> None:
    world, deliveries, acked = run(3, crash_at=10.0)
    published = {m for t, m in world.acked if t == TOPIC}
    assert len(published) == 40
    assert set(acked) == published  # every task acknowledged by a live member
    stranded = {m for addr, m, _ in deliveries if addr == sim_address(2)} - set(acked)
    assert not stranded
    again = [(addr, m, a) for addr, m, a in deliveries if a > 1]
    assert again and all(addr == sim_address(7) for addr, _, _ in again)


def test_the_consumer_survives_its_roots_crash_through_the_replicas_copy() -> None:
    world, deliveries, acked = run(3, crash_at=None, root_crash_at=10.05)
    published = {m for t, m in world.acked if t == TOPIC}
    assert len(published) >= 35  # (publishes in flight at the crash retry to the new root)
    assert published <= set(acked)  # at least once: in flight at the crash goes again
    assert {addr for addr, _, _ in deliveries} == {sim_address(2), sim_address(7)}


def test_the_consumer_and_its_progress_survive_a_restart_of_every_node() -> None:
    """Half the tasks are published and acknowledged; every node crashes and restarts
    from its disk (the consumers' progress among what it loads); the members attach
    again and get the rest. Acknowledged tasks are not delivered again."""
    world = build(5, 12, SyncPolicy("always"))
    sim = world.sim
    addrs = sorted(world.nodes)
    members = {sim_address(2): 1, sim_address(7): 2}
    got: list[tuple[float, str]] = []

    def on_deliver(addr: str, sub_id: int, event: DeliveredEvent, now: float) -> None:
        if members.get(addr) == sub_id:
            got.append((now, event.msg_id))
            sim.at(now + 0.05, lambda: sim.alive(addr) and sim.invoke(
                addr, lambda core, t: core.app.durable_ack(t, sub_id, "ack",
                                                           (event.msg_id,))))

    sim.on_deliver.append(on_deliver)

    def attach(at: float) -> None:
        for addr, sub in members.items():
            sim.at(at, lambda a=addr, s=sub: sim.invoke(
                a, lambda core, now: core.app.durable_subscribe(now, TOPIC, "workers", s, "",
                                                                CONFIG)))

    attach(0.5)
    for i in range(40):
        at = 8.0 + 0.1 * i if i < 20 else 30.0 + 0.1 * (i - 20)
        sim.at(at, lambda a=addrs[(3 * i) % 12], i=i: sim.alive(a) and sim.invoke(
            a, lambda core, now: core.app.publish(now, TOPIC, {"i": i}, b"task",
                                                  f"{i + 1:032x}", reliable=True)))

    def crash_all() -> None:
        for addr in addrs:
            sim.crash(addr)

    def restart_all() -> None:
        for i, addr in enumerate(addrs):
            world.back_from_disk(addr)
            if i == 0:
                sim.invoke(addr, lambda core, now: core.create(now))
            else:
                sim.at(sim.now + 0.05 * i, lambda a=addr: sim.invoke(
                    a, lambda core, now: core.join(now, [addrs[0]])))

    sim.at(15.0, crash_all)  # the first twenty acknowledged long before
    sim.at(16.0, restart_all)
    attach(22.0)
    sim.run(until=60.0)
    before = {m for t, m in got if t < 15.0}
    after = [m for t, m in got if t > 16.0]
    assert len(before) == 20
    assert set(after) == {f"{i + 1:032x}" for i in range(20, 40)}  # the rest, and only
    assert len(after) == len(set(after))


def test_a_query_reports_the_consumer_from_its_root_and_a_delete_ends_its_members() -> None:
    """A node that is no member asks the topic's root about its consumers, then deletes
    one: the member's node is told (a ``consumer_refused`` notice, code ``deleted``), and
    a later query finds none. A fetch on a push consumer is refused at the member."""
    world = build(4, 12, SyncPolicy("always"))
    sim = world.sim
    member, asker = sim_address(2), sim_address(9)
    notices: list[tuple[str, str, dict[str, object]]] = []
    sim.on_notice.append(lambda addr, notice, now: notices.append(
        (addr, notice.kind, dict(notice.data))))
    sim.at(0.5, lambda: sim.invoke(member, lambda core, now: core.app.durable_subscribe(
        now, TOPIC, "workers", 1, "i > 1", CONFIG)))
    for i in range(5):
        sim.at(5.0 + 0.1 * i, lambda i=i: sim.invoke(member, lambda core, now: core.app.publish(
            now, TOPIC, {"i": i}, b"task", f"{i + 1:032x}", reliable=True)))
    sim.at(9.0, lambda: sim.invoke(asker, lambda core, now: core.app.consumers_query(
        now, 11, TOPIC)))
    sim.at(10.0, lambda: sim.invoke(asker, lambda core, now: core.app.consumers_query(
        now, 12, TOPIC, "workers", delete=True)))
    sim.at(11.0, lambda: sim.invoke(asker, lambda core, now: core.app.consumers_query(
        now, 13, TOPIC)))
    sim.run(until=12.0)
    reports = {n["query_id"]: n for a, kind, n in notices if kind == "consumers" and a == asker}
    assert set(reports) == {11, 12, 13}
    (first,) = reports[11]["consumers"]  # type: ignore[misc]
    # i > 1: three of the five wanted, in flight to the member (max_inflight 4), not acked
    assert (first["durable"], first["filter"], first["inflight"], first["members"],
            first["ack_floor"]) == ("workers", "i > 1", 3, 1, 2)
    assert [c["durable"] for c in reports[12]["consumers"]] == ["workers"]  # type: ignore[attr-defined]
    assert reports[13]["consumers"] == [] and reports[13]["more"] is False
    ended = [n for a, kind, n in notices if kind == "consumer_refused" and a == member]
    assert ended == [{"sub": 1, "code": "deleted", "error": "the durable consumer was deleted"}]


def test_a_root_back_with_an_older_copy_takes_its_replicas_newer_one() -> None:
    """The topic's root crashes; the members go on acknowledging at the next root; the
    old root comes back from its disk (an older copy of the consumer) and owns the key
    again. Its replicas answer its copy with their newer one, and members attaching
    meanwhile wait for that: nothing acknowledged is delivered again."""
    world = build(6, 12, SyncPolicy("always"))
    sim = world.sim
    addrs = sorted(world.nodes)
    key = world.app(addrs[0]).state.mid(TOPIC)
    ring = sorted(world.nodes.values(), key=lambda n: n.local.id)
    root = next((n for n in ring if n.local.id >= key), ring[0]).address
    member = next(a for a in addrs if a != root)
    got: list[tuple[float, str, int]] = []

    def on_deliver(addr: str, sub_id: int, event: DeliveredEvent, now: float) -> None:
        if addr == member and sub_id == 1:
            got.append((now, event.msg_id, event.attempt))
            sim.at(now + 0.05, lambda: sim.alive(addr) and sim.invoke(
                addr, lambda core, t: core.app.durable_ack(t, 1, "ack",
                                                           (event.msg_id,))))

    sim.on_deliver.append(on_deliver)
    sim.at(0.5, lambda: sim.invoke(member, lambda core, now: core.app.durable_subscribe(
        now, TOPIC, "workers", 1, "", CONFIG)))
    publishers = [a for a in addrs if a not in (root, member)]
    starts = (5.0, 15.0, 40.0)  # ten before the crash, ten while down, ten after its return
    for i in range(30):
        publisher = publishers[i % len(publishers)]
        sim.at(starts[i // 10] + 0.1 * (i % 10), lambda a=publisher, i=i: sim.invoke(
            a, lambda core, now: core.app.publish(now, TOPIC, {"i": i}, b"task",
                                                  f"{i + 1:032x}", reliable=True)))

    def restart_root() -> None:
        node = world.node(root)
        sim.add_node(node, node.node_hex)
        disk = sim.storage(root)
        assert isinstance(disk, MemoryLogs)
        logs, consumers = disk.load(), disk.consumers()
        assert consumers and consumers[0].progress.ack_floor == 10  # its copy: older
        sim.invoke(root, lambda core, now: core.app.restore(now, logs, consumers=consumers))
        sim.invoke(root, lambda core, now: core.join(now, [member]))

    sim.at(10.0, lambda: sim.crash(root))  # the first ten acknowledged at it
    sim.at(30.0, restart_root)  # the next ten acknowledged at the next root meanwhile
    sim.run(until=60.0)
    acked_ids = [m for _, m, _ in got]
    assert set(acked_ids) == {f"{i + 1:032x}" for i in range(30)}
    assert len(acked_ids) == len(set(acked_ids)), "an acknowledged task came again"
    assert world.app(root).consumers.hosted  # the old root is the consumer's root again


def test_a_consumer_moves_with_its_topics_key_to_a_node_that_joins() -> None:
    """A node joins just before the topic's key: the key moves to it, a node that never
    held the topic or a copy of its consumer. The old root hands the consumer over with
    the topic (its progress, routed to the key): the member goes on with the new root,
    and nothing it acknowledged is delivered again."""
    world = build(8, 12, SyncPolicy("always"))
    sim = world.sim
    root = world.holders(TOPIC, 1)[0]
    key = world.app(root).state.mid(TOPIC)
    root_id, size = world.nodes[root].local.id, 1 << 32
    # An address whose id falls between the key and the root: its node owns the key.
    joiner = next(a for a in (sim_address(i) for i in range(100, 100_000))
                  if (hash_id(a, 32) - key) % size < (root_id - key) % size)
    member = next(a for a in sorted(world.nodes) if a != root)
    got: list[tuple[str, int]] = []

    def on_deliver(addr: str, sub_id: int, event: DeliveredEvent, now: float) -> None:
        if addr == member and sub_id == 1:
            got.append((event.msg_id, event.attempt))
            sim.at(now + 0.05, lambda m=event.msg_id: sim.invoke(
                member, lambda core, now: core.app.durable_ack(now, 1, "ack", (m,))))

    sim.on_deliver.append(on_deliver)
    sim.at(0.5, lambda: sim.invoke(member, lambda core, now: core.app.durable_subscribe(
        now, TOPIC, "workers", 1, "", CONFIG)))
    for i in range(40):
        sim.at(5.0 + 0.25 * i, lambda i=i: sim.invoke(member, lambda core, now: core.app.publish(
            now, TOPIC, {"i": i}, b"task", f"{i + 1:032x}", reliable=True)))

    def join() -> None:
        node = world.node(joiner)
        sim.add_node(node, node.node_hex, storage=MemoryLogs())
        sim.invoke(joiner, lambda core, now: core.join(now, [root]))

    sim.at(9.0, join)  # after about 16 of the 40
    sim.run(until=30.0)
    assert world.holders(TOPIC, 1)[0] == joiner
    assert world.app(joiner).consumers.hosted  # the consumer moved with the key
    assert not world.app(root).consumers.hosted  # ... and left the old root
    published = {m for t, m in world.acked if t == TOPIC}
    assert len(published) == 40 and {m for m, _ in got} == published
    again = [m for m, n in Counter(m for m, _ in got).items() if n > 1]
    assert not again, again


def test_a_fetch_made_while_a_new_root_gathers_is_answered_once_it_is_over() -> None:
    """The ring formed a moment ago: a new pull consumer gathers first (a former root's
    copy may be on its way). A fetch sent meanwhile is held, not dropped, and answered
    with the retained tasks once the gathering is over."""
    world = build(9, 12, SyncPolicy("always"))
    sim = world.sim
    member = sim_address(4)
    fetched: list[tuple[float, list[str]]] = []

    def on_notice(addr: str, notice: Notice, now: float) -> None:
        if addr == member and notice.kind == "fetched":
            fetched.append((now, [e.msg_id for e in notice.data["events"]]))

    sim.on_notice.append(on_notice)
    for i in range(5):
        sim.at(0.1, lambda i=i: sim.invoke(member, lambda core, now: core.app.publish(
            now, TOPIC, {"i": i}, b"task", f"{i + 1:032x}", reliable=True)))
    pull = ConsumerConfig(ack=True, pull=True)
    sim.at(0.5, lambda: sim.invoke(member, lambda core, now: core.app.durable_subscribe(
        now, TOPIC, "batch", 1, "", pull)))
    sim.at(0.7, lambda: sim.invoke(member, lambda core, now: core.app.durable_fetch(
        now, 1, 1, 10, 0.0)))
    sim.run(until=5.0)
    root = world.app(world.holders(TOPIC, 1)[0])
    assert root.consumers.hosted[(TOPIC, "batch")].resume_from is None  # gathered
    (at, ids), = fetched
    assert ids == [f"{i + 1:032x}" for i in range(5)]
    assert at >= 0.5 + SCRIBE.replica_timeout  # after the gathering, not before

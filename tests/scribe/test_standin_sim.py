"""A staggered whole restart in the simulator: a node back before the holders of a topic
(its root and both replicas) stands in for them (scribe.standin). It takes the topic's
root role but numbers nothing until they are back; then the publishes it held are
numbered after the log they kept, every acknowledged event keeps its seq and nothing is
merged. Holders that never come back leave the topic unavailable for ``standin_wait``
only. Seeded: the same seed gives the same run."""

from __future__ import annotations

from overlay.core.effects import Notice
from overlay.core.storage import SyncPolicy
from scribe.durability import MemoryLogs
from tests.scribe.test_durable_sim import SCRIBE, World, build, publish_stream

TOPIC = "orders"
NODES = 12
CRASH_AT = 10.0
RESTART_AT = 11.0
#: The publish made while the topic's holders are away.
LATE = "f" * 32


def started(seed: int) -> tuple[World, dict[str, float]]:
    """A world whose topics are numbered: ten acknowledged events each, by 8.3 s; and
    when each msg_id is acknowledged (filled as the run goes)."""
    world = build(seed, NODES, SyncPolicy("always"))
    acked_at: dict[str, float] = {}

    def on_notice(addr: str, notice: Notice, now: float) -> None:
        if notice.kind == "published":
            acked_at[notice.data["msg_id"]] = now

    world.sim.on_notice.append(on_notice)
    publish_stream(world, 1.0, 3)  # one per topic: the roots start numbering
    publish_stream(world, 8.0, 30)  # ten per topic, all acknowledged before 10 s
    return world, acked_at


def run(seed: int, holders_back_at: float | None, until: float
        ) -> tuple[World, dict[str, float], list[str]]:
    """Every node crashes; all but the topic's three holders restart at once (joining one
    by one), the holders at ``holders_back_at`` (None: never). A publish on the topic is
    made while they are away. Returns the world, when each msg_id was acknowledged, and
    the holders."""
    world, acked_at = started(seed)
    sim = world.sim
    holders = world.holders(TOPIC)
    addrs = sorted(world.nodes)
    others = [a for a in addrs if a not in holders]

    def crash_all() -> None:
        for addr in addrs:
            sim.crash(addr)

    def restart(group: list[str], seed_addr: str | None) -> None:
        for i, addr in enumerate(group):
            world.back_from_disk(addr)
            if seed_addr is None and i == 0:
                sim.invoke(addr, lambda core, now: core.create(now))
            else:
                sim.at(sim.now + 0.05 * (i + 1), lambda a=addr, s=seed_addr or group[0]:
                       sim.invoke(a, lambda core, now: core.join(now, [s])))

    sim.at(CRASH_AT, crash_all)
    sim.at(RESTART_AT, lambda: restart(others, None))
    if holders_back_at is not None:
        sim.at(holders_back_at, lambda: restart(holders, others[0]))
    sim.at(RESTART_AT + 3.0, lambda: sim.invoke(others[-1], lambda core, now: core.app.publish(
        now, TOPIC, {}, b"late", LATE, reliable=True)))
    sim.run(until=until)
    return world, acked_at, holders


def test_a_stand_in_waits_for_the_holders_and_nothing_forks() -> None:
    world, acked_at, holders = run(3, holders_back_at=RESTART_AT + 10.0, until=40.0)
    before = {m: seq for (t, m), seq in world.acked.items() if t == TOPIC and m != LATE}
    assert len(before) >= 10
    # Numbered only once the holders were back (a node that knew nothing of the topic
    # owned its key from about 11 s to 21 s, past its takeover wait), after their log.
    assert acked_at[LATE] >= RESTART_AT + 10.0
    assert world.acked[(TOPIC, LATE)] == max(before.values()) + 1
    # Every event acknowledged before the crash still has its seq in the root's log:
    # nothing was merged or renumbered.
    root = world.app(holders[0])
    log = root.publishing.retention.log(TOPIC)
    assert log is not None
    assert {m: seq for m, seq in log.by_msg.items() if m != LATE} == before
    assert not root.publishing.retention._moved_below


def test_holders_that_never_return_leave_the_topic_unavailable_for_standin_wait_only(
        ) -> None:
    world, acked_at, _ = run(3, holders_back_at=None, until=RESTART_AT + SCRIBE.standin_wait
                             + 15.0)
    # The stand-in is back in the ring shortly after the restart; it numbers the topic
    # once standin_wait has passed since, not before, and not much later.
    assert RESTART_AT + SCRIBE.standin_wait <= acked_at[LATE] <= \
        RESTART_AT + SCRIBE.standin_wait + 5.0
    assert (TOPIC, LATE) in world.acked


def test_a_stand_in_handed_the_topic_by_a_live_root_numbers_on_at_once() -> None:
    """The topic's root dies for good while the next holder is down; the third holder
    takes the topic over and numbers it. The second comes back: the topic's key is now
    outside its former range (the dead root's), but the live root hands the topic over
    to it, and it numbers on from that log at once, without waiting for the dead root."""
    world, acked_at = started(4)
    sim = world.sim
    dead, back, live = world.holders(TOPIC)
    publisher = next(a for a in sorted(world.nodes) if a not in (dead, back, live))

    def publish(at: float, msg_id: str) -> None:
        sim.at(at, lambda: sim.invoke(publisher, lambda core, now: core.app.publish(
            now, TOPIC, {}, b"x", msg_id, reliable=True)))

    sim.at(10.0, lambda: sim.crash(back))
    sim.at(11.0, lambda: sim.crash(dead))  # for good
    publish(16.0, "e1" * 16)  # numbered by the live root
    restored: dict[str, int | None] = {}

    def restart() -> None:
        disk = sim.storage(back)
        assert isinstance(disk, MemoryLogs)
        restored["range"] = disk.range_start
        world.back_from_disk(back)

    sim.at(20.0, restart)
    sim.at(20.05, lambda: sim.invoke(back, lambda core, now: core.join(now, [publisher])))
    publish(26.0, "e2" * 16)
    sim.run(until=26.0 + SCRIBE.standin_wait)
    # Its former range was (dead, back]: the topic's key was the dead root's.
    assert restored["range"] == world.nodes[dead].local.id
    first, second = world.acked[(TOPIC, "e1" * 16)], world.acked[(TOPIC, "e2" * 16)]
    assert second == first + 1
    assert acked_at["e2" * 16] < 26.0 + 5.0  # not standin_wait later
    root = world.app(back).publishing.retention.log(TOPIC)
    assert root is not None and root.by_msg["e2" * 16] == second  # numbered by `back`

"""A staggered whole restart in the simulator: a node back before the holders of a topic
(its root and both replicas) stands in for them (scribe.standin). It takes the topic's
root role but numbers nothing until they are back; then the publishes it held are
numbered after the log they kept, every acknowledged event keeps its seq and nothing is
merged. Holders that never come back leave the topic unavailable for ``standin_wait``
only. Seeded: the same seed gives the same run."""

from __future__ import annotations

from overlay.core.effects import Notice
from overlay.core.storage import SyncPolicy
from tests.scribe.test_durable_sim import SCRIBE, World, build, publish_stream

TOPIC = "orders"
NODES = 12
CRASH_AT = 10.0
RESTART_AT = 11.0
#: The publish made while the topic's holders are away.
LATE = "f" * 32


def run(seed: int, holders_back_at: float | None, until: float
        ) -> tuple[World, dict[str, float], list[str]]:
    """Every node crashes; all but the topic's three holders restart at once (joining one
    by one), the holders at ``holders_back_at`` (None: never). A publish on the topic is
    made while they are away. Returns the world, when each msg_id was acknowledged, and
    the holders."""
    world = build(seed, NODES, SyncPolicy("always"))
    sim = world.sim
    acked_at: dict[str, float] = {}

    def on_notice(addr: str, notice: Notice, now: float) -> None:
        if notice.kind == "published":
            acked_at[notice.data["msg_id"]] = now

    sim.on_notice.append(on_notice)
    publish_stream(world, 1.0, 3)  # one per topic: the roots start numbering
    publish_stream(world, 8.0, 30)  # ten per topic, all acknowledged before the crash
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

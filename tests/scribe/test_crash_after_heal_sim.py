"""A healed partition, then a crash: the root that numbered one side dies after it copied
its log to the other side's root and before it handed its log over. The events it
acknowledged must still reach every live subscription once, in order
(``scribe.other_roots``). Seeded simulations; each seed loses acknowledged events when
the other root never takes the copies in. And a node that crashes around the heal and
starts again from its disk: what it acknowledged reaches everyone."""

from __future__ import annotations

import random

import pytest

from tests.scribe.test_durable_sim import TOPICS, World
from tests.scribe.test_partition_sim import lab_shape
from tests.scribe.test_restarts_sim import order_problems


def crash_after_heal(seed: int) -> tuple[World, list[str], str]:
    """The lab's shape on a small ring (3 to 6 nodes: the roots of both sides are each
    other's replicas more often); at the first moment after the heal when two nodes
    number the topic and one holds the other's copies, the other crashes (for good).
    Returns the world, the subscribers and the crashed node."""
    world, subscribers, heal = lab_shape(seed, (3, 4, 5, 6))
    sim, topic = world.sim, TOPICS[0]
    addrs = sorted(world.nodes)
    crashed: list[str] = []

    def crash_in_the_window() -> None:
        numbering = [a for a in addrs
                     if sim.alive(a) and topic in world.nodes[a].app.state.numbering]
        for addr in numbering if len(numbering) == 2 else []:
            if world.nodes[addr].app.publishing.retention.other_roots:
                crashed.append(next(a for a in numbering if a != addr))
                sim.crash(crashed[0])
                return
        if sim.now < heal + 15:
            sim.at(sim.now + 0.02, crash_in_the_window)

    sim.at(heal, crash_in_the_window)
    sim.run(until=heal + 60)
    assert crashed, "the scenario needs the crash in the window"
    return world, subscribers, crashed[0]


def restart_around_heal(seed: int) -> tuple[World, list[str], str]:
    """The lab's shape on 3 to 8 nodes; a node drawn from ``seed`` crashes between 2 s
    before the heal and 8 s after it, and starts again from its disk 2 to 10 s later.
    Returns the world, the subscribers and the restarted node."""
    world, subscribers, heal = lab_shape(seed, (3, 4, 5, 6, 8))
    sim = world.sim
    rng = random.Random(seed * 31 + 7)
    addrs = sorted(world.nodes)
    victim = rng.choice(addrs)
    at = heal + rng.uniform(-2, 8)
    sim.at(at, lambda: sim.crash(victim))

    def back() -> None:
        world.back_from_disk(victim)
        through = next(a for a in addrs if a != victim and sim.alive(a))
        sim.at(sim.now + 0.05, lambda: sim.invoke(victim, lambda core, now: core.join(
            now, [through])))

    sim.at(at + rng.uniform(2, 10), back)
    sim.run(until=heal + 70)
    return world, subscribers, victim


@pytest.mark.parametrize("seed", [1, 4, 8])
def test_a_root_that_dies_before_its_handover_loses_no_acknowledged_event(seed: int) -> None:
    assert_every_acknowledged_event_once_in_order(*crash_after_heal(seed))


# Seeds that lost acknowledged events before a restarted node handed the logs it loaded
# to the key's owner (40: the crashed node was its side's only node and root), or before
# the other root took a silent root's copies in; before numbers were tied to the one
# before them (EventBody.prev: a replica's log that took the other side's copy at a free
# number, 88; a gathering root that filled a number with a member's event of the other
# numbering, 356, whose publisher now crashes before its acknowledgement: see
# test_merge_links.py), before a merge's new numbers waited for the replicas (229), before
# a log from before this root's merge moved its new events (23, 489, 593), and before a
# node that starts numbering moved copies left under old numbers (62), and before a
# restarted node that took itself for the key's owner offered its log once the ring
# settled otherwise (825), and before a replica that took over short of the former
# root's counter asked the other replicas (748: a merge's moved copy there) and a copy
# missing from a gathered log followed the event that names it (516), and before a
# replica that took over with a gap the event after it names asked the others (1241) and
# a root's events that a handed log numbered past without their copies moved (1332), and
# before a node that took the root role while it gathered sent down only up to its
# first gap (1510, 1592).
# 120, 362, 401 and 563 broke on the way there (a handover while the new numbers waited;
# a stale log taken for a fork). 4937 lost one before an event a member answered a
# gathering with, at a number the root's tree had passed, moved rather than filled it;
# 6035 and 6227 before a root's event at a hole in a handed log (a merge there had moved
# that root's events away) moved without the event after the hole naming it; 3675 broke
# on the way there (that rule in place of the naming one). 1327 lost six before replicas
# that came back after a root had numbered them alone got its whole log: the root took
# its first copies after the heal for where they start, a replica that took over
# lacked the six and told its own subscription they were gone.
@pytest.mark.parametrize("seed", [16, 40, 57, 112, 23, 88, 229, 489, 593, 62, 825,
                                  748, 516, 1241, 1332, 1510, 1592, 120, 362, 401, 563,
                                  4937, 6035, 6227, 3675, 1327])
def test_a_node_restarted_around_the_heal_loses_no_acknowledged_event(seed: int) -> None:
    assert_every_acknowledged_event_once_in_order(*restart_around_heal(seed))


def assert_every_acknowledged_event_once_in_order(world: World, subscribers: list[str],
                                                  crashed: str) -> None:
    acked = {m for _, m in world.acked}
    assert {f"a{i}" for i in range(6)} | {f"b{i}" for i in range(6)} <= acked
    problems = delivery_problems(world, subscribers, crashed)
    assert not problems, "; ".join(problems)


def delivery_problems(world: World, subscribers: list[str], crashed: str | None) -> list[str]:
    """What breaks the promise at each live subscriber: an acknowledged event missing
    (the first event aside: published before a subscription may be in effect), one
    delivered twice, seq going backwards. (bench/heal_fuzz.py reports these too.)"""
    acked = {m for _, m in world.acked}
    found = []
    for addr in subscribers:
        if addr == crashed:
            continue
        got = world.delivered.get((addr, 1), [])
        ids = [m for _, m, _ in got]
        found += order_problems(addr, got)
        missing = acked - {"ff1"} - set(ids)
        if missing:
            found.append(f"{addr}: missing {sorted(missing)}")
    return found

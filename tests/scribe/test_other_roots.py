"""Another root's copies at a node that numbers the topic (a healed partition): kept apart
from its log, taken in by that root's handover, or by this node itself when no handover
comes (``scribe.other_roots``). Exact: inputs in, effects out. (Found by a simulator
fuzz of the lab's shape with a crash: the other root died after it had replicated to this
node and before it handed over; its acknowledged events reached nobody.)"""

from __future__ import annotations

from dataclasses import replace

from scribe import ScribeApp
from scribe.durability import RestoredLog
from scribe.messages import RootHandover
from scribe.publish_messages import ReplicaSync, Replicate
from tests.scribe.fakekbr import RecordingHost
from tests.scribe.helpers import MID, TOPIC, body, join, make, ref
from tests.scribe.test_partition_merge import CONFIG

WINDOW = CONFIG.takeover_window()


def root_with_a_child() -> tuple[ScribeApp, RecordingHost]:
    """Node 150 owns the key: a subscription, a child (101), aa numbered 1, dd 2."""
    app, host = make(150, root=True, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.0, MID, join(101, ""), 1)
    app.publish(0.5, TOPIC, {}, msg_id="aa", reliable=False)
    app.publish(3.0, TOPIC, {}, msg_id="dd", reliable=False)
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("aa", 1), ("dd", 2)]
    host.clear()
    return app, host


def other_side() -> tuple:
    """Node 200's log: aa shared, then b2, b3 numbered on its side (before dd's time)."""
    return (body("aa", 1), replace(body("b2", 2), ts=2.5), replace(body("b3", 3), ts=2.6))


def test_a_silent_other_roots_copies_are_taken_in_after_the_takeover_window() -> None:
    app, host = root_with_a_child()
    # Node 200 numbered the topic on its side and takes this node for its replica.
    app.on_direct(4.0, "n200", ReplicaSync(TOPIC, 3, ref(200), other_side()))
    app.on_timer(4.0 + WINDOW - 0.01)
    assert host.delivered == [] and host.sent_copies() == []
    # No handover came (node 200 is gone): its copies are all that is left of b2, b3.
    # Merged as its handover would be: a fork at 2, and b2, b3, dd move after both
    # counters in publish-time order; this root's subscription had dd already.
    app.on_timer(4.0 + WINDOW + CONFIG.heartbeat_interval)  # (the next tick)
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("b2", 4), ("b3", 5)]
    assert [(dest, e.body.msg_id, e.body.seq) for dest, e in host.sent_copies()] == [
        ("n101", "b2", 4), ("n101", "b3", 5), ("n101", "dd", 6)]
    # Taken in once: a later tick finds nothing to take, and the handover of the same
    # log, if it still comes, moves nothing (every event is held).
    host.clear()
    app.on_timer(4.0 + 2 * WINDOW)
    app.deliver(4.0 + 2 * WINDOW, MID, RootHandover(TOPIC, 3, ref(200), None, 0, other_side()),
                2)
    assert host.delivered == [] and host.sent_copies() == []


def test_the_copies_of_a_root_that_hands_over_are_not_taken_in_again() -> None:
    app, host = root_with_a_child()
    app.on_direct(4.0, "n200", Replicate(replace(body("b3", 3), ts=2.6), ref(200)))
    app.deliver(5.0, MID, RootHandover(TOPIC, 3, ref(200), None, 0, other_side()), 2)
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("b2", 4), ("b3", 5)]
    host.clear()
    app.on_timer(4.0 + WINDOW + CONFIG.heartbeat_interval)
    assert host.delivered == [] and host.sent_copies() == []
    assert not app.publishing.retention.other_roots


def test_copies_come_while_numbering_neither_move_the_counter_nor_join_the_log() -> None:
    app, host = root_with_a_child()
    app.on_direct(4.0, "n200", ReplicaSync(TOPIC, 3, ref(200), other_side()))
    retention = app.publishing.retention
    log = retention.log(TOPIC)
    assert log is not None and sorted(log.by_msg) == ["aa", "dd"]
    assert TOPIC not in retention.replica
    app.publish(4.5, TOPIC, {}, msg_id="ee", reliable=False)
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("ee", 3)]


def test_a_root_whose_handover_comes_back_takes_in_the_copies_of_the_root_it_went_to() -> None:
    app, host = root_with_a_child()
    app.on_direct(4.0, "n200", ReplicaSync(TOPIC, 3, ref(200), other_side()))
    # The ring says node 200 owns the key: this node hands its log over to it ...
    host.responsible_for.clear()
    app.update(4.5, ref(200), True)
    handovers = [msg for _, msg in host.routed if isinstance(msg, RootHandover)]
    assert [b.msg_id for b in handovers[0].events] == ["aa", "dd"]
    host.clear()
    # ... but node 200 dies first: the key is this node's again and the handover, routed
    # again, comes back to it. It numbers again, and node 200's copies (b2, b3) are
    # merged with its own log at its next tick, not dropped nor laid into its holes.
    host.responsible_for.add(MID)
    app.update(6.0, ref(200), False)
    for msg in handovers:
        app.deliver(6.0, MID, msg, 0)
    app.on_timer(6.0 + CONFIG.heartbeat_interval)
    got = [(e.msg_id, e.seq) for _, e in host.delivered]
    assert ("b2", 4) in got and ("b3", 5) in got
    assert all(m not in {"aa", "dd"} for m, _ in got)


# -- a restarted node's logs go to the key's owner -------------------------------------------


def restarted(node_id: int, owns_the_key: bool) -> tuple[ScribeApp, RecordingHost]:
    """Node ``node_id`` loaded a log of the topic (aa, a2, a3: it numbered them as the
    root of its side of a partition, then crashed before it handed them over)."""
    app, host = make(node_id, root=owns_the_key, config=CONFIG)
    log = (body("aa", 1), body("a2", 2), body("a3", 3))
    app.restore(10.0, [RestoredLog(TOPIC, 3, 1, log)])
    return app, host


def test_a_restarted_node_hands_the_logs_it_loaded_to_the_keys_owner_once_back() -> None:
    app, host = restarted(120, owns_the_key=False)
    app.on_timer(10.0 + CONFIG.heartbeat_interval)
    assert host.routed == []  # not in the ring yet: who owns the key is not known
    host.pred = ref(100)
    app.on_timer(10.0 + 2 * CONFIG.heartbeat_interval)
    handovers = [msg for _, msg in host.routed if isinstance(msg, RootHandover)]
    assert [(m.seq, m.old_root, m.live, [b.msg_id for b in m.events]) for m in handovers] == [
        (3, ref(120), False, ["aa", "a2", "a3"])]
    host.clear()
    app.on_timer(10.0 + 3 * CONFIG.heartbeat_interval)
    assert host.routed == []  # once


def test_the_owner_merges_a_restarted_nodes_log_and_sends_down_what_its_tree_lacks() -> None:
    app, host = root_with_a_child()  # aa 1, dd 2 (dd published at 3.0)
    log = (body("aa", 1), replace(body("a2", 2), ts=2.5), replace(body("a3", 3), ts=2.6))
    app.deliver(12.0, MID, RootHandover(TOPIC, 3, ref(120), None, 0, log), 2)
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("a2", 4), ("a3", 5)]


def test_a_restarted_node_that_owns_the_key_keeps_its_log_to_number_on() -> None:
    app, host = restarted(150, owns_the_key=True)
    host.pred = ref(100)
    app.on_timer(10.0 + CONFIG.heartbeat_interval)
    assert [msg for _, msg in host.routed if isinstance(msg, RootHandover)] == []
    # It numbers the topic: its log is its own, no restored log to offer (when the key
    # moves, a live root's handover takes it).
    app.publish(11.0, TOPIC, {}, msg_id="a4", reliable=False)
    host.responsible_for.clear()
    app.on_timer(10.0 + 2 * CONFIG.heartbeat_interval)
    handovers = [msg for _, msg in host.routed if isinstance(msg, RootHandover)]
    assert [(m.live, m.seq) for m in handovers] == [(True, 4)]


def test_a_restarted_node_that_took_itself_for_the_owner_offers_its_log_once_it_is_not() -> None:
    # Back in the ring, the node owns the key for a moment (its successor list is not
    # settled); then the ring settles with another owner (found by the fuzz: seed 825 of
    # bench/heal_fuzz.py restart, the b side's only node and root).
    app, host = restarted(150, owns_the_key=True)
    host.pred = ref(100)
    app.on_timer(10.0 + CONFIG.heartbeat_interval)
    host.responsible_for.clear()
    app.on_timer(10.0 + 2 * CONFIG.heartbeat_interval)
    handovers = [msg for _, msg in host.routed if isinstance(msg, RootHandover)]
    assert [(m.seq, [b.msg_id for b in m.events]) for m in handovers] == [
        (3, ["aa", "a2", "a3"])]

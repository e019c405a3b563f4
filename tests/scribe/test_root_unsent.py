"""Events that reach a root's log without going down its tree: another root's sync after a
healed partition, a member's restore after a root lost its counter. The root sends them
down before its next event (``Ordering.unsent``); otherwise that event's ``prev`` would
vouch for them to every child, and the root's own subscriptions would never have them.
Exact: inputs in, effects out. (Found by a lab run, reproduced in the simulator: a stand-in
root of one side was synced the other side's log at the heal, numbered on after it, and
its own subtree never got the other side's events.)"""

from __future__ import annotations

from dataclasses import replace

from scribe import ScribeApp
from scribe.messages import Pull, RootHandover
from scribe.publish_messages import ReplicaSync, Replicate, Restore
from tests.scribe.fakekbr import RecordingHost
from tests.scribe.helpers import MID, TOPIC, body, join, make, ref
from tests.scribe.test_partition_merge import CONFIG


def root_with_a_child() -> tuple[ScribeApp, RecordingHost]:
    """Node 150 owns the key: a subscription, a child (101), event aa numbered (1)."""
    app, host = make(150, root=True, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.0, MID, join(101, ""), 1)
    app.publish(0.5, TOPIC, {}, msg_id="aa", reliable=False)
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("aa", 1)]
    host.clear()
    return app, host


def test_a_gathering_root_sends_down_the_events_it_gathered_before_its_next_one() -> None:
    app, host = root_with_a_child()
    # Member 120 handled up to 3 (numbered by a root this one never heard of): the root
    # gathers (asks it for them, holds publishes) before it numbers on.
    app.deliver(2.0, MID, Pull(TOPIC, ref(120), 3, join(120, "").digest), 1)
    assert [(dest, m.after) for dest, m in host.sent_of(Restore)] == [("n120", 1)]
    app.publish(2.05, TOPIC, {}, msg_id="dd", reliable=False)
    app.on_direct(2.1, "n120", ReplicaSync(TOPIC, 3, ref(120), (body("bb", 2), body("cc", 3))))
    assert host.delivered == [] and host.sent_copies() == []
    app.on_timer(2.0 + 2 * CONFIG.replica_timeout)  # the gathering ends
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("bb", 2), ("cc", 3), ("dd", 4)]
    assert [(dest, e.body.msg_id, e.body.seq) for dest, e in host.sent_copies()] == [
        ("n101", "bb", 2), ("n101", "cc", 3), ("n101", "dd", 4)]


def test_another_roots_copies_do_not_move_the_counter_of_a_root_that_numbers() -> None:
    app, host = root_with_a_child()
    # Node 200 numbers the same topic (a partition just healed) and takes this node for
    # its replica: its numbers are not this root's, nor events this root's tree had.
    app.on_direct(2.0, "n200", Replicate(body("b5", 5), ref(200)))
    app.on_direct(2.0, "n200", ReplicaSync(TOPIC, 6, ref(200), ()))
    app.publish(3.0, TOPIC, {}, msg_id="dd", reliable=False)
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("dd", 2)]
    host.clear()
    # Its handover comes: a fork at 2, merged; this root's subscription gets the other
    # side's events, after both counters and after its own dd (published first).
    theirs = (body("aa", 1), *(replace(body(f"b{i}", i), ts=10.0 + i) for i in range(2, 7)))
    app.deliver(9.0, MID, RootHandover(TOPIC, 6, ref(200), None, 0, theirs), 2)
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [
        (f"b{i}", 6 + i) for i in range(2, 7)]


def test_a_merge_counts_as_handled_what_went_down_the_tree() -> None:
    app, host = root_with_a_child()
    app.publish(0.6, TOPIC, {}, msg_id="d1", reliable=False)  # 2, handled here
    # A member ahead (3) gives e3: it goes down this root's tree when the gathering ends
    # (not only with the root's next event: none may come).
    app.deliver(2.0, MID, Pull(TOPIC, ref(120), 3, join(120, "").digest), 1)
    app.on_direct(2.1, "n120", ReplicaSync(TOPIC, 3, ref(120), (
        replace(body("e3", 3), ts=2.1),)))
    host.clear()
    app.on_timer(2.0 + 2 * CONFIG.replica_timeout)
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("e3", 3)]
    host.clear()
    # The other side numbered bb, cc at 2, 3: a fork at 2, d1 and e3 move with them.
    theirs = (body("aa", 1), replace(body("bb", 2), ts=1.7), replace(body("cc", 3), ts=9.0))
    app.deliver(9.0, MID, RootHandover(TOPIC, 3, ref(200), None, 0, theirs), 2)
    moved = [(e.body.msg_id, e.body.seq) for _, e in host.sent_copies()]
    assert sorted(moved) == [("bb", 5), ("cc", 7), ("d1", 4), ("e3", 6)]
    # This node's subscription had d1 (under 2) and e3 (under 3): only the other side's
    # events are delivered.
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("bb", 5), ("cc", 7)]


def test_a_gathering_root_merges_what_a_member_of_another_lineage_gives_it() -> None:
    app, host = root_with_a_child()
    for i, msg_id in enumerate(("bb", "b5")):
        app.publish(0.6 + 0.1 * i, TOPIC, {}, msg_id=msg_id, reliable=False)  # 2, 3
    # Member 120 handled up to 4 on the other side of a healed partition, where b5 (a
    # publish retried across the heal) was numbered 4 and e3 took 3.
    app.deliver(2.0, MID, Pull(TOPIC, ref(120), 4, join(120, "").digest), 1)
    app.on_direct(2.1, "n120", ReplicaSync(TOPIC, 4, ref(120), (body("b5", 4),)))
    log = app.publishing.retention.log(TOPIC)
    assert log is not None and log.by_msg["b5"] == 3  # not moved to the other's number
    host.clear()
    app.on_direct(2.2, "n120", ReplicaSync(TOPIC, 4, ref(120), (
        replace(body("e3", 3), ts=1.0), body("b5", 4))))
    # e3 clashes with b5 at 3: merged (moved after both counters), not left in a hole
    # this root's tree had passed. b5 moves with it: the other side passed 3 with e3,
    # and its log does not say whether its members had b5 at 4 (a root that had not
    # released it yet would leave them without it: tests/scribe/test_restarts_sim.py).
    assert log.by_msg["b5"] == 5 and log.by_msg["e3"] == 6  # in publish-time order
    app.on_timer(2.0 + 2 * CONFIG.replica_timeout)
    # This node's subscription had b5 (at 3): its moved copy is not delivered again.
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("e3", 6)]


def test_a_gathering_root_asks_again_from_its_logs_start_when_an_answer_begins_past_a_fork(
) -> None:
    app, host = root_with_a_child()
    app.publish(0.6, TOPIC, {}, msg_id="bb", reliable=False)  # 2, sent down
    # Member 120 handled up to 3 in another numbering: c2 at 2 (acknowledged there), c3
    # at 3. The root asks from its contiguous reach (2), which the member's log does
    # not share: the answer's first event names c2, not bb, as the one before it.
    app.deliver(2.0, MID, Pull(TOPIC, ref(120), 3, join(120, "").digest), 1)
    assert [(dest, m.after) for dest, m in host.sent_of(Restore)] == [("n120", 2)]
    c2 = replace(body("c2", 2), prev="aa")
    c3 = replace(body("c3", 3), prev="c2")
    host.clear()
    app.on_direct(2.1, "n120", ReplicaSync(TOPIC, 3, ref(120), (c3,)))
    # Merged as it is, c2 would never come: asked again for all from the log's start.
    assert [(dest, m.after) for dest, m in host.sent_of(Restore)] == [("n120", 0)]
    log = app.publishing.retention.log(TOPIC)
    assert log is not None and "c3" not in log.by_msg
    app.on_direct(2.2, "n120", ReplicaSync(TOPIC, 3, ref(120), (body("aa", 1), c2, c3)))
    # Once per gathering: a later answer past the fork is merged as it comes.
    app.on_direct(2.3, "n120", ReplicaSync(TOPIC, 3, ref(120), (c3,)))
    assert len(host.sent_of(Restore)) == 1
    app.on_timer(2.0 + 2 * CONFIG.replica_timeout)
    # The clash at 2 moves bb and both of the member's events after both counters; the
    # subscription, which had bb at 2, gets the member's two.
    assert sorted(log.by_msg[m] for m in ("bb", "c2", "c3")) == [4, 5, 6]
    assert sorted(e.msg_id for _, e in host.delivered) == ["c2", "c3"]

"""Heartbeats, silent parents and children, root moves, expiry: exact effects on one node."""

from __future__ import annotations

from chord.kbr import NodeRef
from scribe import ScribeConfig
from scribe.messages import (
    DigestUpdate,
    Disown,
    Event,
    Heartbeat,
    HeartbeatAck,
    Join,
    JoinAck,
    Leave,
    RootHandover,
)
from scribe.summaries import Digest
from tests.scribe.helpers import MID, TOPIC, attach, join, make, ref

CONFIG = ScribeConfig(heartbeat_interval=1.0, parent_timeout=3.5, missed_heartbeats=2)


def run_ticks(app, until: float) -> None:
    while (deadline := app.next_deadline()) is not None and deadline <= until:
        app.on_timer(deadline)


def test_heartbeats_go_only_to_children_that_got_no_event_lately() -> None:
    app, host = make(200, root=True, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.0, MID, join(101, ""), 1)
    app.deliver(0.0, MID, join(102, "x = 1"), 1)
    host.clear()
    app.publish(0.8, TOPIC, {"x": 2}, msg_id="aa")  # goes to 101 only
    host.clear()
    assert app.next_deadline() == 1.0
    app.on_timer(1.0)
    # Nothing went to 102 (prev 0, as when adopted); the root has handled up to 1.
    assert host.sent == [("n102", Heartbeat(TOPIC, ref(200), (200,), 1, 0, 1, True))]
    host.clear()
    app.on_timer(2.0)
    assert host.sent_of(Heartbeat) == [
        ("n101", Heartbeat(TOPIC, ref(200), (200,), 1, 1, 1, True)),
        ("n102", Heartbeat(TOPIC, ref(200), (200,), 1, 1, 1, True))]


def test_a_child_that_stops_answering_is_dropped() -> None:
    app, host = make(200, root=True, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.0, MID, join(101), 1)
    host.clear()
    run_ticks(app, 2.0)
    assert [dest for dest, _ in host.sent_of(Heartbeat)] == ["n101", "n101"]
    app.on_direct(2.1, "n101", HeartbeatAck(TOPIC, ref(101)))  # answered: counting restarts
    run_ticks(app, 4.0)
    assert host.trace_kinds() == []
    run_ticks(app, 5.0)
    assert host.traces == [("child", {"topic": TOPIC, "child": "0065", "op": "remove"})]


def test_a_child_answers_heartbeats_and_learns_its_path() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, parent=200, path=())  # the parent did not know its path yet
    assert app.status()[TOPIC]["depth"] is None
    app.on_direct(1.0, "n200", Heartbeat(TOPIC, ref(200), (300, 200), 1))
    assert host.sent == [("n200", HeartbeatAck(TOPIC, ref(101)))]
    assert app.status()[TOPIC]["depth"] == 2


def test_a_heartbeat_from_a_node_that_is_not_the_parent_is_answered_with_leave() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, parent=200, path=(200,))
    app.on_direct(1.0, "n300", Heartbeat(TOPIC, ref(300), (300,), 1))
    assert host.sent == [("n300", Leave(TOPIC, ref(101)))]


def test_a_silent_parent_makes_the_child_rejoin_through_the_dht() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, parent=200, path=(200,))
    run_ticks(app, 3.0)
    assert host.routed == []
    run_ticks(app, 4.0)
    assert host.traces == [("repair", {"topic": TOPIC, "msg_id": None, "from": "00c8",
                                       "kind": "rejoin"})]
    [(key, msg)] = host.routed
    assert key == MID and isinstance(msg, Join) and msg.joiner == ref(101)
    # The new parent's acknowledgement is written as the new tree edge.
    host.clear()
    app.on_direct(4.5, "n250", JoinAck(TOPIC, ref(250), (250,)))
    assert host.traces == [("tree", {"topic": TOPIC, "parent": "00fa", "role": "member"})]


def test_a_heartbeat_whose_path_holds_this_node_breaks_the_loop() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, parent=200, path=())
    app.on_direct(1.0, "n200", Heartbeat(TOPIC, ref(200), (101, 200), 1))
    assert host.trace_kinds() == ["repair"] and len(host.routed) == 1


def test_a_disowned_child_rejoins_at_once() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, parent=200, path=(200,))
    app.on_direct(1.0, "n200", Disown(TOPIC, ref(200)))
    assert host.trace_kinds() == ["repair"] and len(host.routed) == 1


def test_an_unanswered_join_is_sent_again() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    run_ticks(app, 2.9)
    assert len(host.routed) == 1
    run_ticks(app, 3.0)
    assert len(host.routed) == 2 and host.trace_kinds() == ["subscribe"]


def test_a_root_that_lost_the_key_hands_counter_and_subtree_to_the_new_owner() -> None:
    app, host = make(200, root=True, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.0, MID, join(101), 1)
    app.publish(0.5, TOPIC, {}, msg_id="aa")
    app.publish(0.6, TOPIC, {}, msg_id="bb")
    host.clear()
    host.responsible_for.clear()
    app.update(1.0, NodeRef(150, "n150"), True)
    [(key, handover)] = host.routed
    assert key == MID and isinstance(handover, RootHandover)
    assert (handover.seq, handover.old_root) == (2, ref(200))
    assert [(e.msg_id, e.seq) for e in handover.events] == [("aa", 1), ("bb", 2)]
    # The new owner numbers on from there and adopts the old root with its subtree.
    new, new_host = make(150, root=True, config=CONFIG)
    new.deliver(1.1, MID, handover, 2)
    assert new_host.traces[0] == ("tree", {"topic": TOPIC, "parent": None, "role": "root"})
    assert new_host.sent_of(JoinAck) == [("n200", JoinAck(TOPIC, ref(150), (150,), 2))]
    assert new.publishing.retention.numbered(TOPIC, "bb") == 2  # a retry is not renumbered
    new.publish(1.2, TOPIC, {}, msg_id="cc")
    assert [ev.body.seq for _, ev in new_host.sent_of(Event)] == [3]
    app.on_direct(1.3, "n150", new_host.sent_of(JoinAck)[0][1])
    assert host.traces[-1] == ("tree", {"topic": TOPIC, "parent": "0096", "role": "member"})


def test_a_handover_that_got_no_ack_is_routed_again_and_a_second_copy_changes_nothing() -> None:
    """Lost, a stale root's handover would take the events it acknowledged with it (a
    ring settling after many crashes: two roots for a while, `overlay sim --crash 0.3
    --loss 0.05 --seed 3` lost one that way)."""
    app, host = make(200, root=True, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    app.publish(0.5, TOPIC, {}, msg_id="aa")
    host.clear()
    host.responsible_for.clear()
    app.update(1.0, NodeRef(150, "n150"), True)
    [(_, handover)] = host.routed
    app.on_route_failed(11.0, MID, handover)
    assert host.routed == [(MID, handover), (MID, handover)]
    app.on_route_failed(12.0, MID, Join(TOPIC, ref(200), None, 0))  # others: not again
    assert len(host.routed) == 2
    new, _ = make(150, root=True, config=CONFIG)
    new.deliver(11.1, MID, handover, 2)
    new.publish(11.2, TOPIC, {}, msg_id="bb")
    new.deliver(11.3, MID, handover, 2)  # the first one's ack was lost
    assert new.publishing.retention.numbered(TOPIC, "aa") == 1
    assert new.publishing.retention.numbered(TOPIC, "bb") == 2


def test_a_forwarder_that_became_responsible_takes_the_root_role() -> None:
    app, host = make(150, config=CONFIG)
    app.forward(0.0, MID, join(101), ref(200))
    attach(app, host, parent=200, path=(200,))
    host.responsible_for.add(MID)
    app.update(5.0, NodeRef(200, "n200"), False)
    assert host.sent[0] == ("n200", Leave(TOPIC, ref(150)))
    assert host.traces == [("tree", {"topic": TOPIC, "parent": None, "role": "root"})]
    # It never learnt a position as a forwarder: it starts from its counter, vouching
    # for nothing sent to 101 yet.
    assert ("n101", Heartbeat(TOPIC, ref(150), (150,), 1, None, 0, True)) in host.sent


def test_expiry_ends_a_subscription_with_a_notice_and_renew_postpones_it() -> None:
    app, host = make(200, root=True, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1, expiry=5)
    app.renew(4.0, 1, 3.0)
    run_ticks(app, 6.9)
    assert host.notices == [("subscribed", {"topic": TOPIC, "sub": 1})]
    run_ticks(app, 7.0)
    assert host.notices[1:] == [("expired", {"sub": 1})]
    assert ("unsubscribe", {"topic": TOPIC, "sub": 1, "reason": "expired"}) in host.traces
    assert app.status() == {}


def test_a_rejoining_node_keeps_telling_its_children_its_last_path() -> None:
    app, host = make(101, config=ScribeConfig(missed_heartbeats=10))
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, parent=200, path=(300, 200))
    app.forward(0.0, MID, join(50), ref(200))
    run_ticks(app, 4.0)
    assert host.trace_kinds()[-1] == "repair"
    host.clear()
    run_ticks(app, 5.0)
    assert host.sent_of(Heartbeat) == [("n50", Heartbeat(TOPIC, ref(101), (300, 200, 101), 1))]


def test_a_parent_that_never_tells_a_path_is_taken_for_a_loop() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, parent=200, path=())
    for t in range(1, 11):
        app.on_direct(float(t), "n200", Heartbeat(TOPIC, ref(200), (), 1))
        run_ticks(app, float(t))
    assert "repair" not in host.trace_kinds()
    app.on_direct(11.0, "n200", Heartbeat(TOPIC, ref(200), (), 1))
    run_ticks(app, 11.0)
    assert host.trace_kinds()[-1] == "repair"


def test_a_child_whose_newer_digest_was_lost_sends_it_again() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "a = 1", 1)
    attach(app, host, parent=200, path=(200,))
    app.subscribe(0.5, TOPIC, "b = 1", 2)  # digest version 2 goes out (and is lost)
    host.clear()
    app.on_direct(1.0, "n200", Heartbeat(TOPIC, ref(200), (200,), 1))
    [(dest, update)] = host.sent_of(DigestUpdate)
    assert dest == "n200" and update.version == 3
    assert Digest.from_wire(update.digest, 64).plain.filters == {"a = 1", "b = 1"}

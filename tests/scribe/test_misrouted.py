"""The root role goes only with ownership the node itself knows, exact effects: what Chord
delivers on the last hop's word waits or is routed on; a root recovering a topic whose
key moved away sends what it held on; a new root that lost every copy of the last
events gets them back from the members that handled them."""

from __future__ import annotations

from dataclasses import replace

from scribe import ScribeConfig
from scribe.messages import Fill, JoinAck, Pull
from scribe.misrouted import MAX_PARKED
from scribe.publish_messages import Publish, PublishAck, ReplicaSync, Restore
from scribe.wire_records import EventBody
from tests.scribe.helpers import MID, TOPIC, join, make, ref

CONFIG = ScribeConfig(replicas=0, heartbeat_interval=1.0, takeover_wait=5.0)


def publish(msg_id: str, reliable: bool = True) -> Publish:
    return Publish(EventBody(TOPIC, msg_id, None, {"x": 1}, b"", "01f4", 1.0), ref(500),
                   reliable)


def test_a_join_delivered_to_a_node_that_does_not_own_the_key_waits_for_ownership() -> None:
    app, host = make(200, config=CONFIG)
    app.deliver(1.0, MID, join(101), 3)
    assert host.sent_of(JoinAck) == [] and TOPIC not in app.state.numbering
    # Its predecessor notifies it: the key is its own now, and the JOIN is taken.
    host.responsible_for.add(MID)
    app.update(1.5, ref(150), True)
    assert [dest for dest, _ in host.sent_of(JoinAck)] == ["n101"]
    assert TOPIC in app.state.numbering and app.state.trees[TOPIC].is_root


def test_a_publish_delivered_to_a_node_that_does_not_own_the_key_is_routed_on() -> None:
    app, host = make(200, config=CONFIG)
    app.deliver(1.0, MID, publish("aa"), 3)
    assert host.sent_of(PublishAck) == [] and app.state.seq == {}
    app.on_timer(1.5)  # not a heartbeat interval yet
    assert host.routed == []
    app.on_timer(2.0)
    assert host.routed == [(MID, publish("aa"))]
    assert app.state.seq == {}  # never numbered here


def test_an_unreliable_publish_given_up_for_room_is_traced_as_dropped() -> None:
    app, host = make(200, config=CONFIG)
    app.deliver(1.0, MID, publish("f1", reliable=False), 3)
    for n in range(MAX_PARKED):
        app.deliver(1.0, MID, join(1000 + n), 3)
    assert ("drop", {"topic": TOPIC, "msg_id": "f1", "reason": "overload"}) in host.traces
    assert len(app.misrouted) == MAX_PARKED


def test_a_recovering_root_whose_key_moved_away_routes_the_held_publishes_on() -> None:
    app, host = make(200, root=True, config=CONFIG)
    host.pred = ref(150)
    app.update(10.0, ref(150), True)  # its range changed: a blind takeover is possible
    app.deliver(10.1, MID, publish("aa"), 1)
    assert TOPIC in app.state.recovering and host.sent_of(PublishAck) == []
    # A node joins in front of the key before the wait ends: the key is not ours now.
    host.responsible_for.clear()
    app.update(11.0, ref(190), True)
    assert TOPIC not in app.state.recovering and TOPIC not in app.state.numbering
    assert (MID, publish("aa")) in host.routed
    app.on_timer(20.0)
    assert host.sent_of(PublishAck) == []  # numbered by the key's owner, not here


def test_a_blind_new_root_restores_the_last_events_from_a_member_that_handled_them(
        ) -> None:
    app, host = make(200, root=True, config=CONFIG)
    host.pred = ref(150)
    app.update(10.0, ref(150), True)
    app.deliver(10.1, MID, publish("1a7e"), 1)  # held: the root is recovering
    # The former root and its replicas are gone; member 102 handled up to 52 and asks
    # to be caught up: the root holds none of those events, so it asks 102 for them.
    app.deliver(11.0, MID, Pull(TOPIC, ref(102), 52, join(102, "").digest), 1)
    assert host.sent_of(Restore) == [("n102", Restore(TOPIC, ref(200), 0))]
    app.deliver(12.0, MID, Pull(TOPIC, ref(102), 52, join(102, "").digest), 1)
    assert len(host.sent_of(Restore)) == 1  # asked once per member
    kept = tuple(EventBody(TOPIC, f"d{seq}", seq, {"x": 1}, b"", "0001", 9.0)
                 for seq in (50, 51, 52))
    app.on_direct(12.5, "n102", ReplicaSync(TOPIC, 52, ref(102), kept))
    # Member 103 had handled only up to 50: its catch-up brings 51 and 52.
    app.deliver(13.0, MID, Pull(TOPIC, ref(103), 50, join(103, "").digest), 1)
    app.on_timer(15.9)
    fills = {dest: msg for dest, msg in host.sent_of(Fill)}
    assert [b.seq for b in fills["n103"].events] == [51, 52]
    assert fills["n103"].through == 52 and fills["n102"].events == ()
    assert [m.seq for _, m in host.sent_of(PublishAck)] == [53]


def test_a_member_answers_a_restore_with_its_whole_log_a_message_at_a_time() -> None:
    from scribe.messages import Event
    from scribe.wire_records import MAX_BATCH

    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    app.on_direct(0.1, "n200", JoinAck(TOPIC, ref(200), (300, 200), 0))
    app.on_direct(0.2, "n300", Fill(TOPIC, ref(300), 0, 0, (), routed=True))
    app.on_direct(0.2, "n200", Fill(TOPIC, ref(200), 0, 0, ()))
    total = MAX_BATCH + 10
    for seq in range(1, total + 1):
        body = EventBody(TOPIC, format(seq, "x"), seq, {"x": 1}, b"", "0001", 1.0)
        app.on_direct(1.0, "n200", Event(body, 2, ref(200), True, (), seq - 1))
    host.clear()
    app.on_direct(2.0, "n300", Restore(TOPIC, ref(300), 5))
    syncs = [msg for _, msg in host.sent_of(ReplicaSync)]
    assert [len(m.events) for m in syncs] == [MAX_BATCH, total - 5 - MAX_BATCH]
    assert [b.seq for m in syncs for b in m.events] == list(range(6, total + 1))
    assert {m.seq for m in syncs} == {total}


def test_a_root_behind_a_members_position_asks_it_for_the_events_it_lacks() -> None:
    app, host = make(200, root=True, config=CONFIG)
    app.deliver(0.1, MID, replace(join(101), through=None), 1)
    app.deliver(1.0, MID, publish("aa", reliable=False), 1)  # seq 1: not recovering
    host.clear()
    app.deliver(2.0, MID, Pull(TOPIC, ref(102), 7, join(102, "").digest), 1)
    assert host.sent_of(Restore) == [("n102", Restore(TOPIC, ref(200), 1))]
    assert app.state.seq[TOPIC] == 7

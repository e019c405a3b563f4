"""Gap repair and in-order handling, exact effects: held copies, pulls and fills, catching
up after re-parenting, a new root sending on what its replicas held."""

from __future__ import annotations

from dataclasses import replace

from chord.kbr import NodeRef
from matching import Index
from scribe import ScribeConfig
from scribe.messages import Event, Fill, Heartbeat, JoinAck, Pull
from scribe.publish_messages import Publish, PublishAck, ReplicaSync, Replicate, Restore
from scribe.wire_records import EventBody
from tests.scribe.helpers import MID, TOPIC, join, make, ref

CONFIG = ScribeConfig(heartbeat_interval=1.0, parent_timeout=3.5)


def ev(seq: int, prev: int | None, x: int = 9, sender: int = 200, hop: int = 2) -> Event:
    return Event(EventBody(TOPIC, f"{seq:02x}", seq, {"x": x}, b"p", "0001", 0.5), hop,
                 ref(sender), True, (), prev)


def caught_up(app, at: int, parent: int, now: float = 0.2) -> None:
    """The answers to the catch-up after a join, from the root and the new parent:
    nothing missed up to ``at``."""
    app.on_direct(now, "n300", Fill(TOPIC, ref(300), at, at, (), routed=True))
    app.on_direct(now, f"n{parent}", Fill(TOPIC, ref(parent), at, at, ()))


def member(through: int | None = 3):
    """Node 101, subscribed to everything, child of 200 (path 300, 200), at ``through``."""
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    app.on_direct(0.1, "n200", JoinAck(TOPIC, ref(200), (300, 200), through))
    if through is not None:
        caught_up(app, through, parent=200)
    host.clear()
    return app, host


def delivered_seqs(host) -> list[int]:
    return [event.seq for _, event in host.delivered]


def test_a_copy_after_a_lost_one_is_held_and_the_gap_pulled_then_filled_in_order() -> None:
    app, host = member(through=3)
    app.on_direct(1.0, "n200", ev(4, prev=3))
    app.on_direct(1.1, "n200", ev(6, prev=5))  # 5 was sent, and lost
    assert delivered_seqs(host) == [4]
    assert host.sent_of(Pull) == [("n200", Pull(TOPIC, ref(101), 4))]
    assert ("repair", {"topic": TOPIC, "msg_id": None, "from": "00c8", "kind": "gap"}) \
        in host.traces
    app.on_direct(1.2, "n200", ev(7, prev=6))
    assert len(host.sent_of(Pull)) == 1  # one pull per heartbeat interval
    fill = Fill(TOPIC, ref(200), 4, 7, (ev(5, None).body,))
    app.on_direct(1.3, "n200", fill)
    assert delivered_seqs(host) == [4, 5, 6, 7]
    app.on_direct(1.4, "n200", ev(6, prev=5))  # a late copy is a duplicate
    assert delivered_seqs(host) == [4, 5, 6, 7]
    assert host.traces[-1][1]["dup"] is True


def test_an_unanswered_pull_is_sent_again_on_the_tick() -> None:
    app, host = member(through=3)
    app.on_direct(1.0, "n200", ev(6, prev=5))
    app.on_timer(1.5)  # the tick: less than an interval since the pull
    assert len(host.sent_of(Pull)) == 1
    app.on_timer(2.5)
    assert [m.after for _, m in host.sent_of(Pull)] == [3, 3]


def test_a_heartbeat_vouching_beyond_this_node_reveals_a_lost_last_event() -> None:
    app, host = member(through=3)
    app.on_direct(1.0, "n200", Heartbeat(TOPIC, ref(200), (300, 200), 0, prev=4, through=9))
    assert host.sent_of(Pull) == [("n200", Pull(TOPIC, ref(101), 3))]
    host.clear()
    # Nothing sent since what it handled: it is simply at the parent's position now.
    app2, host2 = member(through=3)
    app2.on_direct(1.0, "n200", Heartbeat(TOPIC, ref(200), (300, 200), 0, prev=3, through=9))
    assert host2.sent_of(Pull) == []
    app2.on_direct(1.1, "n200", ev(10, prev=9))
    assert delivered_seqs(host2) == [10]


def test_a_fresh_member_starts_where_its_parent_is() -> None:
    app, host = member(through=None)
    app.on_direct(1.0, "n200", Heartbeat(TOPIC, ref(200), (300, 200), 0, prev=None, through=7))
    app.on_direct(1.1, "n200", ev(9, prev=8))
    assert host.sent_of(Pull) == [("n200", Pull(TOPIC, ref(101), 7))]
    app.on_direct(1.2, "n200", Fill(TOPIC, ref(200), 7, 9, ()))  # 8 was not for it
    assert delivered_seqs(host) == [9]


def test_a_member_re_parented_behind_its_new_parent_catches_up() -> None:
    app, host = member(through=3)
    app.on_direct(2.0, "n250", JoinAck(TOPIC, ref(250), (300, 250), 6))
    assert host.sent_of(Pull) == []  # still attached to 200: the ack is refused
    app.on_direct(2.0, "n200", ev(4, prev=3))
    assert delivered_seqs(host) == [4]
    # Its parent goes silent; it re-joins and 250 adopts it at position 6.
    for now in (3.0, 4.0, 5.0, 6.0):
        app.on_timer(now)
    host.clear()
    app.on_direct(6.1, "n250", JoinAck(TOPIC, ref(250), (300, 250), 6))
    app.on_direct(6.3, "n250", ev(7, prev=6, sender=250))
    app.on_timer(7.0)
    assert delivered_seqs(host) == [] and host.routed == []  # held: the digest travels up
    app.on_timer(8.1)
    assert host.routed == []  # not settled yet: the new path may not hold its digest
    app.on_direct(8.5, "n250", Heartbeat(TOPIC, ref(250), (300, 250), 99, None, 6, True))
    app.on_timer(9.1)
    [(key, pull)] = host.routed
    assert key == MID and pull.after == 4 and pull.digest is not None  # to the root
    assert host.sent_of(Pull) == [("n250", Pull(TOPIC, ref(101), 4))]  # and the parent
    assert ("repair", {"topic": TOPIC, "msg_id": None, "from": f"{MID:04x}",
                       "kind": "gap"}) in host.traces
    # The parent's log has 5, which the root (that lost its replicas) no longer has.
    app.on_direct(9.2, "n250", Fill(TOPIC, ref(250), 4, 6, (ev(5, None).body,)))
    assert delivered_seqs(host) == []  # the catch-up needs the root's answer
    app.on_direct(9.3, "n300", Fill(TOPIC, ref(300), 4, 6, (ev(6, None).body,), routed=True))
    assert delivered_seqs(host) == [5, 6, 7]


def test_a_member_taking_the_root_role_mid_catch_up_sends_down_what_it_gathered() -> None:
    app, host = member(through=0)
    for now in (3.0, 4.0, 5.0, 6.0):
        app.on_timer(now)  # parent 200 silent: re-join
    app.on_direct(6.1, "n250", JoinAck(TOPIC, ref(250), (300, 250), 1))
    # The new parent's answer to the catch-up (from 0) comes; the root's has not.
    app.on_direct(6.5, "n250", Fill(TOPIC, ref(250), 0, 1, (ev(1, None).body,)))
    assert delivered_seqs(host) == []
    # The ring makes this node the key's owner (its side of a split, say) meanwhile.
    host.responsible_for.add(MID)
    host.clear()
    app.update(7.0, ref(999), True)
    assert delivered_seqs(host) == [1]  # not dropped with the catch-up
    app.publish(7.5, TOPIC, {}, msg_id="aa", reliable=False)
    assert delivered_seqs(host) == [1, 2]  # numbered after it


def test_a_catch_up_goes_on_without_a_parent_that_does_not_answer() -> None:
    app, host = member(through=3)
    for now in (3.0, 4.0, 5.0, 6.0):
        app.on_timer(now)  # parent 200 silent: re-join
    app.on_direct(6.1, "n250", JoinAck(TOPIC, ref(250), (300, 250), 3))
    host.clear()
    unsettled = Heartbeat(TOPIC, ref(250), (300, 250), 99, None, 3, False)
    for now in (7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0):
        app.on_direct(now - 0.5, "n250", unsettled)  # alive, but the path is not settled
        app.on_timer(now)
        if now < 17.0:
            assert not [m for _, m in host.routed if isinstance(m, Pull)], now
    # Never told it is settled: it asks after CATCH_UP_PATIENCE intervals all the same.
    assert [m.after for _, m in host.routed if isinstance(m, Pull)] == [3]
    app.on_direct(17.3, "n300", Fill(TOPIC, ref(300), 3, 4, (ev(4, None).body,), routed=True))
    app.on_timer(18.0)
    assert delivered_seqs(host) == []  # the parent may still answer
    app.on_timer(19.5)  # two heartbeat intervals after the root's answer
    assert delivered_seqs(host) == [4]


def test_the_root_answers_a_routed_pull_with_what_the_pullers_digest_wants() -> None:
    app, host = make(200, root=True, config=ScribeConfig(replicas=0))
    for i, x in enumerate((9, 1, 7, 2)):
        app.publish(1.0 + i, TOPIC, {"x": x}, msg_id=f"{i:02x}")
    host.clear()
    app.deliver(5.0, MID, Pull(TOPIC, ref(101), 1, join(101, "x > 5").digest), 3)
    [(dest, fill)] = host.sent_of(Fill)
    assert dest == "n101" and fill.routed
    assert (fill.after, fill.through, [b.seq for b in fill.events]) == (1, 4, [3])


def parent_with_child(through: int = 0):
    """Forwarder 200 (child of 300) at ``through``, with child 101 wanting x > 5."""
    app, host = make(200, config=CONFIG)
    app.forward(0.0, MID, join(101, "x > 5"), ref(300))
    app.on_direct(0.1, "n300", JoinAck(TOPIC, ref(300), (300,), through))
    caught_up(app, through, parent=300)
    host.clear()
    return app, host


def test_a_parent_fills_a_pull_with_what_the_child_needs_and_chains_on_from_there() -> None:
    app, host = parent_with_child(through=0)
    for seq, x in ((1, 9), (2, 1), (3, 7)):
        app.on_direct(1.0, "n300", ev(seq, prev=seq - 1, x=x, sender=300, hop=1))
    assert [(m.body.seq, m.prev) for _, m in host.sent_of(Event)] == [(1, 0), (3, 1)]
    host.clear()
    app.on_direct(1.5, "n101", Pull(TOPIC, ref(101), 0))
    [(dest, fill)] = host.sent_of(Fill)
    assert dest == "n101"
    assert (fill.after, fill.through, [b.seq for b in fill.events]) == (0, 3, [1, 3])
    app.on_direct(1.6, "n300", ev(4, prev=3, x=8, sender=300, hop=1))
    assert [(m.body.seq, m.prev) for _, m in host.sent_of(Event)] == [(4, 3)]


def test_a_parent_whose_log_starts_later_asks_upward_before_answering() -> None:
    app, host = parent_with_child(through=5)  # joined at 5: knows nothing older
    app.on_direct(1.0, "n101", Pull(TOPIC, ref(101), 2))
    assert host.sent_of(Fill) == []
    assert host.sent_of(Pull) == [("n300", Pull(TOPIC, ref(200), 2))]
    older = (ev(3, None, x=9).body, ev(4, None, x=1).body)
    app.on_direct(1.1, "n300", Fill(TOPIC, ref(300), 2, 5, older))
    [(_, fill)] = host.sent_of(Fill)
    assert (fill.after, fill.through, [b.seq for b in fill.events]) == (2, 5, [3])
    assert host.delivered == []  # older than its own position: not delivered here again


def test_a_child_behind_a_catching_up_parent_is_filled_from_the_root_not_given_up_on() -> None:
    # Forwarder 200 joins 300's tree with no position of its own: it starts at 300's (3)
    # and catches up from there. Its child 101 had handled up to 1 (lost its old parent).
    app, host = make(200, config=CONFIG)
    app.forward(0.0, MID, join(101, ""), ref(300))
    app.on_direct(0.1, "n300", JoinAck(TOPIC, ref(300), (300,), 3))
    app.on_direct(0.5, "n101", Pull(TOPIC, ref(101), 1))
    newer = (ev(4, None).body, ev(5, None).body)
    app.on_direct(2.5, "n300", Fill(TOPIC, ref(300), 3, 5, newer, routed=True))
    app.on_direct(2.6, "n300", Fill(TOPIC, ref(300), 3, 5, newer))
    # The catch-up reached back to 3 only: 2 and 3 are not gone (the root keeps them).
    assert [fill.gone_before for _, fill in host.sent_of(Fill)] == []
    host.clear()
    app.on_timer(3.0)
    assert host.sent_of(Pull) == [("n300", Pull(TOPIC, ref(200), 1))]
    older = (ev(2, None).body, ev(3, None).body)
    app.on_direct(3.1, "n300", Fill(TOPIC, ref(300), 1, 5, (*older, *newer)))
    [(dest, fill)] = host.sent_of(Fill)
    assert dest == "n101" and fill.gone_before == 0
    assert (fill.after, fill.through, [b.seq for b in fill.events]) == (1, 5, [2, 3, 4, 5])


def test_a_pull_from_a_node_that_is_not_a_child_is_disowned() -> None:
    app, host = parent_with_child()
    app.on_direct(1.0, "n999", Pull(TOPIC, ref(999), 0))
    assert [type(m).__name__ for _, m in host.sent] == ["Disown"]


def test_the_root_fills_from_its_retention_and_says_what_is_gone() -> None:
    app, host = make(200, root=True, config=ScribeConfig(retain_count=2, replicas=0,
                                                         retain_min_age=0))
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.0, MID, join(101, ""), 1)
    for i in range(4):
        app.publish(1.0 + i, TOPIC, {"x": i}, msg_id=f"{i:02x}")
    host.clear()
    app.on_direct(5.0, "n101", Pull(TOPIC, ref(101), 1))
    [(_, fill)] = host.sent_of(Fill)
    assert ([b.seq for b in fill.events], fill.through, fill.gone_before) == ([3, 4], 4, 3)


def test_a_burst_stays_whole_past_the_count_while_young() -> None:
    """A burst numbered at once (the publishes a root held through a recovery) is not cut
    to retain_count before retain_min_age: a pull sent before it gets all of it, not its
    head declared gone while the copies are still on their way down the tree."""
    app, host = make(200, root=True, config=ScribeConfig(retain_count=2, replicas=0,
                                                         retain_min_age=3.0))
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.0, MID, join(101, ""), 1)
    for i in range(4):
        app.publish(1.0, TOPIC, {"x": i}, msg_id=f"{i:02x}")
    host.clear()
    app.on_direct(2.0, "n101", Pull(TOPIC, ref(101), 0))
    [(_, fill)] = host.sent_of(Fill)
    assert ([b.seq for b in fill.events], fill.through, fill.gone_before) == ([1, 2, 3, 4], 4, 0)
    app.on_timer(4.5)  # older than retain_min_age: back to the count at the tick
    host.clear()
    app.on_direct(4.6, "n101", Pull(TOPIC, ref(101), 0))
    [(_, fill)] = host.sent_of(Fill)
    assert ([b.seq for b in fill.events], fill.through, fill.gone_before) == ([3, 4], 4, 3)


def test_a_new_root_sends_on_what_its_replica_copies_hold_beyond_its_own_position() -> None:
    app, host = make(400, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    app.on_direct(0.1, "n200", JoinAck(TOPIC, ref(200), (200,), 0))
    caught_up(app, 0, parent=200)
    app.on_direct(0.2, "n200", ev(1, prev=0, hop=1))
    for seq in (1, 2, 3):  # the old root copied 2 and 3 here, then failed
        app.on_direct(0.3, "n200", Replicate(ev(seq, None).body, ref(200)))
    host.clear()
    host.responsible_for.add(MID)
    app.update(5.0, NodeRef(200, "n200"), False)
    assert delivered_seqs(host) == [2, 3]
    app.deliver(5.1, MID, Publish(EventBody(TOPIC, "ff", None, {}, b"", "0001", 5.0),
                                  ref(500)), 1)
    assert delivered_seqs(host) == [2, 3, 4]  # numbering goes on, never restarts


def test_a_join_carrying_a_higher_position_moves_a_counter_that_was_lost() -> None:
    config = ScribeConfig(replicas=0)
    app, host = make(200, root=True, config=config)
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.1, MID, replace(join(101), through=40), 1)
    # The joiner handled numbers this root never gave: the root gathers them from it (its
    # own position goes in the ack: its tree never had them), holding publishes meanwhile.
    assert host.sent_of(JoinAck)[0][1].through == 0
    assert host.sent_of(Restore) == [("n101", Restore(TOPIC, ref(200), 0))]
    app.publish(1.0, TOPIC, {}, msg_id="aa")
    assert delivered_seqs(host) == []
    app.on_direct(1.5, "n101", ReplicaSync(TOPIC, 40, ref(101), (ev(39, None).body,
                                                                 ev(40, None).body)))
    app.on_timer(0.1 + 2 * config.replica_timeout)
    # What it gathered goes down its tree first; numbering goes on above it.
    assert delivered_seqs(host) == [39, 40, 41]


def test_a_root_taking_the_key_over_blind_waits_for_members_positions_before_numbering(
        ) -> None:
    app, host = make(200, root=True, config=ScribeConfig(replicas=0, takeover_wait=5.0))
    app.subscribe(0.0, TOPIC, "", 1)
    host.pred = ref(150)  # the predecessor (the old root) failed: 150 is the new one
    app.update(10.0, ref(150), True)
    late = Publish(EventBody(TOPIC, "aa", None, {}, b"", "0001", 10.0), ref(500))
    app.deliver(10.1, MID, late, 1)
    app.deliver(11.0, MID, late, 1)  # retried: still one event waiting
    assert host.sent_of(PublishAck) == [] and delivered_seqs(host) == []
    # A member of the old tree re-joins, and another asks to be caught up: they had
    # handled up to 40 and 52.
    app.deliver(12.0, MID, replace(join(101), through=40), 1)
    app.deliver(13.0, MID, Pull(TOPIC, ref(102), 52, join(102).digest), 1)
    app.on_timer(14.9)
    assert host.sent_of(PublishAck) == []
    app.on_timer(15.9)  # the next tick, past the wait
    assert [m.seq for _, m in host.sent_of(PublishAck)] == [53]
    assert delivered_seqs(host) == [53]


def test_a_long_time_owner_numbers_a_new_topic_at_once() -> None:
    app, host = make(200, root=True, config=ScribeConfig(replicas=0, takeover_wait=5.0))
    host.pred = ref(150)
    app.update(10.0, ref(150), True)
    app.deliver(15.0, MID, Publish(EventBody(TOPIC, "aa", None, {}, b"", "0001", 15.0),
                                   ref(500)), 1)
    assert [m.seq for _, m in host.sent_of(PublishAck)] == [1]


def test_a_member_that_missed_its_start_and_first_copy_asks_where_to_start() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    # Adopted by a forwarder that had no position itself yet; the heartbeat telling the
    # start (0) and the copy of 1 are lost: the copy of 2 vouches for 1.
    app.on_direct(0.1, "n200", JoinAck(TOPIC, ref(200), (300, 200), None))
    host.clear()
    app.on_direct(1.0, "n200", ev(2, prev=1))
    assert delivered_seqs(host) == []
    assert host.sent_of(Pull) == [("n200", Pull(TOPIC, ref(101), 0, fresh=True))]
    app.on_direct(1.1, "n200", Fill(TOPIC, ref(200), 0, 2, (ev(1, None).body,
                                                           ev(2, None).body)))
    assert delivered_seqs(host) == [1, 2]


def test_a_parent_answers_a_fresh_pull_from_where_the_child_was_to_start() -> None:
    app, host = make(200, root=True, config=ScribeConfig(replicas=0))
    app.publish(0.5, TOPIC, {}, msg_id="a0")  # numbered before 101 joined: not its
    app.deliver(1.0, MID, join(101, ""), 1)
    assert host.sent_of(JoinAck)[0][1].through == 1
    for msg_id in ("a1", "a2"):
        app.publish(2.0, TOPIC, {}, msg_id=msg_id)
    host.clear()
    app.on_direct(3.0, "n101", Pull(TOPIC, ref(101), 0, fresh=True))
    [(dest, fill)] = host.sent_of(Fill)
    assert (dest, fill.after, fill.through) == ("n101", 1, 3)
    assert [b.seq for b in fill.events] == [2, 3]


def test_copies_handled_in_a_row_are_matched_in_one_call(calls) -> None:
    """A run of held copies, then a fill with the copies it covers: each run's local
    matches come from one ``match_many`` call, and every subscription gets what its
    filter says, in order."""
    batches = calls(Index, "match_many")
    app, host = member(through=3)
    app.subscribe(0.2, TOPIC, "x > 5", 2)
    app.on_direct(1.0, "n200", ev(5, prev=4, x=1))  # 4 is late: 5 waits
    app.on_direct(1.1, "n200", ev(4, prev=3, x=9))
    assert [len(events) for events, in batches] == [2]
    app.on_direct(1.2, "n200", ev(7, prev=6, x=1))  # 6 was lost
    app.on_direct(1.3, "n200", ev(8, prev=7, x=9))
    app.on_direct(1.4, "n200", Fill(TOPIC, ref(200), 5, 8, (ev(6, None, x=7).body,)))
    assert [len(events) for events, in batches] == [2, 3]
    assert [(sub, event.seq) for sub, event in host.delivered] == [
        (1, 4), (2, 4), (1, 5), (1, 6), (2, 6), (1, 7), (1, 8), (2, 8)]

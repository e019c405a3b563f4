"""A partition heals with a root on each side that numbered the same topic: the root that
keeps the key moves every event either side numbered since the fork to new numbers
after both counters (scribe.merge). Exact: inputs in, effects out."""

from __future__ import annotations

from dataclasses import replace

from scribe import ScribeConfig
from scribe.durability import AppendEvents, MoveEvents
from scribe.merge import plan_merge
from scribe.messages import Event, RootHandover
from scribe.stream import Retained
from scribe.wire_records import EventBody
from tests.scribe.helpers import MID, TOPIC, attach, body, join, make, ref

CONFIG = ScribeConfig(heartbeat_interval=1.0, parent_timeout=3.5, missed_heartbeats=2)


def ev(msg_id: str, seq: int, ts: float) -> EventBody:
    return replace(body(msg_id, seq), ts=ts)


def log_of(*events: EventBody, complete_from: int = 1) -> Retained:
    log = Retained(complete_from=complete_from)
    log.merge(0.0, events)
    return log


# -- the plan ------------------------------------------------------------------------------------


def test_a_log_that_only_continues_this_one_is_kept_at_its_numbers() -> None:
    mine = log_of(ev("aa", 1, 1.0), ev("bb", 2, 2.0))
    theirs = (ev("aa", 1, 1.0), ev("bb", 2, 2.0), ev("cc", 3, 3.0))
    plan = plan_merge(mine, 2, theirs, 3)
    assert plan.fork is None and plan.moving == () and plan.base == 3
    assert [b.msg_id for b in plan.fill] == ["cc"]


def test_events_where_this_log_has_a_hole_fill_it_without_a_fork() -> None:
    mine = log_of(ev("aa", 1, 1.0), ev("cc", 3, 3.0))  # lost bb (not synced, say)
    plan = plan_merge(mine, 3, (ev("bb", 2, 2.0),), 3)
    assert plan.fork is None and [(b.msg_id, b.seq) for b in plan.fill] == [("bb", 2)]


def test_a_fork_moves_both_sides_events_after_both_counters_in_publish_order() -> None:
    mine = log_of(ev("aa", 1, 1.0), ev("d1", 2, 2.0), ev("d2", 3, 4.0), ev("d3", 4, 6.0))
    theirs = (ev("aa", 1, 1.0), ev("bb", 2, 3.0), ev("cc", 3, 5.0))
    plan = plan_merge(mine, 4, theirs, 3)
    assert plan.fork == 2 and plan.base == 4
    assert [b.msg_id for b in plan.ours] == ["d1", "d2", "d3"]
    assert [(b.msg_id, b.seq) for b in plan.renumbered()] == [
        ("d1", 5), ("bb", 6), ("d2", 7), ("cc", 8), ("d3", 9)]


def test_the_other_side_ahead_still_moves_after_its_counter() -> None:
    mine = log_of(ev("aa", 1, 1.0), ev("d1", 2, 2.0))
    theirs = tuple(ev(f"b{i}", i, 2.5 + i) for i in range(2, 7))
    plan = plan_merge(mine, 2, (ev("aa", 1, 1.0), *theirs), 6)
    assert plan.fork == 2 and plan.base == 6
    assert [b.seq for b in plan.renumbered()] == list(range(7, 13))


def test_events_the_other_side_also_holds_after_the_fork_stay_where_they_are() -> None:
    # Both sides had cc (replicated just before the split), then each numbered its own.
    mine = log_of(ev("aa", 1, 1.0), ev("cc", 2, 1.5), ev("d1", 3, 2.0))
    theirs = (ev("aa", 1, 1.0), ev("cc", 2, 1.5), ev("bb", 3, 3.0))
    plan = plan_merge(mine, 3, theirs, 3)
    assert plan.fork == 3 and [b.msg_id for b in plan.moving] == ["d1", "bb"]


def test_an_event_both_sides_numbered_differently_shows_the_fork_and_stays() -> None:
    # Published on the other side (b1 at 2 there), retried across the heal: this root
    # numbered it anew (9). Its own a2 at 2 is what the other side never had.
    mine = log_of(ev("aa", 1, 1.0), ev("a2", 2, 2.0), ev("a3", 3, 2.1), ev("b1", 4, 2.5))
    theirs = (ev("aa", 1, 1.0), ev("b1", 2, 2.5), ev("b2", 3, 2.6))
    plan = plan_merge(mine, 4, theirs, 3)
    assert plan.fork == 2
    assert [b.msg_id for b in plan.moving] == ["a2", "a3", "b2"]
    assert [b.seq for b in plan.renumbered()] == [5, 6, 7]


def test_a_later_part_of_the_handover_moves_only_what_the_first_did_not() -> None:
    mine = log_of(ev("aa", 1, 1.0), ev("a2", 2, 2.0), ev("a3", 3, 2.1), ev("a4", 4, 2.2))
    first = plan_merge(mine, 4, (ev("b3", 3, 3.0), ev("b4", 4, 3.1)), 4)
    assert first.fork == 3 and [b.msg_id for b in first.ours] == ["a3", "a4"]
    # (as Retention.merge does:) the moved events leave their old numbers
    for old in first.ours:
        mine.remove(old.seq or 0)
    mine.merge(0.0, first.renumbered())
    older = plan_merge(mine, 8, (ev("aa", 1, 1.0), ev("b2", 2, 2.9)), 4, moved_below=3)
    assert older.fork == 2 and [b.msg_id for b in older.ours] == ["a2"]
    assert [b.seq for b in older.renumbered()] == [9, 10]


def test_a_clash_of_events_both_held_already_moves_nothing() -> None:
    # b1 came first at 2 on the other side; this root holds it at 3, after its own a2,
    # and an earlier part of the handover moved what it had from 2 on (moved_below=2).
    mine = log_of(ev("aa", 1, 1.0), ev("a2", 2, 2.0), ev("b1", 3, 2.5))
    plan = plan_merge(mine, 3, (ev("b1", 2, 2.5),), 2, moved_below=2)
    assert plan.fork is None and plan.moving == () and plan.ours == () and plan.fill == ()
    assert plan.base == 3


def test_history_this_root_trimmed_is_not_taken_for_a_fork() -> None:
    mine = log_of(ev("d1", 5, 2.0), complete_from=5)
    plan = plan_merge(mine, 5, (ev("0d", 3, 0.5), ev("d1", 5, 2.0)), 5)
    assert plan.fork is None and plan.fill == ()


def test_an_event_lives_at_one_number_the_highest() -> None:
    log = log_of(ev("aa", 1, 1.0), ev("bb", 2, 2.0))
    log.add(0.0, ev("aa", 5, 1.0))
    assert list(log.events) == [2, 5] and log.by_msg == {"bb": 2, "aa": 5}
    log.add(0.0, ev("aa", 3, 1.0))  # an older number of it: ignored
    assert list(log.events) == [2, 5] and log.payload_bytes == 2


# -- at the root and at a member -------------------------------------------------------------------


def root_that_numbered(durable: bool = False) -> tuple[object, object]:
    """Node 150 owns the key: a subscription, a child (101), events aa, d1, d2."""
    app, host = make(150, root=True, config=replace(CONFIG, durable=durable))
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.0, MID, join(101, ""), 1)
    for i, msg_id in enumerate(("aa", "d1", "d2")):
        app.publish(0.5 + i, TOPIC, {}, msg_id=msg_id, reliable=False)
    if durable:
        app.on_synced(3.0, len(host.persisted))
    return app, host


def test_the_root_delivers_the_other_sides_events_once_and_passes_every_moved_one_down() -> None:
    app, host = root_that_numbered()
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("aa", 1), ("d1", 2), ("d2", 3)]
    host.clear()
    # Cut off from 150, node 200 owned the key on its side and numbered bb, cc after aa.
    theirs = (body("aa", 1), replace(body("bb", 2), ts=1.7), replace(body("cc", 3), ts=9.0))
    app.deliver(9.0, MID, RootHandover(TOPIC, 3, ref(200), None, 0, theirs), 2)
    # In publish order (xx at 1.5, bb 1.7, d2 2.5, cc 9.0) after both counters (3):
    assert [(dest, e.body.msg_id, e.body.seq) for dest, e in host.sent_copies()] == [
        ("n101", "d1", 4), ("n101", "bb", 5), ("n101", "d2", 6), ("n101", "cc", 7)]
    # ... but the root's own subscription had d1 and yy: it gets only bb and cc.
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("bb", 5), ("cc", 7)]
    assert [f for k, f in host.traces if k == "merge"] == [
        {"topic": TOPIC, "fork": 2, "moved": 4, "ours": 2, "first": 4, "last": 7}]
    host.clear()
    # A retried publish of d1 is answered with its new number; numbering goes on.
    app.publish(9.5, TOPIC, {}, msg_id="dd", reliable=False)
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("dd", 8)]


def test_the_move_reaches_the_store_in_one_operation() -> None:
    app, host = root_that_numbered(durable=True)
    host.persisted.clear()
    theirs = (body("aa", 1), replace(body("bb", 2), ts=9.0))
    app.deliver(9.0, MID, RootHandover(TOPIC, 2, ref(200), None, 0, theirs), 2)
    (move,) = [op for op in host.persisted if isinstance(op, MoveEvents)]
    assert move.moved_from == (2, 3)
    assert [(b.msg_id, b.seq) for b in move.events] == [("d1", 4), ("d2", 5), ("bb", 6)]
    assert not [op for op in host.persisted if isinstance(op, AppendEvents)]


def test_a_member_passes_moved_copies_down_and_delivers_only_the_new_ones() -> None:
    # Node 120 was on the other side: it handled bb (2) and cc (3) under its root there.
    app, host = make(120, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, 150, (150,))
    app.on_direct(0.0, "n130", join(130, ""))  # a child below it
    host.clear()
    app.on_direct(1.0, "n150", Event(body("aa", 1), 1, ref(150), True, ()))
    app.on_direct(1.1, "n150", Event(body("bb", 2), 1, ref(150), True, (), 1, True, 1))
    app.on_direct(1.2, "n150", Event(body("cc", 3), 1, ref(150), True, (), 2, True, 1))
    assert [e.msg_id for _, e in host.delivered] == ["aa", "bb", "cc"]
    host.clear()
    # After the heal, the root moved d1, bb, d2, cc to 4..7.
    for i, msg_id in enumerate(("d1", "bb", "d2", "cc")):
        app.on_direct(20.0 + i, "n150", Event(body(msg_id, 4 + i), 1, ref(150), True, (),
                                             3 + i, True, 1))
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("d1", 4), ("d2", 6)]
    assert [(dest, e.body.seq) for dest, e in host.sent_copies()] == [
        ("n130", 4), ("n130", 5), ("n130", 6), ("n130", 7)]


def test_a_member_that_forgot_recent_events_still_knows_them_from_its_log() -> None:
    # Memory of recent events: 1 s; the log of handled ones keeps them (retention).
    app, host = make(120, config=replace(CONFIG, event_memory=1.0))
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, 150, (150,))
    app.on_direct(1.0, "n150", Event(body("bb", 1), 1, ref(150), True, ()))
    app.on_timer(30.0)  # long after: the memory forgot bb
    host.clear()
    app.on_direct(30.0, "n150", Event(body("d1", 2), 1, ref(150), True, (), 1, True, 1))
    app.on_direct(30.1, "n150", Event(body("bb", 3), 1, ref(150), True, (), 2, True, 1))
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("d1", 2)]

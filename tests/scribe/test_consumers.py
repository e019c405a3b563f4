"""The durable consumer's state machine, input by input (scribe.consumers): ack,
ack_wait expiry, nak with delay, term, max_deliver then dead letter, max_inflight,
members leaving, push round robin, fetch with and without wait."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from scribe.consumer_values import (
    MAX_FETCH,
    MAX_INFLIGHT_LIMIT,
    Action,
    ConsumerConfig,
    ConsumerError,
    DeadLetter,
    Deliver,
    FetchAnswer,
    Member,
    Progress,
    Record,
)
from scribe.consumers import Consumer
from scribe.wire_records import EventBody

A, B = Member("a", 1), Member("b", 7)


def body(seq: int, kind: str = "job") -> EventBody:
    return EventBody("tasks", f"{seq:04x}", seq, {"kind": kind}, b"p", "01", float(seq))


def seqs_of(actions: Iterable[Action]) -> list[tuple[str, int, int]]:
    """(member node, seq, attempt) of every delivery among ``actions``, in order (fetch
    answers included)."""
    found: list[tuple[str, int, int]] = []
    for action in actions:
        if isinstance(action, Deliver):
            found.append((action.member.node, action.body.seq or 0, action.attempt))
        elif isinstance(action, FetchAnswer):
            found += [(action.member.node, body.seq or 0, attempt)
                      for body, attempt in action.events]
    return found


def consumer(**settings: object) -> tuple[Consumer, dict[int, EventBody]]:
    log: dict[int, EventBody] = {}
    config = ConsumerConfig(**settings)  # type: ignore[arg-type]  # tests pass kwargs
    return Consumer("tasks", "workers", config, held_at(log),
                    lambda b: b.attrs.get("kind") == "job"), log


def held_at(log: dict[int, EventBody]) -> Callable[[int, float], EventBody | None]:
    """The root's log as a consumer reads it: None for an event not held, or past its
    ttl (the clock of ``now`` being the events' own here, as in the simulator)."""
    def event(seq: int, now: float) -> EventBody | None:
        found = log.get(seq)
        return None if found is None or found.expired(now) else found
    return event


def publish(c: Consumer, log: dict[int, EventBody], now: float, *seqs: int,
            kind: str = "job") -> list[object]:
    actions: list[object] = []
    for seq in seqs:
        log[seq] = body(seq, kind)
        actions += c.offer(now, log[seq])
    return actions


def records(actions: list[object], ev: str) -> list[dict[str, object]]:
    return [dict(a.fields) for a in actions if isinstance(a, Record) and a.ev == ev]


def test_push_without_ack_delivers_each_event_once_round_robin() -> None:
    c, log = consumer()
    c.attach(0.0, A)
    c.attach(0.0, B)
    assert seqs_of(publish(c, log, 1.0, 1, 2, 3)) == [("a", 1, 1), ("b", 2, 1), ("a", 3, 1)]
    assert c.ack_floor == 3 and c.next_deadline() is None


def test_events_wait_for_a_member_and_the_filter_skips_what_it_does_not_want() -> None:
    c, log = consumer(ack=True)
    publish(c, log, 1.0, 1)
    publish(c, log, 1.0, 2, kind="other")
    publish(c, log, 1.0, 3)
    assert c.stats()["pending"] == 2
    assert seqs_of(c.attach(2.0, A)) == [("a", 1, 1), ("a", 3, 1)]


def test_an_acknowledged_event_is_not_delivered_again() -> None:
    c, log = consumer(ack=True, ack_wait=5.0)
    c.attach(0.0, A)
    publish(c, log, 1.0, 1, 2)
    assert records(c.ack(2.0, A, 1), "ack") == [
        {"topic": "tasks", "durable": "workers", "seq": 1, "msg_id": "0001", "attempt": 1,
         "member": "a"}]
    assert c.ack_floor == 1 and c.next_deadline() == 6.0  # seq 2 still in flight
    with pytest.raises(ConsumerError, match="not in flight"):
        c.ack(2.5, A, 1)  # twice
    assert seqs_of(c.tick(100.0)) == [("a", 2, 2)]  # 2 went back; 1 never does


def test_ack_wait_expiry_delivers_again_with_the_attempt_counted() -> None:
    c, log = consumer(ack=True, ack_wait=5.0)
    c.attach(0.0, A)
    c.attach(0.0, B)
    publish(c, log, 1.0, 1)
    assert c.tick(5.999) == []  # one tick before the deadline: nothing
    actions = c.tick(6.0)
    assert seqs_of(actions) == [("b", 1, 2)]
    assert records(actions, "redeliver") == [
        {"topic": "tasks", "durable": "workers", "seq": 1, "msg_id": "0001", "attempt": 2}]
    assert c.stats()["redelivered"] == 1
    with pytest.raises(ConsumerError):
        c.ack(6.5, A, 1)  # a's late ack: it is b's now


def test_after_max_deliver_attempts_the_event_is_dead_lettered() -> None:
    c, log = consumer(ack=True, ack_wait=1.0, max_deliver=3, dead_letter="tasks.dead")
    c.attach(0.0, A)
    publish(c, log, 0.0, 1)
    assert seqs_of(c.tick(1.0)) == [("a", 1, 2)]
    assert seqs_of(c.tick(2.0)) == [("a", 1, 3)]
    actions = c.tick(3.0)  # the third attempt expired: no fourth
    assert seqs_of(actions) == []
    assert [a for a in actions if isinstance(a, DeadLetter)] == [
        DeadLetter(log[1], 3, "tasks.dead")]
    assert c.ack_floor == 1 and c.stats()["dead_lettered"] == 1 and c.next_deadline() is None


def test_nak_delivers_again_after_its_delay_and_counts_toward_max_deliver() -> None:
    c, log = consumer(ack=True, ack_wait=30.0, max_deliver=2)
    c.attach(0.0, A)
    publish(c, log, 0.0, 1, 2)
    assert seqs_of(c.nak(1.0, A, 1, delay=4.0)) == []  # not before 5.0
    assert c.next_deadline() == 5.0
    assert seqs_of(c.tick(4.999)) == []
    assert seqs_of(c.tick(5.0)) == [("a", 1, 2)]
    actions = c.nak(6.0, A, 1)  # a second nak: max_deliver reached
    assert [type(a).__name__ for a in actions] == ["DeadLetter", "Record"]
    with pytest.raises(ConsumerError, match="delay"):
        c.nak(7.0, A, 2, delay=-1.0)


def test_term_ends_the_event_for_good() -> None:
    c, log = consumer(ack=True, ack_wait=1.0)
    c.attach(0.0, A)
    publish(c, log, 0.0, 1)
    assert records(c.term(0.5, A, 1), "term")[0]["seq"] == 1
    assert c.tick(10.0) == [] and c.ack_floor == 1


def test_max_inflight_bounds_each_members_unacknowledged_events_at_the_edge() -> None:
    c, log = consumer(ack=True, max_inflight=2)
    c.attach(0.0, A)
    assert seqs_of(publish(c, log, 0.0, 1, 2, 3)) == [("a", 1, 1), ("a", 2, 1)]
    assert c.stats()["pending"] == 1  # the third waits: a holds max_inflight
    assert seqs_of(c.ack(1.0, A, 1)) == [("a", 3, 1)]  # one acknowledged: room for one
    with pytest.raises(ConsumerError, match="max_inflight"):
        ConsumerConfig(max_inflight=MAX_INFLIGHT_LIMIT + 1)
    ConsumerConfig(max_inflight=MAX_INFLIGHT_LIMIT)  # the largest allowed


def test_a_member_that_detaches_hands_its_events_to_the_others_at_once() -> None:
    c, log = consumer(ack=True)
    c.attach(0.0, A)
    publish(c, log, 0.0, 1, 2)
    c.attach(0.5, B)
    actions = c.detach(1.0, A)
    assert seqs_of(actions) == [("b", 1, 2), ("b", 2, 2)]
    with pytest.raises(ConsumerError, match="not attached"):
        c.ack(1.5, A, 1)


def test_with_no_member_events_accumulate_and_a_new_member_resumes_in_seq_order() -> None:
    c, log = consumer(ack=True)
    c.attach(0.0, A)
    publish(c, log, 0.0, 1, 2)
    c.ack(0.5, A, 1)
    c.detach(1.0, A)
    publish(c, log, 2.0, 3, 4)
    assert c.stats() == {"pending": 3, "inflight": 0, "members": 0, "redelivered": 0,
                         "dead_lettered": 0, "ack_floor": 1}
    assert seqs_of(c.attach(3.0, B)) == [("b", 2, 2), ("b", 3, 1), ("b", 4, 1)]


def test_fetch_answers_at_once_with_what_is_there_and_never_more_than_asked() -> None:
    c, log = consumer(ack=True, pull=True)
    c.attach(0.0, A)
    publish(c, log, 0.0, 1, 2, 3)  # nothing pushed to a pull consumer
    assert c.stats()["inflight"] == 0
    assert c.fetch(1.0, A, 1, 2, wait=0.0) == [FetchAnswer(A, 1, ((log[1], 1), (log[2], 1)))]
    assert c.fetch(1.0, A, 2, 5, wait=0.0) == [FetchAnswer(A, 2, ((log[3], 1),))]
    assert c.fetch(1.0, A, 3, 5, wait=0.0) == [FetchAnswer(A, 3, ())]  # the seeds' poll
    with pytest.raises(ConsumerError, match="max"):
        c.fetch(1.0, A, 4, MAX_FETCH + 1, wait=0.0)


def test_a_waiting_fetch_is_answered_by_the_first_event_or_by_its_wait_running_out() -> None:
    c, log = consumer(ack=True, pull=True)
    c.attach(0.0, A)
    assert c.fetch(1.0, A, 1, 10, wait=5.0) == []
    assert c.next_deadline() == 6.0
    assert c.fetch(1.0, A, 2, 10, wait=2.0) == []
    assert c.tick(3.0) == [FetchAnswer(A, 2, ())]  # its wait ran out
    assert publish(c, log, 4.0, 1) == [FetchAnswer(A, 1, ((log[1], 1),))]
    assert c.next_deadline() == 4.0 + 30.0  # only the ack wait is left


def test_settings_out_of_range_are_refused_with_what_is_wrong() -> None:
    for settings, message in [({"ack_wait": 0}, "ack_wait"), ({"max_deliver": 0}, "max_deliver"),
                              ({"ack": "yes"}, "booleans"), ({"dead_letter": ""}, "dead_letter"),
                              ({"max_inflight": 0}, "max_inflight")]:
        with pytest.raises(ConsumerError, match=message):
            ConsumerConfig(**settings)  # type: ignore[arg-type]  # wrong types on purpose


def test_an_event_retention_dropped_is_not_delivered_and_counts_as_done() -> None:
    c, log = consumer(ack=True)
    publish(c, log, 0.0, 1, 2)
    del log[1]  # trimmed by retention before anyone took it
    assert seqs_of(c.attach(1.0, A)) == [("a", 2, 1)]
    assert c.ack_floor == 1


def test_progress_survives_a_new_root_and_what_was_in_flight_is_delivered_again() -> None:
    c, log = consumer(ack=True, max_deliver=3)
    c.attach(0.0, A)
    publish(c, log, 0.0, 1, 2, 3, 4)
    c.ack(1.0, A, 1)
    c.ack(1.0, A, 3)  # out of order
    c.nak(1.0, A, 2)  # back to ready, then out again at once: attempt 2
    progress = c.progress()
    assert (progress.ack_floor, progress.done, progress.attempts, progress.offered) == (
        1, (3,), ((2, 2), (4, 1)), 4)
    # The root fails; the next one resumes from its copy of the progress and the log.
    resumed = Consumer.resume("tasks", "workers", progress, held_at(log), lambda b: True,
                              [log[s] for s in sorted(log)])
    assert resumed.stats()["pending"] == 2 and resumed.ack_floor == 1
    assert seqs_of(resumed.attach(5.0, B)) == [("b", 2, 3), ("b", 4, 2)]
    publish(resumed, log, 6.0, 5)
    assert resumed.inflight_of(B) == [2, 4, 5]


def test_a_resumed_consumer_counts_what_retention_dropped_meanwhile_as_done() -> None:
    c, log = consumer(ack=True)
    publish(c, log, 0.0, 1, 2, 3)
    progress = c.progress()
    del log[1], log[2]
    resumed = Consumer.resume("tasks", "workers", progress, held_at(log), lambda b: True,
                              [log[3]])
    assert resumed.ack_floor == 2 and resumed.stats()["pending"] == 1


def test_progress_that_contradicts_itself_is_refused() -> None:
    with pytest.raises(ConsumerError, match="ack_floor"):
        Progress(ConsumerConfig(), 5, (), (), 4)
    with pytest.raises(ConsumerError, match="done"):
        Progress(ConsumerConfig(), 1, (1,), (), 4)


def test_progress_goes_to_the_wire_and_back_and_garbage_is_refused() -> None:
    progress = Progress(ConsumerConfig(ack=True, ack_wait=2.5, dead_letter="dl"), 3, (5, 7),
                        ((4, 2), (6, 1)), 9)
    assert Progress.from_wire(progress.to_wire()) == progress
    wire = progress.to_wire()
    for bad in ([*wire[:9]], [*wire[:6], "3", *wire[7:]], [*wire[:7], [5, "7"], *wire[8:]],
                [*wire[:8], [[4]], wire[9]], [*wire[:2], 0, *wire[3:]], "progress"):
        with pytest.raises(ConsumerError):
            Progress.from_wire(bad)


def test_a_consumer_resumed_far_behind_the_log_jumps_its_floor_to_what_is_held() -> None:
    log = {seq: body(seq) for seq in (1_000_001, 1_000_002)}
    progress = Progress(ConsumerConfig(ack=True), 0, (5,), ((7, 1),), 1_000_002)
    resumed = Consumer.resume("tasks", "workers", progress, held_at(log), lambda b: True,
                              [log[s] for s in sorted(log)])
    assert resumed.ack_floor == 1_000_000
    assert resumed.progress().done == () and resumed.progress().attempts == ()
    assert resumed.stats()["pending"] == 2


def test_a_fetch_answer_stops_at_its_byte_budget_and_the_rest_waits_for_the_next() -> None:
    c, log = consumer(ack=True, pull=True)
    c.attach(0.0, A)
    publish(c, log, 0.0, 1, 2, 3)
    cost = log[1].cost()  # the three events cost the same
    # room for two events exactly: the third would go one byte past it
    assert seqs_of(c.fetch(1.0, A, 1, 10, wait=0.0, max_bytes=2 * cost)) == [
        ("a", 1, 1), ("a", 2, 1)]
    assert seqs_of(c.fetch(1.0, A, 2, 10, wait=0.0, max_bytes=2 * cost - 1)) == [("a", 3, 1)]
    # the first event always goes, whatever it costs
    publish(c, log, 2.0, 4)
    assert seqs_of(c.fetch(2.0, A, 3, 10, wait=0.0, max_bytes=1)) == [("a", 4, 1)]


def test_an_event_past_its_ttl_is_neither_delivered_nor_redelivered() -> None:
    c, log = consumer(ack=True, ack_wait=5.0)
    log[1] = EventBody("tasks", "0001", 1, {"kind": "job"}, b"p", "01", 0.0, 3.0)
    log[2] = EventBody("tasks", "0002", 2, {"kind": "job"}, b"p", "01", 0.0, 10.0)
    c.offer(0.0, log[1])
    c.offer(0.0, log[2])
    assert seqs_of(c.attach(3.0, A)) == [("a", 2, 1)]  # 1's ttl ended at 3: done, not given
    assert c.ack_floor == 1
    assert seqs_of(c.tick(8.0)) == [("a", 2, 2)]  # its ack wait ended before its ttl (10)
    assert seqs_of(c.tick(13.0)) == []  # the second ack wait ended after the ttl: done
    assert c.ack_floor == 2 and c.stats()["inflight"] == 0

"""Reliable publishing, exact effects: the root copies each reliable event to its
replicas before it answers, numbers a retried msg_id once, and a replica that takes the
key over numbers on from the copies; the publisher's node retries until answered."""

from __future__ import annotations

from scribe import ScribeConfig
from scribe.publish_messages import Publish, PublishAck, ReplicaSync, Replicate, ReplicateAck
from scribe.wire_records import EventBody
from tests.scribe.helpers import MID, TOPIC, join, make, ref

ORIGIN = ref(500)
CONFIG = ScribeConfig(replicas=2, replica_timeout=1.5, publish_retry=2.0)


def body(msg_id: str, seq: int | None = None) -> EventBody:
    return EventBody(TOPIC, msg_id, seq, {"x": 1}, b"p", "01f4", 0.5)


def root_with_replicas():
    app, host = make(200, root=True, config=CONFIG)
    host.replicas = [ref(300), ref(400), ref(450)]
    app.deliver(0.0, MID, join(101, ""), 1)  # one child, so events go down the tree
    host.clear()
    return app, host


def test_the_root_answers_a_reliable_publish_once_both_replicas_hold_it() -> None:
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN), 2)
    copies = host.sent_of(Replicate)
    assert [dest for dest, _ in copies] == ["n300", "n400"]  # replicas=2: nearest two
    assert all(m.body.seq == 1 and m.root == ref(200) for _, m in copies)
    # Not sent down before the replicas hold it (a new root must not reuse its number).
    assert not host.sent_copies() and not host.sent_of(PublishAck)
    app.on_direct(1.1, "n300", ReplicateAck(TOPIC, "aa", 1, ref(300)))
    assert not host.sent_copies() and not host.sent_of(PublishAck)
    app.on_direct(1.2, "n400", ReplicateAck(TOPIC, "aa", 1, ref(400)))
    assert host.sent_of(PublishAck) == [("n500", PublishAck(TOPIC, "aa", 1, ref(200)))]
    assert [dest for dest, _ in host.sent_copies()] == ["n101"]


def test_an_unreliable_event_waits_behind_a_reliable_one_numbered_before_it() -> None:
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN), 2)
    app.deliver(1.0, MID, Publish(body("bb"), ORIGIN, reliable=False), 2)
    assert host.sent_of(PublishAck) == [("n500", PublishAck(TOPIC, "bb", 2, ref(200)))]
    assert not host.sent_copies()  # seq order: 2 waits for 1
    for replica in (300, 400):
        app.on_direct(1.2, f"n{replica}", ReplicateAck(TOPIC, "aa", 1, ref(replica)))
    assert [(m.body.seq, m.prev) for _, m in host.sent_copies()] == [(1, 0), (2, 1)]


def test_a_retried_msg_id_is_numbered_once_and_not_sent_down_again() -> None:
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN), 2)
    app.deliver(1.1, MID, Publish(body("aa"), ORIGIN), 2)  # retried while pending
    assert len(host.sent_of(Replicate)) == 2 and len(host.sent_copies()) == 0
    for replica in (300, 400):
        app.on_direct(1.2, f"n{replica}", ReplicateAck(TOPIC, "aa", 1, ref(replica)))
    assert len(host.sent_of(PublishAck)) == 1 and len(host.sent_copies()) == 1
    app.deliver(5.0, MID, Publish(body("aa"), ORIGIN), 2)  # retried after the answer
    assert [m.seq for _, m in host.sent_of(PublishAck)] == [1, 1]
    assert len(host.sent_of(Replicate)) == 2 and len(host.sent_copies()) == 1
    app.deliver(5.1, MID, Publish(body("bb"), ORIGIN, reliable=False), 2)
    assert [m.body.seq for _, m in host.sent_copies()] == [1, 2]


def test_a_silent_or_unreachable_replica_is_given_up_on() -> None:
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN), 2)
    app.on_unreachable(1.1, "n300", host.sent_of(Replicate)[0][1])
    assert not host.sent_of(PublishAck)
    # n400 never answers: copied again after each replica_timeout (a copy or its
    # confirmation may be lost), given up on after the third copy.
    app.on_timer(2.0)
    assert not host.sent_of(PublishAck)
    app.on_timer(3.0)
    app.on_timer(4.0)
    app.on_timer(5.0)
    # (n300, given up on, is copied the newest event every tick: copies(), below.)
    assert [d for d, _ in host.sent_of(Replicate) if d == "n400"] == ["n400"] * 3
    assert not host.sent_of(PublishAck)
    app.on_timer(6.0)  # the third copy went at 5.0: 1.5 s to answer
    assert not host.sent_of(PublishAck)
    app.on_timer(7.0)
    assert [m.seq for _, m in host.sent_of(PublishAck)] == [1]


def copies(host, dest: str) -> list[tuple[str, list[int]]]:
    """What went to replica ``dest``: ("copy", [seq]) per Replicate, ("sync", seqs) per
    ReplicaSync that carried events."""
    return [("copy", [m.body.seq]) if isinstance(m, Replicate)
            else ("sync", [b.seq for b in m.events])
            for d, m in host.sent if d == dest
            and (isinstance(m, Replicate) or (isinstance(m, ReplicaSync) and m.events))]


def test_a_replica_given_up_on_gets_the_whole_log_once_it_confirms_a_copy_again() -> None:
    # A silent replica missed copies the root answered without: were it to take the key
    # over, it would lack acknowledged events. The root copies it the newest event every
    # tick; once it confirms one, the next tick sends it the whole log.
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN), 2)
    app.deliver(1.0, MID, Publish(body("bb"), ORIGIN), 2)
    app.on_direct(1.1, "n300", ReplicateAck(TOPIC, "aa", 1, ref(300)))
    app.on_direct(1.1, "n300", ReplicateAck(TOPIC, "bb", 2, ref(300)))
    for now in (2.0, 3.0, 4.0, 5.0, 6.0):
        app.on_timer(now)
    assert not host.sent_of(PublishAck)
    host.clear()
    app.on_timer(7.0)
    assert [m.seq for _, m in host.sent_of(PublishAck)] == [1, 2]  # n400 given up on
    app.on_timer(8.0)
    assert copies(host, "n400") == [("copy", [2]), ("copy", [2])]  # the newest, per tick
    assert copies(host, "n300") == []  # it confirmed each copy
    app.on_direct(8.1, "n400", ReplicateAck(TOPIC, "bb", 2, ref(400)))
    host.clear()
    app.on_timer(9.0)
    app.on_timer(10.0)
    assert copies(host, "n400") == [("sync", [1, 2])]
    assert copies(host, "n300") == []


def test_replicas_that_come_after_a_root_numbered_alone_get_its_whole_log() -> None:
    # A root with no replicas (alone on its side of a partition) acknowledged events
    # only it holds; its first copies after the heal are not where its replicas start.
    app, host = make(200, root=True, config=CONFIG)
    app.deliver(0.0, MID, join(101, ""), 1)
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN), 2)
    assert [m.seq for _, m in host.sent_of(PublishAck)] == [1]
    app.on_timer(2.0)
    host.replicas = [ref(300), ref(400)]
    host.clear()
    app.deliver(3.0, MID, Publish(body("bb"), ORIGIN), 2)
    app.on_timer(4.0)
    for dest in ("n300", "n400"):
        assert copies(host, dest) == [("copy", [2]), ("sync", [1, 2])]


def test_a_fresh_topics_first_copies_are_where_its_replicas_start() -> None:
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN), 2)
    app.on_timer(2.0)
    for dest in ("n300", "n400"):
        assert copies(host, dest) == [("copy", [1])]


def test_unreliable_publishes_skip_the_replicas() -> None:
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN, reliable=False), 2)
    assert not host.sent_of(Replicate)
    assert [m.seq for _, m in host.sent_of(PublishAck)] == [1]


def test_a_replica_that_takes_the_key_over_numbers_on_from_its_copies() -> None:
    app, host = make(300, config=CONFIG)
    for seq, msg_id in enumerate(["aa", "bb", "cc"], start=1):
        app.on_direct(1.0, "n200", Replicate(body(msg_id, seq), ref(200)))
    assert [m.seq for _, m in host.sent_of(ReplicateAck)] == [1, 2, 3]
    assert all(dest == "n200" for dest, _ in host.sent_of(ReplicateAck))
    host.clear()
    host.responsible_for.add(MID)  # the old root failed: the key is ours now
    app.deliver(5.0, MID, Publish(body("bb"), ORIGIN), 3)  # a retry of an acked event
    assert host.sent_of(PublishAck) == [("n500", PublishAck(TOPIC, "bb", 2, ref(300)))]
    app.deliver(5.1, MID, Publish(body("dd"), ORIGIN, reliable=False), 3)
    assert [m.seq for _, m in host.sent_of(PublishAck)] == [2, 4]


def test_retention_is_bounded_by_count() -> None:
    app, host = make(200, root=True, config=ScribeConfig(retain_count=2, retain_min_age=0))
    for msg_id in ("aa", "bb", "cc"):
        app.deliver(1.0, MID, Publish(body(msg_id), ORIGIN), 2)
    retained = app.publishing.retention.root[TOPIC]
    assert [b.msg_id for _, b in retained.events.values()] == ["bb", "cc"]
    host.clear()
    app.deliver(2.0, MID, Publish(body("aa"), ORIGIN), 2)  # forgotten: numbered anew
    assert [m.seq for _, m in host.sent_of(PublishAck)] == [4]


def test_the_publishers_node_retries_until_the_root_answers() -> None:
    app, host = make(500, config=CONFIG)
    app.publish(0.0, TOPIC, {"x": 1}, b"p", msg_id="aa")
    assert [(key, m.body.msg_id) for key, m in host.routed] == [(MID, "aa")]
    app.on_timer(1.0)
    assert len(host.routed) == 1
    app.on_timer(2.0)  # publish_retry passed without an answer: routed again
    assert [m.body.msg_id for _, m in host.routed] == ["aa", "aa"]
    assert all(m.reliable for _, m in host.routed)
    app.on_timer(3.0)  # the next retry is publish_retry after the last one, not at once
    assert len(host.routed) == 2
    app.on_direct(2.5, "n200", PublishAck(TOPIC, "aa", 7, ref(200)))
    assert host.notices[-1] == ("published", {"topic": TOPIC, "msg_id": "aa", "seq": 7})
    assert ("publish_ack", {"topic": TOPIC, "msg_id": "aa", "seq": 7}) in host.traces
    app.on_timer(4.0)
    app.on_timer(6.0)
    assert len(host.routed) == 2  # answered: no more retries


def test_unreliable_publishes_are_not_retried_or_acknowledged_in_the_trace() -> None:
    app, host = make(500, config=CONFIG)
    app.publish(0.0, TOPIC, {"x": 1}, b"p", msg_id="aa", reliable=False)
    app.on_timer(1.0)
    app.on_timer(2.0)
    app.on_timer(3.0)
    assert len(host.routed) == 1
    app.on_direct(2.5, "n200", PublishAck(TOPIC, "aa", 7, ref(200)))
    assert "publish_ack" not in host.trace_kinds()


def test_a_publish_never_answered_is_given_up_on_with_a_drop_record() -> None:
    app, host = make(500, config=ScribeConfig(publish_retry=2.0, publish_give_up=5.0))
    app.publish(0.0, TOPIC, {"x": 1}, b"p", msg_id="aa")
    for now in (2.0, 4.0):
        app.on_timer(now)
    assert len(host.routed) == 3
    app.on_timer(5.0)
    app.on_timer(8.0)
    assert len(host.routed) == 3  # no retries after giving up
    assert ("drop", {"topic": TOPIC, "msg_id": "aa", "reason": "expired"}) in host.traces
    app.on_direct(9.0, "n200", PublishAck(TOPIC, "aa", 7, ref(200)))
    assert "publish_ack" not in host.trace_kinds()  # a late answer is not a reliable ack

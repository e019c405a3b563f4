"""A burst of local publishes in one call (``publish_many``), exact effects: the root
numbers a run of one topic's events in order, persists them in one write, copies each to
its replicas and sends them down in seq order once they may go; a bad event is refused
on its own, and a msg_id repeated within the burst is numbered once. A publisher's node
that knows the root sends a burst there in runs bounded by bytes (``Publishes``)."""

from __future__ import annotations

from overlay.core.errors import LocalProtocolError
from overlay.core.limits import SizeLimits
from overlay.core.pubsub import NewEvent
from scribe import ScribeApp, ScribeConfig
from scribe.durability import AppendEvents
from scribe.messages import Event, Events
from scribe.publish_messages import Publish, PublishAck, Publishes, Replicate, ReplicateAck
from scribe.wire_records import EventBody
from tests.scribe.fakekbr import RecordingHost
from tests.scribe.helpers import MID, TOPIC, join, make, ref

DURABLE = ScribeConfig(durable=True, replicas=2, replica_timeout=1.5)


def root(config: ScribeConfig) -> tuple[ScribeApp, RecordingHost]:
    app, host = make(200, root=True, config=config)
    host.replicas = [ref(300), ref(400)]
    app.deliver(0.0, MID, join(101, ""), 1)  # one child, so events go down the tree
    host.clear()
    return app, host


def event(msg_id: str, reliable: bool = False, topic: str = TOPIC) -> NewEvent:
    return NewEvent(topic, {"x": 1}, b"p", msg_id, 0.5, reliable)


def sent_down(host: RecordingHost) -> list[tuple[str, str, int | None, int | None]]:
    """The copies sent down the tree, each as (child, msg_id, seq, prev), whether alone
    (Event) or in a run (Events)."""
    return [(dest, c.body.msg_id, c.body.seq, c.prev) for dest, c in host.sent_copies()]


def messages_down(host: RecordingHost) -> list[tuple[str, int]]:
    """The messages sent down the tree: (child, copies carried)."""
    return [(dest, len(m.bodies) if isinstance(m, Events) else 1) for dest, m in host.sent
            if isinstance(m, Event | Events)]


def test_a_burst_is_numbered_in_order_persisted_in_one_write_and_sent_down() -> None:
    app, host = root(DURABLE)
    written = len(host.persisted)
    assert app.publish_many(1.0, [event("aa"), event("bb"), event("cc")]) == ["aa", "bb", "cc"]
    new = host.persisted[written:]
    assert len(new) == 1 and isinstance(new[0], AppendEvents)
    assert [(b.msg_id, b.seq) for b in new[0].events] == [("aa", 1), ("bb", 2), ("cc", 3)]
    # Unreliable: not copied, not waiting for the sync; each copy vouches for the last.
    assert not host.sent_of(Replicate)
    assert sent_down(host) == [("n101", "aa", 1, 0), ("n101", "bb", 2, 1),
                               ("n101", "cc", 3, 2)]
    assert messages_down(host) == [("n101", 3)]  # the run goes down the edge in one message
    assert host.trace_kinds().count("publish") == 3
    assert host.trace_kinds().count("forward") == 3  # a record per event, as ever


def test_a_reliable_burst_is_answered_event_by_event_and_sent_down_in_seq_order() -> None:
    app, host = root(DURABLE)
    app.publish_many(1.0, [event("aa", reliable=True), event("bb", reliable=True)])
    assert [(dest, m.body.seq) for dest, m in host.sent_of(Replicate)] == [
        ("n300", 1), ("n400", 1), ("n300", 2), ("n400", 2)]
    app.on_synced(1.1, len(host.persisted))
    for replica in (300, 400):
        app.on_direct(1.2, f"n{replica}", ReplicateAck(TOPIC, "bb", 2, ref(replica)))
    published = [data["msg_id"] for kind, data in host.notices if kind == "published"]
    assert published == ["bb"]
    assert not host.sent_of(Event)  # 2 waits for 1, whose replicas have not confirmed
    for replica in (300, 400):
        app.on_direct(1.3, f"n{replica}", ReplicateAck(TOPIC, "aa", 1, ref(replica)))
    published = [data["msg_id"] for kind, data in host.notices if kind == "published"]
    assert published == ["bb", "aa"]
    assert sent_down(host) == [("n101", "aa", 1, 0), ("n101", "bb", 2, 1)]


def test_events_one_sync_frees_go_down_the_tree_in_one_run_then_are_answered() -> None:
    # No replicas: a reliable event waits for the root's own copy only, and the group
    # commit that stores a burst frees all of it at once.
    app, host = root(ScribeConfig(durable=True, replicas=0))
    app.publish_many(1.0, [event(m, reliable=True) for m in ("aa", "bb", "cc")])
    assert not host.sent_of(Event) and not host.notices  # nothing before the sync
    host.clear()
    app.on_synced(1.1, len(host.persisted))
    assert sent_down(host) == [("n101", "aa", 1, 0), ("n101", "bb", 2, 1),
                               ("n101", "cc", 3, 2)]
    assert messages_down(host) == [("n101", 3)]  # one run down the edge, as unreliable
    published = [data["msg_id"] for kind, data in host.notices if kind == "published"]
    assert published == ["aa", "bb", "cc"]


def test_a_bad_event_is_refused_alone_and_a_repeated_msg_id_is_numbered_once() -> None:
    app, host = root(ScribeConfig())
    outcomes = app.publish_many(1.0, [event("aa"), event("not hex"), event("bb"),
                                      event("aa"), event("cc")])
    assert outcomes[0] == "aa" and outcomes[2:] == ["bb", "aa", "cc"]
    assert isinstance(outcomes[1], ValueError | LocalProtocolError)
    assert "not hex" in str(outcomes[1])
    assert [(msg_id, seq) for _, msg_id, seq, _ in sent_down(host)] == [
        ("aa", 1), ("bb", 2), ("cc", 3)]


def test_a_burst_of_several_topics_goes_toward_each_root_in_order() -> None:
    app, host = root(ScribeConfig())
    # "u" is another node's topic: its events are routed (one Publish each), between
    # runs of "t" that this root numbers.
    app.publish_many(1.0, [event("aa"), event("bb", topic="u"), event("cc", topic="u"),
                           event("dd")])
    assert [m.body.msg_id for _, m in host.routed if isinstance(m, Publish)] == ["bb", "cc"]
    assert [(msg_id, seq) for _, msg_id, seq, _ in sent_down(host)] == [("aa", 1), ("dd", 2)]


def publisher(config: ScribeConfig | None = None) -> tuple[ScribeApp, RecordingHost]:
    """Node 150, which learnt that node 200 is the topic's root."""
    app, host = make(150, config=config)
    app.on_direct(0.0, "n200", PublishAck(TOPIC, "ff", 1, ref(200)))
    host.clear()
    return app, host


def test_a_publishers_node_sends_a_burst_to_the_cached_root_in_one_message() -> None:
    app, host = publisher()
    app.publish_many(1.0, [event("aa", reliable=True), event("bb", reliable=True)])
    [(dest, run)] = host.sent
    assert dest == "n200" and isinstance(run, Publishes) and run.reliable
    assert [b.msg_id for b in run.bodies] == ["aa", "bb"] and run.origin == ref(150)
    # A single event still goes as a Publish.
    app.publish_many(1.1, [event("cc")])
    assert [type(m) for _, m in host.sent] == [Publishes, Publish]


def test_a_run_of_publishes_is_bounded_by_bytes_at_its_edge_and_one_past() -> None:
    sizes = SizeLimits(1 << 16)
    app, host = publisher(ScribeConfig(sizes=sizes))

    def burst(payload_bytes: int, first: int) -> list[int]:
        events = [NewEvent(TOPIC, {"x": 1}, bytes(payload_bytes), format(first + i, "x"))
                  for i in range(3)]
        host.clear()
        app.publish_many(1.0, events)
        runs = [m.bodies for _, m in host.sent]
        assert all(sum(b.cost() for b in run) <= sizes.batch_bytes for run in runs)
        return [len(run) for run in runs]

    at_edge = sizes.batch_bytes // 2 - (EventBody(TOPIC, "aa", None, {"x": 1}, b"", "00", 0.0)
                                        .cost())
    assert burst(at_edge, 0x10) == [2, 1]  # two events' costs fill the message exactly
    assert burst(at_edge + 1, 0x20) == [1, 1, 1]


def test_the_root_numbers_a_run_of_publishes_as_one_run() -> None:
    app, host = root(DURABLE)
    written = len(host.persisted)
    run = Publishes(TOPIC, (event_body("aa"), event_body("bb")), ref(150), reliable=False)
    app.on_direct(1.0, "n150", run)
    assert len(host.persisted) == written + 1
    assert sent_down(host) == [("n101", "aa", 1, 0), ("n101", "bb", 2, 1)]
    assert not host.sent_of(PublishAck)  # it came straight here: its origin knows the root


def test_a_run_for_a_root_that_moved_or_cannot_be_reached_is_routed_event_by_event() -> None:
    app, host = make(300)  # not responsible for the topic's key
    run = Publishes(TOPIC, (event_body("aa"), event_body("bb")), ref(150))
    app.on_direct(1.0, "n150", run)
    assert [(key, m) for key, m in host.routed] == [(MID, p) for p in run.each()]
    app, host = publisher()
    app.publish_many(1.0, [event("aa", reliable=True), event("bb", reliable=True)])
    [(dest, sent)] = host.sent
    app.on_unreachable(1.1, dest, sent)
    assert [m for _, m in host.routed] == sent.each()
    assert app.publishing.roots.get(TOPIC) is None  # the cached root is forgotten


def event_body(msg_id: str) -> EventBody:
    return EventBody(TOPIC, msg_id, None, {"x": 1}, b"p", "0096", 0.5)

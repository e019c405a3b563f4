"""A store that cannot write (issue 26: a full disk), exact effects: a reliable event
whose root copy failed is refused (``PublishRefused``), never acknowledged nor sent down;
while the store fails, reliable publishes are refused before they are numbered; a
replica that cannot store its copy says so; the publisher's node stops retrying and
tells its application."""

from __future__ import annotations

from overlay.core.storage import StorageOp
from scribe import ScribeConfig
from scribe.app import ScribeApp
from scribe.durability import REFUSE_SECONDS, AppendEvents, NoteCounter, TrimLog, salvage
from scribe.messages import Event
from scribe.publish_messages import Publish, PublishAck, PublishRefused, Replicate, ReplicateAck
from scribe.wire_records import EventBody
from tests.scribe.fakekbr import RecordingHost
from tests.scribe.helpers import BITS, MID, TOPIC, join, ref

ORIGIN = ref(500)
CONFIG = ScribeConfig(durable=True, replicas=2, replica_timeout=1.5, publish_retry=2.0)
FULL = "database or disk is full"


def body(msg_id: str, seq: int | None = None) -> EventBody:
    return EventBody(TOPIC, msg_id, seq, {"x": 1}, b"p", "01f4", 0.5)


def node(node_id: int, root: bool) -> tuple[ScribeApp, RecordingHost]:
    host = RecordingHost(ref(node_id), bits=BITS, responsible_for={MID} if root else set())
    app = ScribeApp(host, CONFIG)
    host.app = app
    return app, host


def root_with_replicas() -> tuple[ScribeApp, RecordingHost]:
    app, host = node(200, root=True)
    host.replicas = [ref(300), ref(400)]
    app.deliver(0.0, MID, join(101, ""), 1)  # one child, so events go down the tree
    host.clear()
    return app, host


def confirm_replicas(app: ScribeApp, now: float, msg_id: str, seq: int) -> None:
    for replica in (300, 400):
        app.on_direct(now, f"n{replica}", ReplicateAck(TOPIC, msg_id, seq, ref(replica)))


def test_an_event_whose_root_copy_failed_is_refused_and_its_seq_never_used() -> None:
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN), 2)
    confirm_replicas(app, 1.1, "aa", 1)
    app.on_storage_failed(1.2, len(host.persisted), FULL)
    assert host.sent_of(PublishRefused) == [("n500", PublishRefused(TOPIC, "aa", FULL,
                                                                    ref(200)))]
    assert not host.sent_of(PublishAck) and not host.sent_of(Event)
    assert ("storage_failed", {"through": 1, "reason": FULL, "refused": 1}) in host.traces
    # Not retained: not served to a pull, not answered as numbered when retried.
    log = app.publishing.retention.log(TOPIC)
    assert log is not None and 1 not in log.events and "aa" not in log.by_msg
    # The store keeps being written: a success ends the failure; the retry is numbered
    # afresh (2, not 1) and acknowledged only once stored.
    app.on_synced(1.3, len(host.persisted))
    host.clear()
    app.deliver(1.4, MID, Publish(body("aa"), ORIGIN), 2)
    assert not host.sent_of(PublishAck)
    assert host.persisted[-1] == AppendEvents(TOPIC, (body("aa", 2),))
    confirm_replicas(app, 1.5, "aa", 2)
    app.on_synced(1.6, len(host.persisted))
    assert host.sent_of(PublishAck) == [("n500", PublishAck(TOPIC, "aa", 2, ref(200)))]
    assert [(m.body.seq, m.prev) for _, m in host.sent_of(Event)] == [(2, 0)]


def test_while_the_store_fails_reliable_publishes_are_refused_before_numbering() -> None:
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN), 2)
    app.on_storage_failed(1.1, len(host.persisted), FULL)
    host.clear()
    written = len(host.persisted)
    app.deliver(1.1 + REFUSE_SECONDS - 0.01, MID, Publish(body("bb"), ORIGIN), 2)
    assert [m.msg_id for _, m in host.sent_of(PublishRefused)] == ["bb"]
    assert not host.sent_of(Replicate) and len(host.persisted) == written
    assert app.state.seq[TOPIC] == 1  # no seq spent
    # Unreliable events are served meanwhile (numbered, sent down, persisted unwaited).
    app.deliver(1.2, MID, Publish(body("cc"), ORIGIN, reliable=False), 2)
    assert [m.body.seq for _, m in host.sent_of(Event)] == [2]
    # Its write fails too: nothing waited for it, and failures go on (no trace record).
    app.on_storage_failed(1.25, len(host.persisted), FULL)
    assert "storage_failed" not in host.trace_kinds()
    # REFUSE_SECONDS after the last failure with no success since, one is tried again (a
    # store nothing else wrote to must be found writable again).
    host.clear()
    app.deliver(1.25 + REFUSE_SECONDS - 0.01, MID, Publish(body("d0"), ORIGIN), 2)
    assert [m.msg_id for _, m in host.sent_of(PublishRefused)] == ["d0"]
    host.clear()
    app.deliver(1.25 + REFUSE_SECONDS, MID, Publish(body("dd"), ORIGIN), 2)
    assert not host.sent_of(PublishRefused)
    assert [m.body.seq for _, m in host.sent_of(Replicate)] == [3, 3]


def test_events_behind_a_refused_one_go_down_the_tree() -> None:
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN), 2)
    app.deliver(1.0, MID, Publish(body("bb"), ORIGIN, reliable=False), 2)
    assert not host.sent_of(Event)  # seq order: 2 waits for 1
    app.on_storage_failed(1.1, len(host.persisted), FULL)
    # 1 is a gap children skip (prev says nothing was sent before 2).
    assert [(m.body.seq, m.prev) for _, m in host.sent_of(Event)] == [(2, 0)]
    assert app.publishing.retention.waits.released_through(TOPIC) == 2


def test_a_replica_that_cannot_store_says_so_and_the_root_does_not_wait_for_it() -> None:
    replica, rhost = node(300, root=False)
    replica.on_direct(1.0, "n200", Replicate(body("aa", 1), ref(200)))
    assert not rhost.sent_of(ReplicateAck)  # waits for its sync
    replica.on_storage_failed(1.1, len(rhost.persisted), FULL)
    assert rhost.sent_of(ReplicateAck) == [("n200", ReplicateAck(TOPIC, "aa", 1, ref(300),
                                                                stored=False))]
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN), 2)
    app.on_synced(1.05, len(host.persisted))
    app.on_direct(1.1, "n300", rhost.sent_of(ReplicateAck)[0][1])
    app.on_direct(1.1, "n400", ReplicateAck(TOPIC, "aa", 1, ref(400)))
    # Answered at once, as for a replica given up on (not after three time-outs).
    assert host.sent_of(PublishAck) == [("n500", PublishAck(TOPIC, "aa", 1, ref(200)))]


def test_the_publishers_node_stops_retrying_and_tells_its_application() -> None:
    app, host = node(500, root=False)
    msg_id = app.publish(1.0, TOPIC, {"x": 1}, b"p", "aa")
    app.on_direct(1.1, "n200", PublishRefused(TOPIC, msg_id, FULL, ref(200)))
    assert host.notices == [("refused", {"topic": TOPIC, "msg_id": "aa",
                                         "code": "storage_error", "reason": FULL})]
    assert ("drop", {"topic": TOPIC, "msg_id": "aa", "reason": "storage_error"}) \
        in host.traces
    host.clear()
    app.on_timer(10.0)  # past publish_retry: nothing is sent again
    assert not [m for _, m in host.routed if isinstance(m, Publish)]
    # A late or repeated refusal is not passed on twice.
    app.on_direct(10.1, "n200", PublishRefused(TOPIC, msg_id, FULL, ref(200)))
    assert host.notices == []


def test_a_publish_refused_at_the_publishers_own_root_is_answered_locally() -> None:
    app, host = root_with_replicas()
    app.publish(1.0, TOPIC, {"x": 1}, b"p", "aa")
    app.on_storage_failed(1.1, len(host.persisted), FULL)
    assert [kind for kind, _ in host.notices] == ["refused"]
    assert not host.sent_of(PublishRefused)


def test_salvage_keeps_everything_but_the_events() -> None:
    ops: list[StorageOp] = [AppendEvents("a", (body("0a", 4), body("0b", 9))), TrimLog("a", 3),
                            NoteCounter("b", 2), AppendEvents("b", (body("0c", 7),))]
    assert salvage(ops) == [NoteCounter("a", 9), TrimLog("a", 3), NoteCounter("b", 2),
                            NoteCounter("b", 7)]


def test_a_refusal_carries_a_bounded_reason() -> None:
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("aa"), ORIGIN), 2)
    app.on_storage_failed(1.1, len(host.persisted), "x" * 10_000)
    (_, refused), = host.sent_of(PublishRefused)
    assert isinstance(refused, PublishRefused) and len(refused.reason) == 200


def test_the_store_is_told_which_persists_something_waits_for() -> None:
    """A reliable event's root copy and a replica's copy are waited for (``want_sync``,
    once per persist); an unreliable event's append is not, so it may linger."""
    app, host = root_with_replicas()
    app.deliver(1.0, MID, Publish(body("cc"), ORIGIN, reliable=False), 2)
    assert host.persisted[-1] == AppendEvents(TOPIC, (body("cc", 1),))
    assert host.sync_wanted == []
    app.deliver(1.1, MID, Publish(body("aa"), ORIGIN), 2)
    last = host.persisted[-1]
    assert isinstance(last, AppendEvents) and [(b.msg_id, b.seq) for b in last.events] == [
        ("aa", 2)]
    assert host.sync_wanted == [len(host.persisted)]
    app.on_synced(1.2, len(host.persisted))
    app.deliver(1.3, MID, Publish(body("bb"), ORIGIN), 2)
    assert host.sync_wanted == [len(host.persisted) - 1, len(host.persisted)]
    replica, rhost = node(300, root=False)
    replica.on_direct(1.0, "n200", Replicate(body("aa", 1), ref(200)))
    assert rhost.sync_wanted == [len(rhost.persisted)] == [1]

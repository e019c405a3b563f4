"""A replica's confirmations of copies synced together go to the root in one
``ReplicateAcks`` per root and topic (MAX_BATCH at most, one alone as its
``ReplicateAck``), and the root takes them together: the events they free go down the
tree as one run. Exact inputs and effects."""

from __future__ import annotations

import pytest

from overlay.core.framing import encode_frame
from overlay.core.limits import MIN_MAX_FRAME, SizeLimits
from overlay.core.messages import decode_message, encode_message
from scribe.messages import Event, Events
from scribe.publish_messages import (
    REPLICATE_ACK_BYTES,
    Publish,
    PublishAck,
    Replicate,
    ReplicateAck,
    ReplicateAcks,
)
from scribe.wire_records import MAX_BATCH, EventBody
from tests.scribe.helpers import MID, TOPIC, ref
from tests.scribe.test_storage_failure import ORIGIN, body, node, root_with_replicas

OTHER = "other-topic"


def msg_id(n: int) -> str:
    return format(n, "04x")


def replica_synced(copies: list[EventBody]) -> list[tuple[str, object]]:
    """What replica 300 sends once one sync covers its copies of root 200's ``copies``."""
    replica, rhost = node(300, root=False)
    for copy in copies:
        replica.on_direct(1.0, "n200", Replicate(copy, ref(200)))
    assert not rhost.sent_of(ReplicateAck) and not rhost.sent_of(ReplicateAcks)
    replica.on_synced(1.1, len(rhost.persisted))
    return [(dest, msg) for dest, msg in rhost.sent
            if isinstance(msg, ReplicateAck | ReplicateAcks)]


def test_one_sync_confirms_a_topics_copies_in_one_message_and_one_alone_as_before() -> None:
    other = EventBody(OTHER, "dd", 1, {}, b"p", "01f4", 0.5)
    sent = replica_synced([body("aa", 1), body("bb", 2), other, body("cc", 3)])
    assert sent == [
        ("n200", ReplicateAcks(TOPIC, ("aa", "bb", "cc"), (1, 2, 3), ref(300))),
        ("n200", ReplicateAck(OTHER, "dd", 1, ref(300)))]


@pytest.mark.parametrize("copies", [MAX_BATCH, MAX_BATCH + 1])
def test_a_message_takes_max_batch_confirmations_and_the_rest_go_in_the_next(
        copies: int) -> None:
    sent = replica_synced([body(msg_id(n), n) for n in range(1, copies + 1)])
    first = ReplicateAcks(TOPIC, tuple(msg_id(n) for n in range(1, MAX_BATCH + 1)),
                          tuple(range(1, MAX_BATCH + 1)), ref(300))
    rest = [] if copies == MAX_BATCH else [
        ("n200", ReplicateAck(TOPIC, msg_id(copies), copies, ref(300)))]
    assert sent == [("n200", first), *rest]


def test_the_root_takes_one_syncs_confirmations_together_and_sends_the_events_as_a_run(
        ) -> None:
    app, host = root_with_replicas()
    for n, name in enumerate(("aa", "bb", "cc"), 1):
        app.deliver(1.0, MID, Publish(body(name), ORIGIN), 2)
        assert [m.body.seq for _, m in host.sent_of(Replicate)][-2:] == [n, n]
    app.on_synced(1.05, len(host.persisted))
    app.on_direct(1.1, "n300", ReplicateAcks(TOPIC, ("aa", "bb", "cc"), (1, 2, 3), ref(300)))
    assert not host.sent_of(PublishAck)  # 400 has confirmed nothing yet
    # A confirmation under another number than the event's confirms nothing.
    app.on_direct(1.1, "n400", ReplicateAcks(TOPIC, ("aa", "bb"), (1, 9), ref(400)))
    assert [m.msg_id for _, m in host.sent_of(PublishAck)] == ["aa"]
    host.clear()
    app.on_direct(1.2, "n400", ReplicateAcks(TOPIC, ("bb", "cc"), (2, 3), ref(400)))
    assert [m.msg_id for _, m in host.sent_of(PublishAck)] == ["bb", "cc"]
    # Freed together: one run down the tree's edge, not a copy each.
    assert not host.sent_of(Event)
    assert [[b.seq for b in m.bodies] for _, m in host.sent_of(Events)] == [[2, 3]]


@pytest.mark.parametrize("bad", [
    dict(msg_ids=(), seqs=()),
    dict(msg_ids=("aa",) * (MAX_BATCH + 1), seqs=(1,) * (MAX_BATCH + 1)),
    dict(msg_ids=("aa", "bb"), seqs=(1,)),
    dict(msg_ids=("aa",), seqs=(0,)),
    dict(msg_ids=("AA",), seqs=(1,)),
])
def test_a_malformed_message_is_refused(bad: dict[str, tuple[object, ...]]) -> None:
    with pytest.raises(ValueError):
        ReplicateAcks(TOPIC, replica=ref(300), **bad)  # type: ignore[arg-type]


def test_max_batch_of_the_largest_confirmations_fit_a_frame_at_the_smallest_max_frame(
        ) -> None:
    """The count bounds the bytes: MAX_BATCH confirmations of the longest msg_ids and
    largest seqs take at most REPLICATE_ACK_BYTES each, within ``batch_bytes``."""
    assert SizeLimits(MIN_MAX_FRAME).batch_bytes >= MAX_BATCH * REPLICATE_ACK_BYTES
    largest = ReplicateAcks(TOPIC, tuple(format(n, "064x") for n in range(MAX_BATCH)),
                            (2 ** 64 - 1,) * MAX_BATCH, ref(300))
    frame = encode_frame(encode_message(largest))
    assert len(frame) - 4 <= MIN_MAX_FRAME
    assert decode_message(encode_message(largest)) == largest

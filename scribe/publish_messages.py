"""Scribe's messages between publishers, a topic's root and its replicas: events on their
way to the root and its answers (:class:`PublishAck`, :class:`PublishRefused`), the
root's copies for its replicas and their confirmations, and the syncs that hand a log to
a new replica or a new root. Split from :mod:`scribe.messages` (tree membership, events
going down a tree, repair and queries), whose base classes they share; each validates
its fields when built, so a malformed one from a peer fails decoding.
"""

from __future__ import annotations

from chord.kbr import NodeRef
from overlay.core.messages import Message, message
from overlay.core.pubsub import MAX_MSG_ID_CHARS, check_msg_id
from scribe.messages import _TopicMessage
from scribe.wire_records import MAX_BATCH, MAX_REASON, EventBody, check_events, check_seq


@message("scribe.publish")
class Publish(Message):
    """An event on its way to the root (routed, or sent directly to a cached root)."""

    body: EventBody
    origin: NodeRef
    #: Reliable: acknowledged once the root's replicas hold it, retried until then.
    reliable: bool = True

    def __post_init__(self) -> None:
        if self.body.seq is not None:
            raise ValueError("a published event is numbered by the root, not before")


@message("scribe.publishes")
class Publishes(_TopicMessage):
    """Events of one topic from ``origin``'s application, in publish order, sent in one
    message to the topic's cached root (the sender cuts a burst into runs of a message's
    worth: :func:`message_runs`). The root handles them as that many :class:`Publish`
    sent straight to it, in one step."""

    topic: str
    bodies: tuple[EventBody, ...]
    origin: NodeRef
    reliable: bool = True

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        if not 0 < len(self.bodies) <= MAX_BATCH:
            raise ValueError(f"a run of publishes carries 1 to {MAX_BATCH} events")
        if any(b.seq is not None or b.topic != self.topic for b in self.bodies):
            raise ValueError("a run of publishes carries unnumbered events of its topic")
        if len({b.msg_id for b in self.bodies}) != len(self.bodies):
            raise ValueError("a run of publishes carries each msg_id once")

    def each(self) -> list[Publish]:
        """The run as single publishes (routed on their own, or retried)."""
        return [Publish(body, self.origin, self.reliable) for body in self.bodies]


@message("scribe.replicate")
class Replicate(Message):
    """The root's copy of a numbered event for one of its successors, which would take
    the topic's key over next: it keeps the event and the counter."""

    body: EventBody
    root: NodeRef

    def __post_init__(self) -> None:
        if self.body.seq is None:
            raise ValueError("a replicated event carries its sequence number")


@message("scribe.replicate_ack")
class ReplicateAck(_TopicMessage):
    """A successor holds the event ``msg_id`` (number ``seq``) of ``topic`` on disk; or,
    ``stored`` false, it could not store it (a full disk): the root does not wait for it,
    as for a replica it gave up on."""

    topic: str
    msg_id: str
    seq: int
    replica: NodeRef
    stored: bool = True


#: Bytes a confirmation takes at most in a :class:`ReplicateAcks`: the msg_id's text
#: (its head and at most 64 digits) and the seq (at most a 9-byte integer). A message of
#: MAX_BATCH of them stays under ``batch_bytes`` at the smallest ``max_frame``
#: (tests/scribe/test_replicate_acks.py): the count bounds the bytes.
REPLICATE_ACK_BYTES = 2 + MAX_MSG_ID_CHARS + 9


@message("scribe.replicate_acks")
class ReplicateAcks(_TopicMessage):
    """A successor holds the events ``msg_ids`` (numbers ``seqs``, pairwise) of ``topic``
    on disk: the confirmations one sync made, in one message (a group commit syncs many
    copies at once), which the root takes together (the events they free go down the
    tree as one run). A single confirmation, or a copy not stored, is a
    :class:`ReplicateAck`."""

    topic: str
    msg_ids: tuple[str, ...]
    seqs: tuple[int, ...]
    replica: NodeRef

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        if not 0 < len(self.msg_ids) <= MAX_BATCH or len(self.seqs) != len(self.msg_ids):
            raise ValueError(f"confirmations come 1 to {MAX_BATCH} to a message, a seq "
                             "for each msg_id")
        for msg_id, seq in zip(self.msg_ids, self.seqs, strict=True):
            check_msg_id(msg_id)
            if seq < 1:
                raise ValueError("seq starts at 1")


@message("scribe.publish_ack")
class PublishAck(_TopicMessage):
    """The root numbered the event; ``root`` is where to send the topic's next events."""

    topic: str
    msg_id: str
    seq: int
    root: NodeRef

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        check_msg_id(self.msg_id)


@message("scribe.publish_refused")
class PublishRefused(_TopicMessage):
    """The root cannot store the reliable event ``msg_id`` (its disk is full, or failing):
    it is not acknowledged, and not numbered (or its number is not used). ``reason``:
    what the store said."""

    topic: str
    msg_id: str
    reason: str
    root: NodeRef

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        check_msg_id(self.msg_id)
        if len(self.reason) > MAX_REASON:
            raise ValueError(f"a refusal's reason is at most {MAX_REASON} characters")



@message("scribe.replica_sync")
class ReplicaSync(_TopicMessage):
    """The root's counter and retained events for a node that just became one of its
    replicas (or only the counter, when events were numbered without a copy)."""

    topic: str
    seq: int
    root: NodeRef
    events: tuple[EventBody, ...]

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        check_seq(self.seq, "seq")
        check_events(self.topic, self.events)


@message("scribe.restore")
class Restore(_TopicMessage):
    """A root that took the key over knowing nothing of the topic asks a member for the
    events it handled after ``after`` (answered with a :class:`ReplicaSync`)."""

    topic: str
    root: NodeRef
    after: int

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        check_seq(self.after, "after")

"""Scribe's wire messages. Each validates its fields when built, so a malformed one from a
peer fails decoding (``MessageError``) instead of reaching the protocol logic.

Routed through the DHT toward a topic's key: :class:`Join`, :class:`Publish`,
:class:`RootHandover`. Sent directly between tree neighbours: everything else.
"""

from __future__ import annotations

from chord.kbr import NodeRef
from overlay.core.messages import Message, message
from overlay.core.pubsub import MAX_MSG_ID_CHARS, check_msg_id, check_topic
from scribe.wire_records import (
    MAX_BATCH,
    MAX_GROUPS,
    MAX_REASON,
    MAX_REPLAY_PARTS,
    DigestWire,
    EventBody,
    check_events,
    check_path,
    check_seq,
)

# -- tree membership -----------------------------------------------------------------------


class _TopicMessage(Message):
    """Base of the messages about one topic: the topic name is checked on arrival."""

    topic: str

    def __post_init__(self) -> None:
        check_topic(self.topic)


class _PathMessage(_TopicMessage):
    """Base of the messages that tell a child its parent's path from the root."""

    path: tuple[int, ...]

    def __post_init__(self) -> None:
        # Slotted dataclasses are new classes: zero-argument super() cannot find them.
        _TopicMessage.__post_init__(self)
        check_path(self.path)


@message("scribe.join")
class Join(_TopicMessage):
    """Adopt ``joiner`` as a child. Routed toward the topic's key; a node in the tree stops
    it. A full node pushes it down to one of its children (``redirects`` counts that)."""

    topic: str
    joiner: NodeRef
    digest: DigestWire
    #: The joiner's count of digests it sent (the parent keeps the newest it got).
    version: int
    redirects: int = 0
    #: The highest seq the joiner's subtree has handled (None: none yet); a root that
    #: lost its counter numbers on above it.
    through: int | None = None

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        if self.redirects < 0 or self.version < 0:
            raise ValueError("redirects and version must be >= 0")
        check_seq(self.through, "through")


@message("scribe.join_ack")
class JoinAck(_PathMessage):
    """``parent`` adopted the receiver; ``path`` holds the ids from the root to ``parent``
    (empty while ``parent`` itself is not attached yet)."""

    topic: str
    parent: NodeRef
    path: tuple[int, ...]
    #: The parent's stream position (see :class:`Heartbeat`); None: it has none yet.
    through: int | None = None

    def __post_init__(self) -> None:
        _PathMessage.__post_init__(self)
        check_seq(self.through, "through")


@message("scribe.leave")
class Leave(_TopicMessage):
    """``child`` is no longer a child of the receiver."""

    topic: str
    child: NodeRef


@message("scribe.disown")
class Disown(_TopicMessage):
    """``parent`` does not count the receiver as its child (any more): re-join."""

    topic: str
    parent: NodeRef


@message("scribe.digest")
class DigestUpdate(_TopicMessage):
    """``child``'s subtree now wants ``digest`` (sent only when it changed)."""

    topic: str
    child: NodeRef
    digest: DigestWire
    version: int


@message("scribe.heartbeat")
class Heartbeat(_PathMessage):
    """The parent is alive; ``path`` is its current path from the root (for loop checks);
    ``digest_version`` is the newest digest it holds for the child (a child whose newer
    digest was lost sends it again). ``through``: the parent has handled every event up
    to this seq, and sent the child each one it needs up to ``prev`` (None: it vouches
    for nothing sent on this edge yet); a child behind ``prev`` lost some and pulls."""

    topic: str
    parent: NodeRef
    path: tuple[int, ...]
    digest_version: int
    prev: int | None = None
    through: int | None = None
    #: Every edge from the root to the parent holds the digests below it.
    settled: bool = False

    def __post_init__(self) -> None:
        _PathMessage.__post_init__(self)
        check_seq(self.prev, "prev")
        check_seq(self.through, "through")


@message("scribe.heartbeat_ack")
class HeartbeatAck(_TopicMessage):
    topic: str
    child: NodeRef


@message("scribe.handover")
class RootHandover(_TopicMessage):
    """Routed to a topic's key by a root that is no longer responsible for it: the new
    owner takes the sequence counter and adopts the old root (when it is in the tree)."""

    topic: str
    seq: int
    old_root: NodeRef
    digest: DigestWire | None
    version: int
    #: The events the old root retained, oldest first (the new owner keeps them).
    events: tuple[EventBody, ...] = ()
    #: The old root numbered the topic knowing its log (it was not recovering it nor
    #: standing in for another node): a new owner standing in stops waiting.
    live: bool = False

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        if self.seq < 0:
            raise ValueError("seq must be >= 0")
        check_events(self.topic, self.events)


# -- events ----------------------------------------------------------------------------------


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


@message("scribe.event")
class Event(Message):
    """An event going down a tree edge. ``plain``: deliver it to the receiver's matching
    plain subscriptions and pass it on. ``groups``: anycast groups the receiver's subtree
    must serve, each with exactly one member, or hand back (:class:`AnycastBack`)."""

    body: EventBody
    #: Overlay transmissions from the root (the receiver's depth in the tree).
    hop: int
    sender: NodeRef
    plain: bool
    groups: tuple[str, ...]
    #: For a plain copy: the sender sent this edge every event up to ``prev`` that the
    #: receiver needs, and nothing between ``prev`` and this one (None: it does not know
    #: what it sent before). A receiver that has not handled ``prev`` pulls.
    prev: int | None = None
    #: As in :class:`Heartbeat`: whether the sender is settled, and the version of the
    #: receiver's digest it holds (0: not told).
    settled: bool = False
    digest_version: int = 0

    def __post_init__(self) -> None:
        if self.body.seq is None:
            raise ValueError("an event in the tree carries its seq")
        check_seq(self.prev, "prev")
        if self.prev is not None and self.prev >= self.body.seq:
            raise ValueError("prev must be below the event's seq")
        if self.hop < 1:
            raise ValueError("an event below the root has hop >= 1")
        if len(self.groups) > MAX_GROUPS:
            raise ValueError(f"an event carries at most {MAX_GROUPS} groups")


@message("scribe.events")
class Events(_TopicMessage):
    """A run of plain copies going down one tree edge in one message: the
    :class:`Event` copies (plain, without groups) of ``bodies``, in seq order, the first
    vouching for ``prev`` and each next one for the one before it; ``hop``, ``sender``,
    ``settled`` and ``digest_version`` are theirs. The sender cuts a run into messages of
    a message's worth (:func:`message_runs`: at most ``MAX_BATCH`` events and
    ``batch_bytes`` of event costs); the receiver handles the copies in order, in one
    step (peer protocol version 4)."""

    topic: str
    bodies: tuple[EventBody, ...]
    hop: int
    sender: NodeRef
    prev: int | None = None
    settled: bool = False
    digest_version: int = 0

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        if not self.bodies:
            raise ValueError("a run of events carries at least one")
        check_events(self.topic, self.bodies)
        check_seq(self.prev, "prev")
        if self.prev is not None and self.prev >= (self.bodies[0].seq or 0):
            raise ValueError("prev must be below the first event's seq")
        if self.hop < 1:
            raise ValueError("an event below the root has hop >= 1")

    def copies(self) -> list[Event]:
        """The run as the single copies it stands for (checked as this message was)."""
        copies: list[Event] = []
        prev = self.prev
        for body in self.bodies:
            copies.append(Event.trusted(body, self.hop, self.sender, True, (), prev,
                                        self.settled, self.digest_version))
            prev = body.seq
        return copies


@message("scribe.pull")
class Pull(_TopicMessage):
    """``child`` has handled the stream up to ``after``: send what it lacks since. Sent
    to the parent, or (with ``digest``: what the child's subtree wants) routed to the
    topic's key, for the root to answer from its retention. ``fresh``: the child has no
    position yet (it missed the one it was told, and the copies after it): the parent
    answers from where the child was to start on their edge, ignoring ``after``."""

    topic: str
    child: NodeRef
    after: int
    digest: DigestWire | None = None
    fresh: bool = False

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        check_seq(self.after, "after")


@message("scribe.fill")
class Fill(_TopicMessage):
    """Answer to :class:`Pull`: ``events`` are every event in (``after``, ``through``]
    the child needs (oldest first); ``gone_before``: events below it are no longer
    retained anywhere the parent could ask (0: nothing is missing)."""

    topic: str
    parent: NodeRef
    after: int
    through: int
    events: tuple[EventBody, ...]
    gone_before: int = 0
    #: The root's answer to a routed pull (a catch-up after a join).
    routed: bool = False
    #: The sender holds events beyond ``through`` that did not fit this message: the
    #: receiver pulls again at once, from ``through``.
    more: bool = False

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        check_seq(self.after, "after")
        check_seq(self.through, "through")
        check_seq(self.gone_before, "gone_before")
        check_events(self.topic, self.events)
        if self.events and not (self.after < (self.events[0].seq or 0)
                                and (self.events[-1].seq or 0) <= self.through):
            raise ValueError("a fill's events lie in (after, through]")


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


@message("scribe.replay")
class ReplayRequest(_TopicMessage):
    """Routed to the topic's key: subscription ``sub`` of ``requester`` (filter
    ``filter``) wants the retained events, the ``last`` N matching ones or those from
    seq ``since_seq`` on (exactly one of the two is set)."""

    topic: str
    requester: NodeRef
    sub: int
    filter: str
    last: int | None
    since_seq: int | None

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        if (self.last is None) == (self.since_seq is None):
            raise ValueError("a replay asks for either the last N events or since a seq")
        check_seq(self.last, "last")
        check_seq(self.since_seq, "since_seq")
        if len(self.filter) > 65536:
            raise ValueError("filter too long")


@message("scribe.replay_fill")
class ReplayFill(_TopicMessage):
    """The root's answer to a :class:`ReplayRequest`: matching retained events, oldest
    first, all numbered up to ``through``."""

    topic: str
    sub: int
    root: NodeRef
    through: int
    events: tuple[EventBody, ...]
    #: An answer too large for one message comes in ``parts`` messages, each a
    #: message's worth (oldest first: part 0 holds the oldest events).
    part: int = 0
    parts: int = 1

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        check_seq(self.through, "through")
        check_events(self.topic, self.events)
        if not 0 <= self.part < self.parts <= MAX_REPLAY_PARTS:
            raise ValueError(f"a replay answer has 1..{MAX_REPLAY_PARTS} parts, this one "
                             f"says part {self.part} of {self.parts}")


@message("scribe.anycast_back")
class AnycastBack(_TopicMessage):
    """``child``'s subtree has no member of ``groups`` that matches event ``msg_id``."""

    topic: str
    msg_id: str
    groups: tuple[str, ...]
    child: NodeRef

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        check_msg_id(self.msg_id)
        if len(self.groups) > MAX_GROUPS:
            raise ValueError(f"at most {MAX_GROUPS} groups")


@message("scribe.tree_query")
class TreeQuery(_TopicMessage):
    """A runtime-level request (``overlay tree``): this node's place in ``topic``'s tree."""

    topic: str


@message("scribe.tree_info")
class TreeInfo(Message):
    """Answer to :class:`TreeQuery`. ``role`` is None when the node is not in the tree."""

    topic: str
    node: NodeRef
    role: str | None
    parent: NodeRef | None
    depth: int | None
    children: tuple[NodeRef, ...]
    #: Local subscriptions to the topic on this node.
    subscriptions: int

"""Scribe's wire messages: tree membership, events going down a tree, repair, replay
and queries. Each validates its fields when built, so a malformed one from a peer fails
decoding (``MessageError``) instead of reaching the protocol logic. The messages
between publishers, a topic's root and its replicas are in
:mod:`scribe.publish_messages`; durable consumers' in :mod:`scribe.consumer_messages`.

Some are routed through the DHT toward a topic's key (:class:`Join`,
:class:`~scribe.publish_messages.Publish`, :class:`RootHandover`, :class:`ReplayRequest`,
a :class:`Pull` that carries a digest); the others go straight to a node.
"""

from __future__ import annotations

from chord.kbr import NodeRef
from overlay.core.messages import Message, message
from overlay.core.pubsub import check_msg_id, check_topic
from scribe.wire_records import (
    MAX_GROUPS,
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

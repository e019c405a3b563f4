"""Scribe's wire messages. Each validates its fields when built, so a malformed one from a
peer fails decoding (``MessageError``) instead of reaching the protocol logic.

Routed through the DHT toward a topic's key: :class:`Join`, :class:`Publish`,
:class:`RootHandover`. Sent directly between tree neighbours: everything else.
"""

from __future__ import annotations

from typing import Any

from chord.kbr import NodeRef
from matching import Summary
from overlay.core.messages import Message, Record, message, record

#: Longest topic name, in characters.
MAX_TOPIC_CHARS = 1024
#: Longest anycast group name, in characters.
MAX_GROUP_CHARS = 256
#: Most groups one subtree digest may advertise.
MAX_GROUPS = 4096
#: Longest message id (hex text).
MAX_MSG_ID_CHARS = 64
#: Deepest tree a path to the root may describe.
MAX_PATH = 1024

_HEX_DIGITS = frozenset("0123456789abcdef")

AttrValue = str | int | float | bool
Attrs = dict[str, AttrValue]


def check_topic(topic: str) -> None:
    if not 0 < len(topic) <= MAX_TOPIC_CHARS:
        raise ValueError(f"a topic has 1..{MAX_TOPIC_CHARS} characters, got {len(topic)}")


def check_group(group: str) -> None:
    if not 0 < len(group) <= MAX_GROUP_CHARS:
        raise ValueError(f"a group has 1..{MAX_GROUP_CHARS} characters, got {len(group)}")


def check_msg_id(msg_id: str) -> None:
    if not 0 < len(msg_id) <= MAX_MSG_ID_CHARS or not set(msg_id) <= _HEX_DIGITS:
        raise ValueError(f"a msg_id is 1..{MAX_MSG_ID_CHARS} lowercase hex digits, "
                         f"got {msg_id[:80]!r}")


def check_attrs(attrs: dict[str, Any]) -> None:
    for name, value in attrs.items():
        if not isinstance(name, str) or not isinstance(value, str | int | float | bool):
            raise ValueError(f"attribute {name!r}: names are text, values text/int/float/bool")


# -- records carried inside messages ---------------------------------------------------------


@record
class GroupDigestWire(Record):
    """One anycast group's members below an edge: their filters, and how near the nearest is."""

    summary: dict[str, Any]
    #: Tree edges from the advertising node down to its nearest member (0: a local one).
    distance: int

    def __post_init__(self) -> None:
        Summary.from_wire(self.summary)  # SummaryDecodeError is a ValueError: rejected
        if not 0 <= self.distance <= MAX_PATH:
            raise ValueError(f"group distance must be within 0..{MAX_PATH}")


@record
class DigestWire(Record):
    """What a subtree wants: the summary of its plain subscriptions and its groups."""

    plain: dict[str, Any]
    groups: dict[str, GroupDigestWire]

    def __post_init__(self) -> None:
        Summary.from_wire(self.plain)
        if len(self.groups) > MAX_GROUPS:
            raise ValueError(f"a digest advertises at most {MAX_GROUPS} groups")
        for group in self.groups:
            check_group(group)


@record
class EventBody(Record):
    """An event as the root numbered it (``seq`` None until then); copied, never changed,
    on its way down the tree."""

    topic: str
    msg_id: str
    seq: int | None
    attrs: Attrs
    payload: bytes
    #: Hex id of the node where the event was published.
    publisher: str
    #: Publish time the publisher's application gave.
    ts: float

    def __post_init__(self) -> None:
        check_topic(self.topic)
        check_msg_id(self.msg_id)
        check_attrs(self.attrs)
        if self.seq is not None and self.seq < 1:
            raise ValueError("seq starts at 1")


def check_path(path: tuple[int, ...]) -> None:
    if len(path) > MAX_PATH:
        raise ValueError(f"a path to the root has at most {MAX_PATH} nodes")


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

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        if self.redirects < 0 or self.version < 0:
            raise ValueError("redirects and version must be >= 0")


@message("scribe.join_ack")
class JoinAck(_PathMessage):
    """``parent`` adopted the receiver; ``path`` holds the ids from the root to ``parent``
    (empty while ``parent`` itself is not attached yet)."""

    topic: str
    parent: NodeRef
    path: tuple[int, ...]


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
    digest was lost sends it again)."""

    topic: str
    parent: NodeRef
    path: tuple[int, ...]
    digest_version: int


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

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        if self.seq < 0:
            raise ValueError("seq must be >= 0")


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
    """A successor holds the event ``msg_id`` (number ``seq``) of ``topic``."""

    topic: str
    msg_id: str
    seq: int
    replica: NodeRef


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

    def __post_init__(self) -> None:
        if self.body.seq is None:
            raise ValueError("an event in the tree carries its seq")
        if self.hop < 1:
            raise ValueError("an event below the root has hop >= 1")
        if len(self.groups) > MAX_GROUPS:
            raise ValueError(f"an event carries at most {MAX_GROUPS} groups")


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

"""Wire messages of the unstructured mode. Each validates its fields when built, so a
malformed one from a peer fails decoding (``MessageError``) before any protocol logic.

Events: :class:`Event` (one event on its way, flooding / walks / blind counter / pbcast's
first phase), :class:`Rumor` and :class:`Feedback` (push rumor mongering), :class:`Digest`,
:class:`Request` and :class:`Repair` (anti-entropy and pbcast repair). Peer sampling
(HyParView): :class:`Join`, :class:`ForwardJoin`, :class:`Link`,
:class:`NeighbourRequest`, :class:`NeighbourReply`, :class:`Disconnect`,
:class:`Shuffle`, :class:`ShuffleReply`, :class:`Heartbeat`. Selective routing:
:class:`Interest`.
"""

from __future__ import annotations

from typing import Any

from matching.summary import DEFAULT_MAX_FILTERS
from overlay.core.limits import SizeLimits, batches, event_cost
from overlay.core.messages import Message, Record, message, record
from overlay.core.pubsub import Attrs, check_attrs, check_hex, check_topic
from overlay.gossip.summaries import part_from_wire

MAX_ADDRESS_CHARS = 256
#: Most events one batch (rumor push, repair answer) or one digest may carry.
MAX_BATCH = 4096
#: Most addresses one peer sampling message may carry.
MAX_PEERS = 256
#: Longest path an event may have travelled, and longest walk a message may ask for.
MAX_HOPS = 1 << 16
#: Most topics, layers (hops) and named subscriber nodes per topic one interest advert
#: may carry.
MAX_INTEREST_TOPICS = 4096
MAX_RADIUS = 16
MAX_NAMED = 1024


def check_address(address: str) -> None:
    if not 0 < len(address) <= MAX_ADDRESS_CHARS:
        raise ValueError(f"an address has 1..{MAX_ADDRESS_CHARS} characters")


def check_hops(value: int, what: str) -> None:
    if not 0 <= value <= MAX_HOPS:
        raise ValueError(f"{what} must be within 0..{MAX_HOPS}, got {value}")


def _check_count(items: tuple[Any, ...] | dict[str, Any], limit: int, what: str) -> None:
    if len(items) > limit:
        raise ValueError(f"at most {limit} {what}, got {len(items)}")


# -- events ------------------------------------------------------------------------------


@record
class EventBody(Record):
    """An event as its publisher's node accepted it; copied unchanged from node to node."""

    topic: str
    msg_id: str
    attrs: Attrs
    payload: bytes
    #: Hex id of the node where it was published.
    publisher: str
    #: Publish time the publishing application gave.
    ts: float

    def __post_init__(self) -> None:
        check_topic(self.topic)
        check_hex(self.msg_id, "a msg_id")
        check_hex(self.publisher, "a publisher id")
        check_attrs(self.attrs)

    def cost(self) -> int:
        """Bytes this event may take in a multi-event message (the size model)."""
        return event_cost(self.topic, self.attrs, self.payload)


def id_cost(text: str) -> int:
    """Bytes a msg_id or topic takes in a digest or request (with its CBOR header)."""
    return len(text.encode()) + 3


@record
class Carried(Record):
    """One event in a batch, with the transmissions it has made (this one included)."""

    body: EventBody
    hop: int
    #: Selective routing: the event reached the sender along links whose interest matched.
    guided: bool = False

    def __post_init__(self) -> None:
        check_hops(self.hop, "hop")

    def cost(self) -> int:
        return self.body.cost()


def carried_runs(items: list[Carried], sizes: SizeLimits) -> list[list[Carried]]:
    """``items`` in order, cut into runs of a message's worth each (a rumor push, a
    repair)."""
    return list(batches(items, Carried.cost, sizes.batch_bytes, MAX_BATCH))


@message("gossip.event")
class Event(Message):
    """One event on its way: flooding, random walk, blind counter, pbcast's first phase."""

    body: EventBody
    #: Transmissions from the publisher's node, this one included (TRACES.md ``hop``).
    hop: int
    #: Transmissions after which nobody forwards it any more (None: no such limit).
    ttl: int | None
    guided: bool = False

    def __post_init__(self) -> None:
        check_hops(self.hop, "hop")
        if self.ttl is not None:
            check_hops(self.ttl, "ttl")


@message("gossip.rumor")
class Rumor(Message):
    """Hot rumors pushed to a peer, which answers with :class:`Feedback` if it knew any."""

    items: tuple[Carried, ...]

    def __post_init__(self) -> None:
        _check_count(self.items, MAX_BATCH, "events in a rumor push")


@message("gossip.feedback")
class Feedback(Message):
    """The msg_ids of a :class:`Rumor` push that the peer already had."""

    known: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_count(self.known, MAX_BATCH, "msg_ids in feedback")
        for msg_id in self.known:
            check_hex(msg_id, "a msg_id")


@message("gossip.digest")
class Digest(Message):
    """The events the sender holds (msg_ids per topic). ``push``: ask me for what you
    lack; ``pull``: send me what I lack."""

    ids: dict[str, tuple[str, ...]]
    push: bool
    pull: bool

    def __post_init__(self) -> None:
        _check_count(self.ids, MAX_BATCH, "topics in a digest")
        if sum(len(ids) for ids in self.ids.values()) > MAX_BATCH:
            raise ValueError(f"a digest lists at most {MAX_BATCH} events")
        for topic, ids in self.ids.items():
            check_topic(topic)
            for msg_id in ids:
                check_hex(msg_id, "a msg_id")


@message("gossip.request")
class Request(Message):
    """The msg_ids of a digest that the asking node lacks."""

    ids: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_count(self.ids, MAX_BATCH, "msg_ids in a request")
        for msg_id in self.ids:
            check_hex(msg_id, "a msg_id")


@message("gossip.repair")
class Repair(Message):
    """Events retransmitted because a digest exchange showed the receiver lacks them;
    the receiver delivers them and spreads them no further."""

    items: tuple[Carried, ...]

    def __post_init__(self) -> None:
        _check_count(self.items, MAX_BATCH, "events in a repair")


# -- peer sampling (HyParView) --------------------------------------------------------------


def _check_peers(peers: tuple[str, ...]) -> None:
    _check_count(peers, MAX_PEERS, "peers")
    for address in peers:
        check_address(address)


@message("gossip.join")
class Join(Message):
    """A new node asks the receiver to take it as a neighbour and announce it."""


@message("gossip.forward_join")
class ForwardJoin(Message):
    """A random walk announcing the new node ``joiner``; ``ttl`` steps are left."""

    joiner: str
    ttl: int

    def __post_init__(self) -> None:
        check_address(self.joiner)
        check_hops(self.ttl, "ttl")


@message("gossip.link")
class Link(Message):
    """The sender has made the receiver a neighbour: the receiver does the same."""


@message("gossip.neighbour_request")
class NeighbourRequest(Message):
    """Asks to become neighbours; ``high_priority`` (the sender has no neighbour left)
    must be accepted even by a node whose active view is full."""

    high_priority: bool


@message("gossip.neighbour_reply")
class NeighbourReply(Message):
    accepted: bool


@message("gossip.disconnect")
class Disconnect(Message):
    """The sender no longer counts the receiver as a neighbour."""


@message("gossip.shuffle")
class Shuffle(Message):
    """A random walk carrying a sample of ``origin``'s views, answered at its end."""

    origin: str
    peers: tuple[str, ...]
    ttl: int

    def __post_init__(self) -> None:
        check_address(self.origin)
        _check_peers(self.peers)
        check_hops(self.ttl, "ttl")


@message("gossip.shuffle_reply")
class ShuffleReply(Message):
    peers: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_peers(self.peers)


@message("gossip.heartbeat")
class Heartbeat(Message):
    """Keeps a quiet link tested: a dead neighbour shows up as unreachable."""


# -- selective routing ----------------------------------------------------------------------


@record
class Named(Record):
    """One subscriber node as an advert's sender knows it: its id (TRACES.md hex), the
    hops from the sender to it (0: the sender itself), and the summary (``matching.Summary``
    wire form) of its filters for the topic."""

    node: str
    hops: int
    summary: dict[str, Any]

    def __post_init__(self) -> None:
        check_hex(self.node, "a subscriber node id")
        if not 0 <= self.hops < MAX_RADIUS:
            raise ValueError(f"hops must be within 0..{MAX_RADIUS - 1}, got {self.hops}")
        part_from_wire(self.summary, DEFAULT_MAX_FILTERS)  # malformed: ValueError


@record
class TopicInterest(Record):
    """What may match through the sender for one topic: the nearest subscriber nodes by
    name, and the rest as anonymous layers (layer d: the summary of the interests d hops
    beyond the sender)."""

    named: tuple[Named, ...] = ()
    layers: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        _check_count(self.named, MAX_NAMED, "named subscribers in an interest advert")
        _check_count(self.layers, MAX_RADIUS, "layers in an interest advert")
        for layer in self.layers:
            part_from_wire(layer, DEFAULT_MAX_FILTERS)  # malformed: ValueError


@message("gossip.interest")
class Interest(Message):
    """What may match through the sender, per topic. Replaces the previous advert.
    ``ask``: the sender has no advert of the receiver's (a new link on its side), so the
    receiver sends its whole advert back even if it sent the same one before."""

    topics: dict[str, TopicInterest]
    ask: bool = False

    def __post_init__(self) -> None:
        _check_count(self.topics, MAX_INTEREST_TOPICS, "topics in an interest advert")
        for topic in self.topics:
            check_topic(topic)

"""What Scribe's messages carry and share: the event body (an event as its root numbered
it), the digests a subtree advertises, the bounds of a message's run of events, and the
field checks several messages make. Split from :mod:`scribe.messages`, which holds the
messages themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from matching import Summary
from overlay.core.limits import GROUP_BYTES, SizeLimits, batches, event_cost
from overlay.core.messages import Record, record
from overlay.core.pubsub import (
    MAX_TOPIC_CHARS,
    Attrs,
    check_attrs,
    check_group,
    check_hex,
    check_msg_id,
    check_topic,
    check_ttl,
    is_hex_id,
    is_node_hex,
)

#: Most groups one subtree digest may advertise.
MAX_GROUPS = 4096
#: Characters of a store's error a refusal carries (PublishRefused.reason).
MAX_REASON = 200
#: Deepest tree a path to the root may describe.
MAX_PATH = 1024


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
    #: The subtree has members of groups not listed (the digest was cut to its byte
    #: bound, nearest groups kept): any group may be served below.
    more_groups: bool = False

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

    reuse_wire = True  # one body goes to each child in turn: its map is made once

    topic: str
    msg_id: str
    seq: int | None
    attrs: Attrs
    payload: bytes
    #: Hex id of the node where the event was published.
    publisher: str
    #: Publish time the publisher's application gave.
    ts: float
    #: Seconds after ``ts`` the event is not delivered any more (first time or again),
    #: and leaves the logs (API ``publish``'s ``ttl``); None: no end.
    ttl: float | None = None
    #: The msg_id of the event its root's log held at ``seq - 1`` when it gave this one
    #: its number (None: none was there, or the event was numbered before links were
    #: kept). It ties each number to the one before it, so that a log taking in another
    #: log's events tells its own numbering from another root's (:mod:`scribe.merge`).
    prev: str | None = None

    def __post_init__(self) -> None:
        # The checks' common outcome tested here, their calls made to raise (a body is
        # made per event, and a call costs more than the test).
        if not 0 < len(self.topic) <= MAX_TOPIC_CHARS:
            check_topic(self.topic)
        if not is_hex_id(self.msg_id):
            check_msg_id(self.msg_id)
        if self.prev is not None and not is_hex_id(self.prev):
            check_hex(self.prev, "prev (a msg_id)")
        if not is_node_hex(self.publisher):
            check_hex(self.publisher, "a publisher id")
        if self.attrs:
            check_attrs(self.attrs)
        if self.seq is not None and self.seq < 1:
            raise ValueError("seq starts at 1")
        if self.ttl is not None:
            check_ttl(self.ttl)

    def expired(self, wall: float) -> bool:
        """Whether the event's ``ttl`` has passed at wall-clock time ``wall`` (the clock
        of ``ts``): the one rule for every place that delivers, offers or keeps it."""
        return self.ttl is not None and self.ts + self.ttl <= wall

    def follows(self, before: EventBody | None) -> bool:
        """Whether this event may stand right after ``before`` (what a log holds at
        ``seq - 1``; None: nothing) in one root's numbering: only a known ``prev`` that
        names another event shows it may not."""
        return self.prev is None or before is None or before.msg_id == self.prev

    def cost(self) -> int:
        """Bytes this event may take in a multi-event message (the size model)."""
        return event_cost(self.topic, self.attrs, self.payload)

    def numbered(self, seq: int, prev: str | None) -> EventBody:
        """This event with the root's number, tied to the event before it (``prev``):
        the other fields were checked when this one was made, so the copy skips
        ``__post_init__`` (the root does it per event)."""
        if seq < 1:
            raise ValueError("seq starts at 1")
        body: EventBody = EventBody.trusted(self.topic, self.msg_id, seq, self.attrs,
                                            self.payload, self.publisher, self.ts, self.ttl,
                                            prev)
        return body


def numbered_run(bodies: Iterable[EventBody], first: int, prev: str | None
                 ) -> list[EventBody]:
    """``bodies`` numbered ``first``, ``first + 1``, ... in order, each tied to the event
    before it: the first to ``prev`` (what its log holds at ``first - 1``)."""
    run: list[EventBody] = []
    for seq, body in enumerate(bodies, first):
        run.append(body.numbered(seq, prev))
        prev = body.msg_id
    return run


#: Most events one message (a fill, a handover, a replica sync) carries. Senders also
#: bound such a message by bytes (``SizeLimits.batch_bytes``): small events are counted,
#: large ones weighed.
MAX_BATCH = 512


def group_cost(group: str) -> int:
    """Bytes a group name takes in an event copy's ``groups`` (with its CBOR header)."""
    return len(group.encode()) + 3


def group_runs(groups: tuple[str, ...] | list[str]) -> list[tuple[str, ...]]:
    """``groups`` split into runs of at most ``GROUP_BYTES`` each (one per copy)."""
    return [tuple(run) for run in batches(groups, group_cost, GROUP_BYTES)] or [()]


#: Most messages one replay answer is split into (a root retains at most ``retain_count``
#: events; a larger count of parts is no answer of ours).
MAX_REPLAY_PARTS = 1 << 20


def message_runs(bodies: list[EventBody] | tuple[EventBody, ...],
                 sizes: SizeLimits) -> list[list[EventBody]]:
    """``bodies`` in order, cut into runs of a message's worth each (at least one run,
    maybe empty: a message that carries none still goes)."""
    return list(batches(bodies, EventBody.cost, sizes.batch_bytes, MAX_BATCH)) or [[]]


def check_seq(seq: int | None, name: str) -> None:
    if seq is not None and seq < 0:
        raise ValueError(f"{name} must be >= 0, got {seq}")


def check_events(topic: str, events: tuple[EventBody, ...]) -> None:
    """A batch of retained events: numbered, of ``topic``, in increasing seq order."""
    if len(events) > MAX_BATCH:
        raise ValueError(f"at most {MAX_BATCH} events in one message")
    last = 0
    for event in events:
        if event.seq is None or event.seq <= last or event.topic != topic:
            raise ValueError("batched events are numbered, of the message's topic and "
                             "in increasing seq order")
        last = event.seq


def check_path(path: tuple[int, ...]) -> None:
    if len(path) > MAX_PATH:
        raise ValueError(f"a path to the root has at most {MAX_PATH} nodes")

"""Size limits shared by the wire codec, the transport, the cores and the API server.

The size model (docs/API.md, "Sizes"): everything follows from one number, ``max_frame``,
the largest frame body a node accepts from a peer or a client.

- An event's **size** is what its publisher controls: payload bytes, plus the topic's
  UTF-8 bytes, plus for each attribute its name's UTF-8 bytes and its value's size
  (text: UTF-8 bytes; integer and float: 8; boolean: 1). :func:`event_size` is its one
  definition.
- ``max_event = max_frame - ENVELOPE_BYTES``: every peer message that carries one event
  (a publish on its way to the root, a copy down a tree edge, a replica's copy, a
  gossip push), and every API frame that carries one (publish, notify), fits in
  ``max_frame`` with its envelope: CBOR headers of the event's fields, message type,
  node references, routing fields, anycast groups (at most ``GROUP_BYTES`` of them in
  one copy), the transport's request keys.
- ``max_payload = max_event - ATTRS_ROOM_BYTES``: the largest payload, so that an event
  at the payload limit still has room for a topic and some attributes.
- Messages that carry several events (gap fills, replays, replica syncs, restores,
  handovers, gossip pushes and repairs) take events while their :func:`event_cost`
  adds up to at most ``batch_bytes``; the sender splits the rest across further
  messages. One event at ``max_event`` always fits one such message alone.

Every node of one overlay must use the same ``max_frame`` (the peer handshake refuses a
peer with another one): a copy that fits here must fit at every hop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

#: Largest frame body (bytes after the 4-byte length) accepted by default: 1 MiB.
DEFAULT_MAX_FRAME = 1 << 20
#: Smallest ``max_frame`` a node may be configured with: the envelope and the room for
#: attributes leave a useful payload.
MIN_MAX_FRAME = 1 << 16

#: Bytes of a frame that carries one event kept for everything but the event's size.
ENVELOPE_BYTES = 16384
#: Bytes of an event at the payload limit left for its topic and attributes.
ATTRS_ROOM_BYTES = 16384
#: Most bytes of anycast group names one copy of an event carries down an edge; more
#: go in further, anycast-only copies. Included in ``ENVELOPE_BYTES``.
GROUP_BYTES = 8192
#: Bytes of a multi-event message kept for its own fields (topic, seqs, node refs).
BATCH_ENVELOPE_BYTES = 8192
#: A bound on the CBOR an event adds beside its size inside a message: the map keys and
#: fixed fields of the event body (msg_id, prev, publisher, seq, ts, ttl, hop), and per attribute
#: the headers of its name and value.
EVENT_OVERHEAD_BYTES = 512
ATTR_OVERHEAD_BYTES = 16

#: Deepest nesting of CBOR arrays/maps we decode; our messages nest only a few levels.
MAX_CBOR_DEPTH = 32

#: Version of the peer-to-peer protocol, exchanged in the connection handshake. 2: a
#: frame may carry a bundle of messages (overlay/runtime/transport.py), which a node of
#: version 1 would skip as one bad message. 3: a run of publishes goes to a topic's
#: cached root in one message (``scribe.publishes``), and a root handover says whether
#: the old root was live (``RootHandover.live``): messages or fields a node of version 2
#: would refuse. 4: a run of plain copies goes down a tree edge in one message
#: (``scribe.events``), which a node of version 3 would refuse. 5: an event body names the
#: event its root numbered before it (``EventBody.prev``), a field a node of version 4
#: would refuse.
PEER_PROTOCOL_VERSION = 6

T = TypeVar("T")


def value_size(value: str | int | float | bool) -> int:
    """An attribute value's share of an event's size."""
    if type(value) is str:
        return len(value.encode())
    if type(value) is bool:
        return 1
    return 8


def event_size(topic: str, attrs: Mapping[str, Any], payload: bytes) -> int:
    """An event's size as the size model counts it (module docstring)."""
    size = len(payload) + len(topic.encode())
    for name, value in attrs.items():
        size += len(name.encode()) + value_size(value)
    return size


def event_cost(topic: str, attrs: Mapping[str, Any], payload: bytes) -> int:
    """Bytes an event may take inside a multi-event message: its size and a bound on
    the CBOR around it."""
    return (event_size(topic, attrs, payload) + EVENT_OVERHEAD_BYTES
            + ATTR_OVERHEAD_BYTES * len(attrs))


@dataclass(frozen=True)
class SizeLimits:
    """The limits that follow from one ``max_frame``."""

    max_frame: int = DEFAULT_MAX_FRAME

    def __post_init__(self) -> None:
        if self.max_frame < MIN_MAX_FRAME:
            raise ValueError(f"max_frame must be at least {MIN_MAX_FRAME} bytes, "
                             f"got {self.max_frame}")

    # Worked out once per instance (frozen: they never change): the API looks at
    # max_payload for every event it is given, and a property chain is two calls.
    @cached_property
    def max_event(self) -> int:
        return self.max_frame - ENVELOPE_BYTES

    @cached_property
    def max_payload(self) -> int:
        return self.max_event - ATTRS_ROOM_BYTES

    @property
    def digest_bytes(self) -> int:
        """Bytes a subtree's digest may take in a message (a JOIN, a digest update): past
        it the farthest groups are left out and the digest says so."""
        return self.max_frame // 4

    @property
    def batch_bytes(self) -> int:
        """The event costs one multi-event message may carry."""
        return self.max_frame - BATCH_ENVELOPE_BYTES

    def check_event(self, topic: str, attrs: Mapping[str, Any], payload: bytes) -> None:
        """Raise :class:`TooLargeError` for an event over the payload or event limit."""
        if len(payload) > self.max_payload:
            raise TooLargeError(f"payload of {len(payload)} bytes is over the limit of "
                                f"{self.max_payload} (max_payload)")
        size = event_size(topic, attrs, payload)
        if size > self.max_event:
            raise TooLargeError(f"event of {size} bytes (payload, topic and attributes) is "
                                f"over the limit of {self.max_event} (max_event)")

    def to_wire(self) -> dict[str, int]:
        """The limits a client needs (the ``hello`` reply)."""
        return {"max_frame": self.max_frame, "max_event": self.max_event,
                "max_payload": self.max_payload}


class TooLargeError(ValueError):
    """An event over the size model's limits (API error ``too_large``)."""


def batches(items: Iterable[T], cost: Callable[[T], int], budget: int,
            max_count: int | None = None) -> Iterator[list[T]]:
    """Split ``items``, in order, into runs whose costs add up to at most ``budget``
    (and of at most ``max_count`` items). An item that alone costs more than the budget
    makes a run of its own: the caller's size model must not let one through."""
    run: list[T] = []
    used = 0
    for item in items:
        size = cost(item)
        if run and (used + size > budget or (max_count is not None and len(run) >= max_count)):
            yield run
            run, used = [], 0
        run.append(item)
        used += size
    if run:
        yield run

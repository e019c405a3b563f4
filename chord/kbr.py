"""The key-based routing (KBR) API of the "common API" for structured overlays
(Dabek et al., IPTPS 2003), which Scribe and other applications are written against.

The Chord core is the *host*: it owns the ring state and offers down-calls
(:class:`KbrHost`). An application plugged into it implements the up-calls
(:class:`KbrApplication`). Both are sans-IO: the host's effect queue carries what
the application asks for (sends, traces, deliveries), and the host folds the
application's timers into its own ``next_deadline()``.

Routing contract:
- ``route(now, key, msg)`` sends ``msg`` hop by hop toward ``succ(key)``.
- At every node the message passes through, other than the one that called
  ``route``, the host calls ``app.forward(now, key, msg, next_hop)`` before passing it
  on. The application returns the message to forward (the same one or a changed
  one), or ``None`` to stop it there (Scribe stops a JOIN at a node already in the tree).
- At the node responsible for ``key`` the host calls ``app.deliver(now, key, msg,
  hops)``; when the caller of ``route`` is itself responsible, ``deliver`` is called at
  once with ``hops == 0``.
- A next hop that turns out unreachable is removed from the host's tables and the
  message is routed around it; the application does not see that.
- A route that asks for an acknowledgement (``ack``) and gets none within
  ``route_timeout`` comes back through ``app.on_route_failed(now, key, msg)``: lost
  on the way (or its ack was), or nobody took it; the application may route it again.
- Messages an application sends with ``send_direct`` arrive at the other side's
  application through ``on_direct``; failures come back through ``on_unreachable``.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from overlay.core.ids import DEFAULT_ID_BITS as MAX_ID_BITS
from overlay.core.messages import Message, Record, record
from overlay.core.storage import StorageOp

#: Longest advertised address accepted (a host name of 253 characters and a port).
MAX_ADDRESS_LENGTH = 260


@record
class NodeRef(Record):
    """A node as the overlay knows it: ring identifier and advertised address."""

    # The same few references travel in nearly every message (this node's own, its
    # neighbours'): encoded once, decoded once.
    reuse_wire = True
    intern_decoded = True

    id: int
    addr: str

    def __post_init__(self) -> None:
        # Peers send NodeRefs; refuse ones no ring could hold (decoding turns this
        # ValueError into a MessageError blaming the peer).
        if not 0 <= self.id < 1 << MAX_ID_BITS:
            raise ValueError(f"node id {self.id} is outside the ring")
        if not 0 < len(self.addr) <= MAX_ADDRESS_LENGTH:
            raise ValueError(f"node address must be 1..{MAX_ADDRESS_LENGTH} characters")


class KbrHost(Protocol):
    """Down-calls the Chord core offers to its application."""

    #: This node.
    local: NodeRef
    #: Identifier bits of the ring (m).
    bits: int
    #: The seeded random source this node was given (applications share it).
    rng: random.Random

    def route(self, now: float, key: int, msg: Message, *, ack: bool | None = None) -> None:
        """Send ``msg`` toward the node responsible for ``key`` (see module docs);
        ``ack``: ask for an acknowledgement (None: as the host is configured)."""
        ...

    def send_direct(self, dest: str, msg: Message) -> None:
        """Send ``msg`` to the node at address ``dest`` in one hop."""
        ...

    def is_responsible(self, key: int) -> bool:
        """Whether this node is ``succ(key)`` as far as it knows (pred < key <= self)."""
        ...

    def replica_set(self, key: int, max_rank: int) -> list[NodeRef]:
        """Up to ``max_rank`` nodes that would take over ``key`` next (successor list)."""
        ...

    def predecessor(self) -> NodeRef | None: ...

    def successor(self) -> NodeRef: ...

    def trace(self, ev: str, **fields: Any) -> None:
        """Append a trace record (TRACES.md) for this node."""
        ...

    def deliver_local(self, sub: int, event: Any) -> None:
        """Emit a ``Deliver`` effect: hand ``event`` to local subscription ``sub``."""
        ...

    def notice(self, kind: str, **data: Any) -> None:
        """Emit a ``Notice`` effect for the local application layer (API server)."""
        ...

    def persist(self, op: StorageOp) -> None:
        """Emit a ``Persist`` effect: apply ``op`` to this node's store (its number is
        the count of persists so far; ``on_synced`` reports how far they are durable)."""
        ...

    def want_sync(self, through: int) -> None:
        """Emit a ``SyncWanted`` effect: something waits for the persists up to the
        ``through``-th, so they are applied without delay."""
        ...


class KbrApplication(Protocol):
    """Up-calls an application plugged into the Chord core implements."""

    def forward(self, now: float, key: int, msg: Message, next_hop: NodeRef) -> Message | None:
        """A routed message passes through; return it (maybe changed) or None to stop it."""
        ...

    def deliver(self, now: float, key: int, msg: Message, hops: int) -> None:
        """A routed message reached the node responsible for its key."""
        ...

    def on_direct(self, now: float, src: str, msg: Message) -> None:
        """A message another node's application sent with ``send_direct``."""
        ...

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        """A ``send_direct`` to ``dest`` failed."""
        ...

    def on_route_failed(self, now: float, key: int, msg: Message) -> None:
        """A ``route`` of ``msg`` that asked for an ack got none in ``route_timeout``."""
        ...

    def update(self, now: float, node: NodeRef, joined: bool) -> None:
        """The neighbour set changed: ``node`` became (joined) or stopped being a
        predecessor/successor-list neighbour. The key range this node is responsible
        for may have changed; ``is_responsible`` tells the new answer."""
        ...

    def on_timer(self, now: float) -> None: ...

    def next_deadline(self) -> float | None: ...

    def on_synced(self, now: float, through: int) -> None:
        """The first ``through`` of this node's persists are on stable storage."""
        ...

    def on_storage_failed(self, now: float, through: int, reason: str) -> None:
        """The events of this node's persists up to ``through`` (those not reported
        synced) could not be stored (``overlay.core.storage``)."""
        ...

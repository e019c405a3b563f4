"""The events a node holds: duplicate suppression, and what digests list and repairs resend.

An event is held from its first copy for ``memory`` seconds, then forgotten (memory
stays bounded however long the node runs); past ``max_events`` the oldest go first.
Digests list only events first seen within ``digest_window`` (at most half of
``memory``), so an event a peer may still offer is never one this node has forgotten
and would take for new.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from overlay.gossip.messages import EventBody


@dataclass(slots=True)
class HeldEvent:
    body: EventBody
    #: Transmissions the first copy had made (0 at the publisher's node).
    hop: int
    #: When this node first had it (driver's clock).
    first_seen: float
    #: Selective routing: the first copy came along links whose interest matched.
    guided: bool = False
    #: The neighbour the first copy came from (None: published here, or unknown).
    came_from: str | None = None
    #: Selective routing: the neighbours the interest routes lead to from here, as of
    #: the routing tables' ``routed_epoch`` (what digests offer the event to).
    routed: frozenset[str] = frozenset()
    routed_epoch: int = -1


class EventStore:
    def __init__(self, memory: float, digest_window: float, max_events: int) -> None:
        self.memory = memory
        self.digest_window = digest_window
        self.max_events = max_events
        # First-seen order is insertion order, so the oldest entries are at the front.
        self._events: OrderedDict[str, HeldEvent] = OrderedDict()

    def __contains__(self, msg_id: str) -> bool:
        return msg_id in self._events

    def __len__(self) -> int:
        return len(self._events)

    def get(self, msg_id: str) -> HeldEvent | None:
        return self._events.get(msg_id)

    def add(self, held: HeldEvent) -> list[str]:
        """Hold a new event; returns the msg_ids forgotten to make room."""
        self._events[held.body.msg_id] = held
        forgotten = []
        while len(self._events) > self.max_events:
            forgotten.append(self._events.popitem(last=False)[0])
        return forgotten

    def oldest(self) -> HeldEvent | None:
        return next(iter(self._events.values()), None)

    def expire(self, now: float) -> list[str]:
        """Forget events first seen more than ``memory`` ago; returns their msg_ids."""
        horizon = now - self.memory
        forgotten = []
        events = self._events
        while events:
            msg_id, held = next(iter(events.items()))
            if held.first_seen > horizon:
                break
            del events[msg_id]
            forgotten.append(msg_id)
        return forgotten

    def recent(self, now: float, limit: int) -> Iterator[HeldEvent]:
        """Events first seen within the digest window, newest first, at most ``limit``."""
        horizon = now - self.digest_window
        for count, held in enumerate(reversed(self._events.values())):
            if count >= limit or held.first_seen < horizon:
                return
            yield held



"""What the API server needs from the node behind it.

The daemon implements :class:`PubSubService` over its protocol core (Scribe in
structured mode, gossip in unstructured mode). The server owns connections and
subscription ownership; the service owns the overlay. Notifications flow back through
the ``Sink`` each subscription was created with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from overlay.core.pubsub import DeliveredEvent
from overlay.runtime.api.requests import ApiError, Consumers, Fetch, Publish, Settle, Subscribe


def notify_fields(sub: int, event: DeliveredEvent) -> dict[str, Any]:
    """A ``notify`` push's fields (API.md) for ``event`` to ``sub``: the push without its
    ``event`` key, as an item of a ``notify_batch`` or of a ``fetch`` reply."""
    return {"sub": sub, "topic": event.topic, "msg_id": event.msg_id, "seq": event.seq,
            "attrs": event.attrs, "payload": event.payload, "publisher": event.publisher,
            "ts": event.ts, "attempt": event.attempt}


@dataclass(slots=True)  # not frozen: made for every run of events, and frozen costs
class Notifications:
    """Events for one subscription, in order: a ``notify`` push each (API.md), or items
    of ``notify_batch`` pushes. The service hands over what one step of the core
    delivered to the subscription (a publish burst's run) as one."""

    sub: int
    events: Sequence[DeliveredEvent]

    def to_wire(self) -> list[dict[str, Any]]:
        """One ``notify`` push per event."""
        return [{"event": "notify", **notify_fields(self.sub, event)} for event in self.events]


@dataclass(frozen=True)
class Expired:
    sub: int

    def to_wire(self) -> dict[str, Any]:
        return {"event": "expired", "sub": self.sub}


@dataclass(frozen=True)
class Ended:
    """A durable subscription ended from the overlay's side (its consumer was deleted)."""

    sub: int
    code: str
    message: str

    def to_wire(self) -> dict[str, Any]:
        return {"event": "ended", "sub": self.sub,
                "error": {"code": self.code, "message": self.message}}


Push = Notifications | Expired | Ended
#: Called by the service for each push of a subscription; must not block.
Sink = Callable[[Push], None]


class PublishResult(NamedTuple):  # one per event: a tuple is made fastest
    msg_id: str
    seq: int | None


#: Called once with a publish's outcome.
Done = Callable[[PublishResult | ApiError], None]


class PubSubService(Protocol):
    mode: str

    @property
    def features(self) -> tuple[str, ...]:
        """What it serves beyond API.md's core (hello's ``features`` lists them too):
        ``"durable"``, durable consumers and ``ttl``."""
        ...

    @property
    def node_hex(self) -> str: ...

    @property
    def ready(self) -> bool:
        """Joined the overlay and able to serve subscriptions and publishes."""
        ...

    def subscribe(self, request: Subscribe, sink: Sink) -> int:
        """Create a subscription; returns its handle. Raises ApiError (bad_filter, ...)."""
        ...

    async def in_effect(self, sub: int) -> None:
        """Return once subscription ``sub`` is in effect: every matching event published
        from then on reaches it (or after the service's bound on that wait)."""
        ...

    def renew(self, sub: int, expiry: float) -> None: ...

    def unsubscribe(self, sub: int, reason: str) -> None:
        """End a subscription (reason: ``client`` or ``disconnect``)."""
        ...

    def publish_unreliable(self, requests: Sequence[Publish]) -> list[PublishResult | ApiError]:
        """Publish unreliable requests (answered without waiting for the overlay) at once,
        in order, as one batch of overlay work: per request, its result or the ApiError
        refusing it."""
        ...

    def begin_publishes(self, requests: Sequence[Publish], dones: Sequence[Done]) -> list[bool]:
        """Start publishes whose replies wait for the overlay (reliable ones), in order, as
        one batch of overlay work, without a task each. Per request: True when begun (its
        ``done`` gets the result or an ApiError exactly once, on the trio thread, maybe
        before this returns); False, having done nothing, when :meth:`publish` must be
        awaited for it instead."""
        ...

    async def publish(self, request: Publish) -> PublishResult:
        """Hand an event to the overlay; returns once it is accepted (API.md)."""
        ...

    def status(self) -> dict[str, Any]: ...

    def settle(self, request: Settle) -> None:
        """``ack``, ``nak`` or ``term`` events of a durable subscription (sent to its
        consumer's root; not confirmed). Raises ApiError."""
        ...

    async def fetch(self, request: Fetch) -> Notifications:
        """Events of a pull subscription: at most ``request.max``, waiting up to
        ``request.wait`` s for the first. Raises ApiError (``timeout``: no answer)."""
        ...

    async def consumers(self, request: Consumers) -> dict[str, Any]:
        """A topic's durable consumers as its root reports them (deleting one first for a
        ``delete_consumer``). Raises ApiError (``timeout``: no answer)."""
        ...

    def batch(self) -> AbstractContextManager[None]:
        """Requests handled inside have their overlay work carried out together when it
        ends (one pass for a burst of publishes); nothing inside awaits."""
        ...

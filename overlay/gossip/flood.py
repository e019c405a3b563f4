"""Flooding with TTL over a fixed neighbour set: the simplest unstructured dissemination.

Every node forwards an event it sees for the first time to all neighbours but the one it
came from, while ``hop < ttl``; duplicates are counted (``recv`` with ``dup``) and not
forwarded again. Local subscriptions get the event when their filter matches. Message
ids are remembered for ``dedup_seconds`` so memory stays bounded.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Any

from matching import Filter, parse
from overlay.core.ids import DEFAULT_ID_BITS, format_id, hash_id
from overlay.core.messages import Message, message
from overlay.core.protocol import CoreBase


@message("gossip.flood_event")
class FloodEvent(Message):
    topic: str
    msg_id: str
    attrs: dict[str, str | int | float | bool]
    payload: bytes
    publisher: str
    ts: float
    hop: int
    ttl: int

    def __post_init__(self) -> None:
        if self.hop < 0 or self.ttl < 0:
            raise ValueError("hop and ttl must be >= 0")


@dataclass(frozen=True)
class DeliveredEvent:
    """What a local subscription receives."""

    topic: str
    msg_id: str
    seq: int | None
    attrs: dict[str, Any]
    payload: bytes
    publisher: str
    ts: float
    hop: int


@dataclass(frozen=True)
class FloodConfig:
    ttl: int = 8
    dedup_seconds: float = 300.0


@dataclass
class _Subscription:
    topic: str
    filter: Filter


class FloodNode(CoreBase):
    def __init__(self, address: str, rng: random.Random, config: FloodConfig | None = None,
                 bits: int = DEFAULT_ID_BITS) -> None:
        super().__init__(address)
        self.rng = rng
        self.config = config or FloodConfig()
        self.bits = bits
        self.node_hex = self._hex_of(address)
        self.neighbours: list[str] = []
        self.subs: dict[int, _Subscription] = {}
        self._seen: dict[str, float] = {}
        self._seen_order: deque[tuple[float, str]] = deque()

    # -- application calls --------------------------------------------------------------

    def subscribe(self, now: float, topic: str, filter_text: str, sub_id: int,
                  expiry: float | None = None) -> None:
        """Raises ``matching.FilterSyntaxError`` for a bad filter."""
        self.subs[sub_id] = _Subscription(topic, parse(filter_text))
        self.trace("subscribe", topic=topic, sub=sub_id, filter=filter_text, expiry=expiry)

    def unsubscribe(self, now: float, sub_id: int, reason: str = "client") -> None:
        sub = self.subs.pop(sub_id)
        self.trace("unsubscribe", topic=sub.topic, sub=sub_id, reason=reason)

    def publish(self, now: float, topic: str, attrs: dict[str, Any], payload: bytes = b"",
                msg_id: str | None = None, ts: float | None = None) -> str:
        msg_id = msg_id or format(self.rng.getrandbits(128), "032x")
        self.trace("publish", topic=topic, msg_id=msg_id, attrs=attrs, size=len(payload))
        event = FloodEvent(topic, msg_id, dict(attrs), payload, self.node_hex,
                           now if ts is None else ts, 0, self.config.ttl)
        self._remember(now, msg_id)
        self._deliver_local(event)
        self._forward(event, exclude=None)
        return msg_id

    # -- protocol ------------------------------------------------------------------------

    def on_message(self, now: float, src: str, msg: Message) -> None:
        if not isinstance(msg, FloodEvent):
            return
        dup = msg.msg_id in self._seen
        self.trace("recv", topic=msg.topic, msg_id=msg.msg_id, **{"from": self._hex_of(src)},
                   hop=msg.hop, dup=dup)
        if dup:
            return
        self._remember(now, msg.msg_id)
        self._deliver_local(msg)
        if msg.hop >= msg.ttl:
            self.trace("drop", topic=msg.topic, msg_id=msg.msg_id, reason="ttl")
            return
        self._forward(msg, exclude=src)

    def on_timer(self, now: float) -> None:
        horizon = now - self.config.dedup_seconds
        while self._seen_order and self._seen_order[0][0] < horizon:
            _, msg_id = self._seen_order.popleft()
            self._seen.pop(msg_id, None)

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        if dest in self.neighbours:
            self.neighbours.remove(dest)

    def next_deadline(self) -> float | None:
        if not self._seen_order:
            return None
        return self._seen_order[0][0] + self.config.dedup_seconds

    # -- helpers ---------------------------------------------------------------------------

    def _remember(self, now: float, msg_id: str) -> None:
        self._seen[msg_id] = now
        self._seen_order.append((now, msg_id))

    def _deliver_local(self, event: FloodEvent) -> None:
        for sub_id, sub in self.subs.items():
            if sub.topic == event.topic and sub.filter.matches(event.attrs):
                self.trace("deliver", topic=event.topic, msg_id=event.msg_id, sub=sub_id,
                           hop=event.hop, seq=None, dup=False)
                self.deliver(sub_id, DeliveredEvent(event.topic, event.msg_id, None,
                                                    event.attrs, event.payload,
                                                    event.publisher, event.ts, event.hop))

    def _forward(self, event: FloodEvent, exclude: str | None) -> None:
        onward = FloodEvent(event.topic, event.msg_id, event.attrs, event.payload,
                            event.publisher, event.ts, event.hop + 1, event.ttl)
        for peer in self.neighbours:
            if peer != exclude:
                self.trace("forward", topic=event.topic, msg_id=event.msg_id,
                           to=self._hex_of(peer), hop=onward.hop)
                self.send(peer, onward)

    def _hex_of(self, address: str) -> str:
        return format_id(hash_id(address, self.bits), self.bits)

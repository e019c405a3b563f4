"""A test double of PubSubService: one node, topics in memory, controllable behaviour."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import trio

from overlay.core.pubsub import DeliveredEvent
from overlay.runtime.api import ApiError, Notifications, PublishResult, Sink
from overlay.runtime.api.requests import Publish, Subscribe


class FakeService:
    node_hex = "ab" * 16
    mode = "structured"
    features: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.is_ready = True
        self.batches = 0
        self.subs: dict[int, tuple[Subscribe, Sink]] = {}
        self.ended: list[tuple[int, str]] = []
        self.renewed: list[tuple[int, float]] = []
        self.next_sub = 1
        self.seq = 0
        #: When set, publishes wait for it (to test reply ordering).
        self.publish_gate: trio.Event | None = None
        self.fail_publish = False
        #: When set, subscriptions are in effect only once it is set.
        self.subscribe_gate: trio.Event | None = None
        #: Calls of ``publish_unreliable`` (each publishes a run of requests).
        self.unreliable_calls = 0

    @property
    def ready(self) -> bool:
        return self.is_ready

    def batch(self) -> AbstractContextManager[None]:
        self.batches += 1
        return contextlib.nullcontext()

    def subscribe(self, request: Subscribe, sink: Sink) -> int:
        if request.filter.startswith("bad"):
            raise ApiError("bad_filter", "expected a predicate at 0", pos=0)
        sub = self.next_sub
        self.next_sub += 1
        self.subs[sub] = (request, sink)
        return sub

    async def in_effect(self, sub: int) -> None:
        if self.subscribe_gate is not None:
            await self.subscribe_gate.wait()

    def renew(self, sub: int, expiry: float) -> None:
        self.renewed.append((sub, expiry))

    def unsubscribe(self, sub: int, reason: str) -> None:
        del self.subs[sub]
        self.ended.append((sub, reason))

    def publish_unreliable(self, requests: Sequence[Publish]) -> list[PublishResult | ApiError]:
        self.unreliable_calls += 1
        outcomes: list[PublishResult | ApiError] = []
        for request in requests:
            try:
                outcomes.append(self._publish(request))
            except RuntimeError as exc:
                outcomes.append(ApiError("internal", str(exc)))
        return outcomes

    def begin_publishes(self, requests: Sequence[Publish], dones: Sequence[Any]) -> list[bool]:
        return [False] * len(requests)  # publishes that wait go through ``publish``

    async def publish(self, request: Publish) -> PublishResult:
        if self.publish_gate is not None:
            await self.publish_gate.wait()
        return self._publish(request)

    def _publish(self, request: Publish) -> PublishResult:
        if self.fail_publish:
            raise RuntimeError("boom")
        self.seq += 1
        msg_id = request.msg_id or f"{self.seq:032x}"
        for sub, (subscription, sink) in list(self.subs.items()):
            if subscription.topic == request.topic:
                sink(Notifications(sub, [DeliveredEvent(request.topic, msg_id, self.seq,
                                                        request.attrs, request.payload,
                                                        self.node_hex, 1.0, 0)]))
        return PublishResult(msg_id, self.seq)

    def status(self) -> dict[str, Any]:
        return {"node": self.node_hex, "subscriptions": len(self.subs)}

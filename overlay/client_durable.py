"""What the Python clients (overlay.client) add for durable consumers (docs/API.md,
Durable consumers): the subscribe fields, the events that can be acknowledged, and the
requests that settle them.

Async::

    async with client.subscribe("tasks", durable="workers", ack=True) as sub:
        async for msg in sub:
            handle(msg.payload)
            await msg.ack()          # or: await msg.nak(delay=5), await msg.term()

    async with client.subscribe("tasks", durable="pullers", ack=True, pull=True) as sub:
        for msg in await sub.fetch(max=100, wait=5):
            await msg.ack()

Blocking::

    sub = client.subscribe("tasks", durable="workers", ack=True)
    for msg in client.events():
        msg.ack()
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from overlay.core.limits import SizeLimits, batches

#: A durable subscribe's settings as the API names them, in the order the clients take them.
SETTINGS = ("ack", "ack_wait", "max_deliver", "dead_letter", "max_inflight", "pull")


def durable_fields(durable: str | None, **settings: Any) -> dict[str, Any]:
    """The subscribe fields of a durable subscription: ``durable`` and the settings given
    (None: the daemon's default). Settings without ``durable`` are a local misuse."""
    given = {name: value for name, value in settings.items() if value is not None}
    unknown = set(given) - set(SETTINGS)
    if unknown:
        raise TypeError(f"unknown durable settings {sorted(unknown)}")
    if durable is None:
        if given:
            raise ValueError(f"{sorted(given)} are settings of a durable subscription: "
                             "give durable= too")
        return {}
    return {"durable": durable, **given}


def settle_request(sub: int, op: str, msg_ids: Sequence[str], delay: float = 0.0
                   ) -> dict[str, Any]:
    """An ``ack``, ``nak`` or ``term`` request for ``msg_ids`` of subscription ``sub``."""
    if isinstance(msg_ids, str):
        raise TypeError("msg_ids is a list of msg_ids (use [msg_id] for one)")
    req: dict[str, Any] = {"op": op, "sub": sub, "msg_ids": list(msg_ids)}
    if op == "nak" and delay:
        req["delay"] = delay
    return req


#: Bytes of a settle request besides its msg_ids (op, sub, rid, delay, map and list heads).
SETTLE_HEAD_BYTES = 128


def settle_runs(msg_ids: Sequence[str], sizes: SizeLimits) -> list[list[str]]:
    """``msg_ids`` cut into runs whose requests each fit the daemon's ``max_frame``."""
    if isinstance(msg_ids, str):
        raise TypeError("msg_ids is a list of msg_ids (use [msg_id] for one)")
    return list(batches(list(msg_ids), lambda msg_id: len(msg_id.encode()) + 2,
                        sizes.max_frame - SETTLE_HEAD_BYTES))


def fetch_request(sub: int, max: int, wait: float) -> dict[str, Any]:  # the API's name
    return {"op": "fetch", "sub": sub, "max": max, "wait": wait}


def consumers_request(topic: str, durable: str | None) -> dict[str, Any]:
    req: dict[str, Any] = {"op": "consumers", "topic": topic}
    if durable is not None:
        req["durable"] = durable
    return req


#: Sends one settle request (ack, nak, term) of one subscription: (op, msg_ids, delay).
AsyncSettle = Callable[[str, Sequence[str], float], Awaitable[None]]
BlockingSettle = Callable[[str, Sequence[str], float], None]


@dataclass(frozen=True)
class AsyncSettling:
    """How an event of an async durable subscription is acknowledged."""

    msg_id: str
    settle: AsyncSettle = field(repr=False, compare=False)

    async def ack(self) -> None:
        """Done with it: never delivered again (sent to the consumer's root)."""
        await self.settle("ack", [self.msg_id], 0.0)

    async def nak(self, delay: float = 0.0) -> None:
        """Deliver it again, not before ``delay`` seconds."""
        await self.settle("nak", [self.msg_id], delay)

    async def term(self) -> None:
        """Never deliver it again (traced as ended, not acknowledged)."""
        await self.settle("term", [self.msg_id], 0.0)


@dataclass(frozen=True)
class BlockingSettling:
    """How an event of a blocking client's durable subscription is acknowledged."""

    msg_id: str
    settle: BlockingSettle = field(repr=False, compare=False)

    def ack(self) -> None:
        self.settle("ack", [self.msg_id], 0.0)

    def nak(self, delay: float = 0.0) -> None:
        self.settle("nak", [self.msg_id], delay)

    def term(self) -> None:
        self.settle("term", [self.msg_id], 0.0)


__all__ = ["SETTINGS", "AsyncSettle", "AsyncSettling", "BlockingSettle", "BlockingSettling",
           "consumers_request", "durable_fields", "fetch_request", "settle_request", "settle_runs"]

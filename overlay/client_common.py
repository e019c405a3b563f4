"""What both Python clients (:mod:`overlay.client`) share: where to connect, the errors a
request can raise, the values handed to the application, and the requests built from a
call (publish, subscribe, batches). Split from :mod:`overlay.client`, which exports all
of it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from overlay.client_durable import (
    AsyncSettling,
    BlockingSettling,
)
from overlay.core.framing import (
    array_frame,
    encode_map,
    group_for_frames,
)
from overlay.core.limits import MIN_MAX_FRAME, SizeLimits, TooLargeError
from overlay.core.pubsub import AttrValue

API_VERSION = 1


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "overlay"


def default_target() -> str:
    return os.environ.get("OVERLAY_API") or str(default_state_dir() / "api.sock")


# -- errors --------------------------------------------------------------------------


class ClientError(Exception):
    """Base of the client's errors."""


class ConnectionLost(ClientError):
    """The daemon closed the connection, or could not be reached."""


class RequestError(ClientError):
    """The daemon answered a request with an error (API.md ``error``)."""

    code = "internal"

    def __init__(self, code: str, message: str, extra: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.extra = extra or {}

    @staticmethod
    def from_wire(error: Any) -> RequestError:
        if not isinstance(error, dict):
            return RequestError("internal", f"malformed error {error!r}")
        code, message = str(error.get("code")), str(error.get("message"))
        extra = {k: v for k, v in error.items() if k not in ("code", "message")}
        cls = _ERRORS.get(code, RequestError)
        return cls(code, message, extra)


class BadFilter(RequestError):
    @property
    def pos(self) -> int | None:
        return self.extra.get("pos")


class UnknownSub(RequestError): ...


class NotReady(RequestError): ...


class Overloaded(RequestError): ...


class UnsupportedVersion(RequestError): ...


class TooLarge(RequestError):
    """An event over the daemon's ``max_payload`` or ``max_event`` (the error's
    ``max_frame``, ``max_event`` and ``max_payload`` say the limits)."""


class Timeout(RequestError):
    """The overlay did not take a reliable publish in time: publish again with the same
    ``msg_id`` (the root numbers it once)."""


class StorageError(RequestError):
    """``storage_error``: the topic's root could not store a reliable publish (its disk or
    quota is full), so it is not acknowledged; publish it again later (the error's
    ``msg_id``)."""


class Conflict(RequestError):
    """``conflict``: a durable subscribe named a consumer that exists with another filter
    or other settings."""


_ERRORS: dict[str, type[RequestError]] = {
    "bad_filter": BadFilter, "unknown_sub": UnknownSub, "not_ready": NotReady,
    "overloaded": Overloaded, "unsupported_version": UnsupportedVersion,
    "too_large": TooLarge, "timeout": Timeout, "storage_error": StorageError,
    "conflict": Conflict,
}


# -- values ------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """A ``notify`` push: one event for one subscription."""

    sub: int
    topic: str
    msg_id: str
    seq: int | None
    attrs: dict[str, AttrValue]
    payload: bytes
    publisher: str
    ts: float
    #: Deliveries of this event to a durable consumer so far, this one included.
    attempt: int = 1

    @staticmethod
    def from_wire(push: dict[str, Any]) -> Event:
        return Event(**event_fields(push))


def event_fields(push: dict[str, Any]) -> dict[str, Any]:
    return {"sub": push["sub"], "topic": push["topic"], "msg_id": push["msg_id"],
            "seq": push.get("seq"), "attrs": push.get("attrs") or {},
            "payload": push.get("payload") or b"", "publisher": push.get("publisher", ""),
            "ts": push.get("ts", 0.0), "attempt": push.get("attempt", 1)}


@dataclass(frozen=True)
class Message(Event):
    """An event of an async durable subscription: ``await msg.ack()`` when done with it
    (with ``ack=True``), ``nak(delay)`` to have it again, ``term()`` to end it."""

    settling: AsyncSettling | None = field(default=None, repr=False, compare=False)

    async def ack(self) -> None:
        await self._settling().ack()

    async def nak(self, delay: float = 0.0) -> None:
        await self._settling().nak(delay)

    async def term(self) -> None:
        await self._settling().term()

    def _settling(self) -> AsyncSettling:
        if self.settling is None:
            raise ValueError("this event did not come from a durable subscription")
        return self.settling


@dataclass(frozen=True)
class BlockingMessage(Event):
    """An event of a blocking client's durable subscription: ``msg.ack()`` etc."""

    settling: BlockingSettling | None = field(default=None, repr=False, compare=False)

    def ack(self) -> None:
        self._settling().ack()

    def nak(self, delay: float = 0.0) -> None:
        self._settling().nak(delay)

    def term(self) -> None:
        self._settling().term()

    def _settling(self) -> BlockingSettling:
        if self.settling is None:
            raise ValueError("this event did not come from a durable subscription")
        return self.settling


@dataclass(frozen=True)
class Published:
    msg_id: str
    seq: int | None



def subscribe_request(topic: str, filter: str, expiry: float | None, group: str | None,
                      last: int | None, since_seq: int | None,
                      durable: dict[str, Any] | None = None) -> dict[str, Any]:
    """``durable``: the fields of :func:`overlay.client_durable.durable_fields`."""
    req: dict[str, Any] = {"op": "subscribe", "topic": topic, "filter": filter,
                           **(durable or {})}
    if expiry is not None:
        req["expiry"] = expiry
    if group is not None:
        req["group"] = group
    if last is not None:
        req["replay"] = {"last": last}
    elif since_seq is not None:
        req["replay"] = {"since_seq": since_seq}
    return req


def sizes_of(hello: dict[str, Any]) -> SizeLimits:
    """The daemon's size model, from its ``hello`` reply (the default before one came)."""
    max_frame = hello.get("max_frame")
    return SizeLimits(max_frame) if type(max_frame) is int and max_frame >= MIN_MAX_FRAME \
        else SizeLimits()


def publish_request(topic: str, attrs: dict[str, AttrValue] | None, payload: bytes,
                    reliable: bool, msg_id: str | None,
                    sizes: SizeLimits | None = None, ttl: float | None = None) -> dict[str, Any]:
    """A publish request; an event over the daemon's limits (``sizes``) raises
    :class:`TooLarge` here, as the daemon would answer."""
    req = publish_event(topic, attrs, payload, msg_id, ttl)
    if sizes is not None and (refused := too_large(req, sizes)) is not None:
        raise refused
    req["op"] = "publish"
    req["reliable"] = reliable
    return req


def batching_of(hello: dict[str, Any]) -> tuple[bool, int]:
    """Whether the daemon takes ``publish_batch`` requests, and how many events each."""
    max_batch = hello.get("max_batch")
    if "publish_batch" not in hello.get("features", ()) or type(max_batch) is not int:
        return False, 0
    return max_batch > 1, max_batch


def too_large(event: dict[str, Any], sizes: SizeLimits) -> TooLarge | None:
    """The error refusing an event (a map of :func:`publish_event`) over the daemon's
    limits, as the daemon would answer; None when it fits."""
    try:
        sizes.check_event(event["topic"], event["attrs"], event["payload"])
    except TooLargeError as exc:
        return TooLarge("too_large", str(exc), sizes.to_wire())
    return None


def publish_event(topic: str, attrs: dict[str, AttrValue] | None = None, payload: bytes = b"",
                  msg_id: str | None = None, ttl: float | None = None) -> dict[str, Any]:
    """One event of a batched publish (``publish_many``)."""
    event: dict[str, Any] = {"topic": topic, "attrs": attrs or {}, "payload": payload}
    if msg_id is not None:
        event["msg_id"] = msg_id
    if ttl is not None:
        event["ttl"] = ttl
    return event


#: Bytes of a publish_batch's map before its events: {"op", "reliable", "rid", "events"},
#: counted with the largest rid (a batch may be up to 8 bytes short of max_frame).
_BATCH_HEAD_SIZE = len(encode_map({"op": "publish_batch", "reliable": True,
                                   "rid": (1 << 64) - 1, "events": []})) - 1


def batch_frames(events: list[dict[str, Any]], reliable: bool, max_frame: int, max_batch: int,
                 rids: Iterator[int]) -> list[tuple[int, int, bytes]]:
    """``publish_batch`` requests carrying ``events``, each at most ``max_frame`` bytes and
    ``max_batch`` events: per frame, its rid, its event count and its bytes."""
    bodies = [encode_map(event) for event in events]
    frames = []
    for group in group_for_frames(bodies, _BATCH_HEAD_SIZE, max_frame, max_batch):
        rid = next(rids)
        head = encode_map({"op": "publish_batch", "reliable": reliable, "rid": rid,
                           "events": []})[:-1]
        frames.append((rid, len(group), array_frame(head, group)))
    return frames


def batch_outcomes(reply: dict[str, Any], count: int) -> list[Published | RequestError]:
    """Per event of a batched publish: its result, or the error refusing it."""
    if not reply.get("ok"):
        return [RequestError.from_wire(reply.get("error"))] * count
    results = reply.get("results")
    if not isinstance(results, list) or len(results) != count:
        return [RequestError("internal", f"a batch reply without {count} results")] * count
    return [RequestError.from_wire(r["error"]) if "error" in r
            else Published(r["msg_id"], r.get("seq")) for r in results]

"""Python clients of the local socket API (API.md): async for trio, and blocking.

Async::

    async with overlay.client.connect() as client:
        await client.publish("prices", attrs={"sym": "ACME", "price": 101.5})
        async with client.subscribe("prices", filter="price > 100") as sub:
            async for event in sub:
                print(event.attrs)

Blocking::

    with overlay.client.BlockingClient.connect() as client:
        client.publish("prices", attrs={"sym": "ACME"})

Batching (when the daemon offers it, hello's ``features``): ``publish_many`` sends many
events in ``publish_batch`` requests, split so that none exceeds the daemon's
``max_frame`` bytes or ``max_batch`` events; the async client also sends the publishes
that several tasks start together as such requests; both clients ask for
``notify_batch`` pushes and hand out their events one by one.

Where to connect: an explicit target, else ``$OVERLAY_API``, else the default state
directory's ``api.sock``. A target is a Unix socket path, or ``tcp:HOST:PORT``.
"""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from overlay.client_durable import (
    AsyncSettling,
    BlockingSettling,
    consumers_request,
    durable_fields,
    fetch_request,
    settle_request,
    settle_runs,
)
from overlay.core.errors import FrameError
from overlay.core.framing import (
    FrameDecoder,
    MapDecoder,
    array_frame,
    encode_frame,
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
        return Event(**_event_fields(push))


def _event_fields(push: dict[str, Any]) -> dict[str, Any]:
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


#: Where one event's outcome of a batched publish goes.
_OutcomeChannel = trio.MemorySendChannel["Published | RequestError"]


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


# -- async client ----------------------------------------------------------------------


async def _open_stream(target: str) -> trio.abc.Stream:
    try:
        if target.startswith("tcp:"):
            host, _, port = target[4:].rpartition(":")
            return await trio.open_tcp_stream(host.strip("[]"), int(port))
        return await trio.open_unix_socket(target)
    except (OSError, ValueError) as exc:
        raise ConnectionLost(f"cannot reach the daemon at {target}: {exc}") from None


class Subscription:
    """Events of one subscription; iterate with ``async for``."""

    def __init__(self, client: AsyncClient, sub: int,
                 receive: trio.MemoryReceiveChannel[Event]) -> None:
        self.client = client
        self.sub = sub
        self._receive = receive

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def renew(self, expiry: float) -> None:
        await self.client.request({"op": "renew", "sub": self.sub, "expiry": expiry})

    async def unsubscribe(self) -> None:
        await self.client.request({"op": "unsubscribe", "sub": self.sub})
        self.client._end_subscription(self.sub)

    # -- a durable subscription (docs/API.md, Durable consumers) ------------------------

    async def ack(self, msg_ids: Sequence[str]) -> None:
        """Acknowledge events by msg_id (split across requests by the frame's bytes)."""
        await self.settle("ack", msg_ids)

    async def nak(self, msg_ids: Sequence[str], delay: float = 0.0) -> None:
        await self.settle("nak", msg_ids, delay)

    async def term(self, msg_ids: Sequence[str]) -> None:
        await self.settle("term", msg_ids)

    async def settle(self, op: str, msg_ids: Sequence[str], delay: float = 0.0) -> None:
        for run in settle_runs(msg_ids, self.client.sizes):
            await self.client.request(settle_request(self.sub, op, run, delay))

    async def fetch(self, max: int = 1, wait: float = 0.0) -> list[Message]:
        """Up to ``max`` events of a ``pull`` subscription, waiting up to ``wait`` seconds
        for the first (0: at once, maybe none)."""
        reply = await self.client.request(fetch_request(self.sub, max, wait))
        return [self.client._message(item) for item in reply.get("events") or ()]


class AsyncClient:
    def __init__(self, stream: trio.abc.Stream, buffer: int) -> None:
        self._stream = stream
        self._buffer = buffer
        self._rids = itertools.count(1)
        self._pending: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._subs: dict[int, trio.MemorySendChannel[Event]] = {}
        #: rid of a subscribe request -> the channel for its events: registered by the
        #: reader when the reply comes, since the subscription's first events follow it
        #: at once (before the requesting task runs again).
        self._sub_channels: dict[int, trio.MemorySendChannel[Event]] = {}
        self._send_lock = trio.Lock()
        self._closed: ClientError | None = None
        self.hello: dict[str, Any] = {}
        #: The daemon's size model (from its hello): frames are encoded up to its
        #: ``max_frame``, events over its limits refused before they are sent.
        self.sizes = SizeLimits()
        #: From hello: whether the daemon takes batched publishes, and how many a request.
        self._batching = False
        self._max_batch = 0
        #: Publishes started but not yet sent: gathered into batched publishes by
        #: ``_send_queued``, which the first of them starts.
        self._queued: list[tuple[dict[str, Any], bool, _OutcomeChannel]] = []
        #: rid of a batched publish -> where each of its events' outcome goes.
        self._batches: dict[int, list[_OutcomeChannel]] = {}
        self._nursery: trio.Nursery | None = None

    def _greeted(self, hello: dict[str, Any], nursery: trio.Nursery) -> None:
        self.hello = hello
        self.sizes = sizes_of(hello)
        self._batching, self._max_batch = batching_of(hello)
        self._nursery = nursery

    async def request(self, req: dict[str, Any],
                      events: trio.MemorySendChannel[Event] | None = None) -> dict[str, Any]:
        """Send one request and wait for its reply; raises RequestError on ``ok: false``.
        ``events``: for a subscribe, where the subscription's events go."""
        if self._closed is not None:
            raise self._closed
        rid = next(self._rids)
        send_channel, receive_channel = trio.open_memory_channel[dict[str, Any]](1)
        self._pending[rid] = send_channel
        if events is not None:
            self._sub_channels[rid] = events
        try:
            async with self._send_lock:
                await self._stream.send_all(encode_frame({**req, "rid": rid},
                                                         self.sizes.max_frame))
            reply = await receive_channel.receive()
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel):
            raise self._closed or ConnectionLost("connection to the daemon lost") from None
        finally:
            self._pending.pop(rid, None)
            self._sub_channels.pop(rid, None)
        if not reply.get("ok"):
            raise RequestError.from_wire(reply.get("error"))
        return reply

    async def publish(self, topic: str, payload: bytes = b"", *,
                      attrs: dict[str, AttrValue] | None = None, reliable: bool = True,
                      msg_id: str | None = None, ttl: float | None = None) -> Published:
        """Publish one event (``ttl``: seconds it may be delivered in). Publishes that
        several tasks start together leave in one batched publish (when the daemon
        offers it)."""
        if not self._batching:
            reply = await self.request(publish_request(topic, attrs, payload, reliable, msg_id,
                                                       self.sizes, ttl))
            return Published(reply["msg_id"], reply.get("seq"))
        outcome = (await self._publish_events(
            [publish_event(topic, attrs, payload, msg_id, ttl)], reliable))[0]
        if isinstance(outcome, RequestError):
            raise outcome
        return outcome

    async def publish_many(self, events: list[dict[str, Any]], *,
                           reliable: bool = True) -> list[Published | RequestError]:
        """Publish ``events`` (maps from :func:`publish_event`) in as few requests as
        ``max_frame`` allows: per event, its result or the error refusing it alone."""
        if self._batching:
            return await self._publish_events(events, reliable)
        outcomes: list[Published | RequestError] = []
        for event in events:
            if (refused := too_large(event, self.sizes)) is not None:
                outcomes.append(refused)
                continue
            try:
                reply = await self.request({"op": "publish", "reliable": reliable, **event})
                outcomes.append(Published(reply["msg_id"], reply.get("seq")))
            except RequestError as exc:
                outcomes.append(exc)
        return outcomes

    async def _publish_events(self, events: list[dict[str, Any]],
                              reliable: bool) -> list[Published | RequestError]:
        """Queue ``events`` for :meth:`_send_queued` (those over the daemon's limits are
        refused here) and wait for each one's outcome."""
        if self._closed is not None:
            raise self._closed
        receivers = []
        queued = len(self._queued)
        for event in events:
            send_channel, receive_channel = trio.open_memory_channel[Published | RequestError](1)
            refused = too_large(event, self.sizes)
            if refused is None:
                self._queued.append((event, reliable, send_channel))
            else:
                send_channel.send_nowait(refused)
            receivers.append(receive_channel)
        if not queued and self._queued:  # none were waiting: nobody sends them yet
            assert self._nursery is not None
            self._nursery.start_soon(self._send_queued)
        try:
            return [await receive.receive() for receive in receivers]
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise self._closed or ConnectionLost("connection to the daemon lost") from None

    async def _send_queued(self) -> None:
        """Send the publishes queued so far, runs of one reliability as batched publishes."""
        queued, self._queued = self._queued, []
        frames = []
        start = 0
        while start < len(queued):
            reliable = queued[start][1]
            end = start
            while end < len(queued) and queued[end][1] == reliable:
                end += 1
            channels = [channel for _, _, channel in queued[start:end]]
            events = [event for event, _, _ in queued[start:end]]
            taken = 0
            for rid, count, frame in batch_frames(events, reliable, self.sizes.max_frame,
                                                  self._max_batch, self._rids):
                self._batches[rid], taken = channels[taken:taken + count], taken + count
                frames.append(frame)
            start = end
        try:
            async with self._send_lock:
                await self._stream.send_all(b"".join(frames))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            for _, _, channel in queued:
                channel.close()

    @asynccontextmanager
    async def subscribe(self, topic: str, filter: str = "", *, expiry: float | None = None,
                        group: str | None = None, last: int | None = None,
                        since_seq: int | None = None, durable: str | None = None,
                        ack: bool | None = None, ack_wait: float | None = None,
                        max_deliver: int | None = None, dead_letter: str | None = None,
                        max_inflight: int | None = None,
                        pull: bool | None = None) -> AsyncIterator[Subscription]:
        """A subscription, ended on exit. With ``durable``: attached to that durable
        consumer of the topic (its settings: ``ack`` ... ``pull``, None for the
        daemon's defaults); its events are :class:`Message` values to acknowledge."""
        fields = durable_fields(durable, ack=ack, ack_wait=ack_wait, max_deliver=max_deliver,
                                dead_letter=dead_letter, max_inflight=max_inflight, pull=pull)
        send_channel, receive_channel = trio.open_memory_channel[Event](self._buffer)
        reply = await self.request(subscribe_request(topic, filter, expiry, group, last,
                                                     since_seq, fields), events=send_channel)
        sub = reply["sub"]
        subscription = Subscription(self, sub, receive_channel)
        try:
            yield subscription
        finally:
            if sub in self._subs and self._closed is None:
                self._end_subscription(sub)
                with trio.CancelScope(shield=True), trio.move_on_after(5), suppress(ClientError):
                    await self.request({"op": "unsubscribe", "sub": sub})

    async def status(self) -> dict[str, Any]:
        reply = await self.request({"op": "status"})
        return {k: v for k, v in reply.items() if k not in ("rid", "ok")}

    async def consumers(self, topic: str, durable: str | None = None) -> list[dict[str, Any]]:
        """``topic``'s durable consumers as its root reports them (docs/API.md)."""
        reply = await self.request(consumers_request(topic, durable))
        return list(reply["consumers"])

    async def delete_consumer(self, topic: str, durable: str) -> bool:
        """End a durable consumer; whether there was one."""
        reply = await self.request({"op": "delete_consumer", "topic": topic,
                                    "durable": durable})
        return bool(reply["deleted"])

    def _message(self, notify: dict[str, Any]) -> Message:
        """A durable subscription's event, which acknowledges itself through it."""
        sub = notify["sub"]

        async def settle(op: str, msg_ids: Sequence[str], delay: float) -> None:
            await self.request(settle_request(sub, op, msg_ids, delay))

        return Message(**_event_fields(notify),
                       settling=AsyncSettling(notify["msg_id"], settle))

    def _end_subscription(self, sub: int) -> None:
        channel = self._subs.pop(sub, None)
        if channel is not None:
            channel.close()

    async def _read_loop(self) -> None:
        decoder = FrameDecoder(1 << 24)
        decode = MapDecoder()  # one CBOR decoder for the connection, not one per frame
        try:
            while True:
                data = await self._stream.receive_some(1 << 16)
                if not data:
                    raise ConnectionLost("the daemon closed the connection")
                decoder.feed(data)
                for body in decoder.bodies():
                    await self._dispatch(decode(body))
        except ClientError as exc:
            self._closed = exc
        except FrameError as exc:
            self._closed = ConnectionLost(f"unreadable data from the daemon: {exc}")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self._closed = ConnectionLost("connection to the daemon lost")
        finally:
            batches = [channel for batch in self._batches.values() for channel in batch]
            channels: list[trio.MemorySendChannel[Any]] = [
                *self._pending.values(), *self._subs.values(), *batches]
            for channel in channels:
                channel.close()
            self._subs.clear()
            self._batches.clear()

    async def _dispatch(self, msg: dict[str, Any]) -> None:
        event = msg.get("event")
        if event is None:
            rid: int = msg.get("rid", -1)  # a reply without a rid matches nothing
            batch = self._batches.pop(rid, None)
            if batch is not None:
                for channel, outcome in zip(batch, batch_outcomes(msg, len(batch)), strict=True):
                    with suppress(trio.BrokenResourceError):  # its publisher was cancelled
                        channel.send_nowait(outcome)
                return
            waiter = self._pending.get(rid)
            if waiter is not None:
                events = self._sub_channels.pop(rid, None)
                if events is not None and msg.get("ok") and type(msg.get("sub")) is int:
                    self._subs[msg["sub"]] = events
                waiter.send_nowait(msg)
        elif event == "notify":
            await self._notify(msg)
        elif event == "notify_batch":
            for notify in msg.get("events") or ():
                await self._notify(notify)
        elif event in ("expired", "ended"):
            self._end_subscription(msg.get("sub", -1))
        elif event == "error":
            raise RequestError.from_wire(msg.get("error"))

    async def _notify(self, notify: dict[str, Any]) -> None:
        channel = self._subs.get(notify.get("sub", -1))
        if channel is not None:
            # Waits when the application is behind: we stop reading, the daemon's
            # bounded queue fills, and it applies its overload policy. Only a durable
            # subscription's notify carries ``attempt`` past 1 or a consumer to settle
            # with: every notify becomes a Message, whose ack a plain one refuses.
            await channel.send(self._message(notify))


@asynccontextmanager
async def connect(target: str | None = None, *, client_name: str = "overlay-python",
                  buffer: int = 10_000) -> AsyncIterator[AsyncClient]:
    """Connect to a daemon, say hello, and yield a client; closes on exit."""
    stream = await _open_stream(target or default_target())
    async with stream, trio.open_nursery() as nursery:
        client = AsyncClient(stream, buffer)
        nursery.start_soon(client._read_loop)
        client._greeted(await client.request({"op": "hello", "version": API_VERSION,
                                              "client": client_name, "batch_notify": True}),
                        nursery)
        yield client
        nursery.cancel_scope.cancel()


# -- blocking client -------------------------------------------------------------------


class BlockingClient:
    """A synchronous client for scripts: one request at a time, pushes buffered."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._decoder = FrameDecoder(1 << 24)
        self._decode = MapDecoder()
        self._rids = itertools.count(1)
        self._events: list[dict[str, Any]] = []
        self.hello: dict[str, Any] = {}
        self.sizes = SizeLimits()
        self._batching = False
        self._max_batch = 0

    @classmethod
    @contextmanager
    def connect(cls, target: str | None = None, timeout: float | None = 30.0,
                client_name: str = "overlay-python") -> Iterator[BlockingClient]:
        target = target or default_target()
        try:
            if target.startswith("tcp:"):
                host, _, port = target[4:].rpartition(":")
                sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
            else:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                sock.connect(target)
        except (OSError, ValueError) as exc:
            raise ConnectionLost(f"cannot reach the daemon at {target}: {exc}") from None
        with sock:
            client = cls(sock)
            client.hello = client.request({"op": "hello", "version": API_VERSION,
                                           "client": client_name, "batch_notify": True})
            client.sizes = sizes_of(client.hello)
            client._batching, client._max_batch = batching_of(client.hello)
            yield client

    def _read_one(self) -> dict[str, Any]:
        while (body := self._decoder.next_body()) is None:
            try:
                data = self._sock.recv(1 << 16)
            except TimeoutError:
                raise
            except OSError as exc:
                raise ConnectionLost(f"connection to the daemon lost: {exc}") from None
            if not data:
                raise ConnectionLost("the daemon closed the connection")
            self._decoder.feed(data)
        return self._decode(body)

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        rid = next(self._rids)
        try:
            self._sock.sendall(encode_frame({**req, "rid": rid}, self.sizes.max_frame))
        except OSError as exc:
            raise ConnectionLost(f"connection to the daemon lost: {exc}") from None
        while True:
            msg = self._read_one()
            if "event" in msg:
                self._keep_push(msg)
            elif msg.get("rid") == rid:
                if not msg.get("ok"):
                    raise RequestError.from_wire(msg.get("error"))
                return msg

    def publish(self, topic: str, payload: bytes = b"", *,
                attrs: dict[str, AttrValue] | None = None, reliable: bool = True,
                msg_id: str | None = None, ttl: float | None = None) -> Published:
        reply = self.request(publish_request(topic, attrs, payload, reliable, msg_id,
                                             self.sizes, ttl))
        return Published(reply["msg_id"], reply.get("seq"))

    def publish_many(self, events: list[dict[str, Any]], *,
                     reliable: bool = True) -> list[Published | RequestError]:
        """Publish ``events`` (maps from :func:`publish_event`) in as few requests as
        ``max_frame`` allows, all sent before the replies are read: per event, its result
        or the error refusing it alone (those over the daemon's limits are not sent)."""
        refused = [too_large(event, self.sizes) for event in events]
        sendable = [event for event, error in zip(events, refused, strict=True) if error is None]
        sent = iter(self._publish_batched(sendable, reliable) if self._batching
                    else [self._publish_alone(event, reliable) for event in sendable])
        return [next(sent) if error is None else error for error in refused]

    def _publish_alone(self, event: dict[str, Any], reliable: bool) -> Published | RequestError:
        try:
            reply = self.request({"op": "publish", "reliable": reliable, **event})
        except RequestError as exc:
            return exc
        return Published(reply["msg_id"], reply.get("seq"))

    def _publish_batched(self, events: list[dict[str, Any]],
                         reliable: bool) -> list[Published | RequestError]:
        frames = batch_frames(events, reliable, self.sizes.max_frame, self._max_batch,
                              self._rids)
        try:
            self._sock.sendall(b"".join(frame for _, _, frame in frames))
        except OSError as exc:
            raise ConnectionLost(f"connection to the daemon lost: {exc}") from None
        waiting = {rid: count for rid, count, _ in frames}
        replies: dict[int, list[Published | RequestError]] = {}
        while waiting:
            msg = self._read_one()
            if "event" in msg:
                self._keep_push(msg)
            elif msg.get("rid") in waiting:
                rid = msg["rid"]
                replies[rid] = batch_outcomes(msg, waiting.pop(rid))
        return [outcome for rid, _, _ in frames for outcome in replies[rid]]

    def subscribe(self, topic: str, filter: str = "", *, expiry: float | None = None,
                  group: str | None = None, last: int | None = None,
                  since_seq: int | None = None, durable: str | None = None,
                  ack: bool | None = None, ack_wait: float | None = None,
                  max_deliver: int | None = None, dead_letter: str | None = None,
                  max_inflight: int | None = None, pull: bool | None = None) -> int:
        """A subscription's handle; with ``durable``, attached to that durable consumer
        (:meth:`events` gives its events as :class:`BlockingMessage` values)."""
        fields = durable_fields(durable, ack=ack, ack_wait=ack_wait, max_deliver=max_deliver,
                                dead_letter=dead_letter, max_inflight=max_inflight, pull=pull)
        req = subscribe_request(topic, filter, expiry, group, last, since_seq, fields)
        return int(self.request(req)["sub"])

    def ack(self, sub: int, msg_ids: Sequence[str]) -> None:
        self.settle(sub, "ack", msg_ids)

    def nak(self, sub: int, msg_ids: Sequence[str], delay: float = 0.0) -> None:
        self.settle(sub, "nak", msg_ids, delay)

    def term(self, sub: int, msg_ids: Sequence[str]) -> None:
        self.settle(sub, "term", msg_ids)

    def settle(self, sub: int, op: str, msg_ids: Sequence[str], delay: float = 0.0) -> None:
        """``ack``, ``nak`` or ``term`` of a durable subscription's events."""
        for run in settle_runs(msg_ids, self.sizes):
            self.request(settle_request(sub, op, run, delay))

    def fetch(self, sub: int, max: int = 1, wait: float = 0.0) -> list[BlockingMessage]:
        """Up to ``max`` events of a ``pull`` subscription, waiting up to ``wait`` s."""
        reply = self.request(fetch_request(sub, max, wait))
        return [self._message(item) for item in reply.get("events") or ()]

    def consumers(self, topic: str, durable: str | None = None) -> list[dict[str, Any]]:
        return list(self.request(consumers_request(topic, durable))["consumers"])

    def delete_consumer(self, topic: str, durable: str) -> bool:
        reply = self.request({"op": "delete_consumer", "topic": topic, "durable": durable})
        return bool(reply["deleted"])

    def _message(self, notify: dict[str, Any]) -> BlockingMessage:
        sub = notify["sub"]

        def settle(op: str, msg_ids: Sequence[str], delay: float) -> None:
            self.request(settle_request(sub, op, msg_ids, delay))

        return BlockingMessage(**_event_fields(notify),
                               settling=BlockingSettling(notify["msg_id"], settle))

    def unsubscribe(self, sub: int) -> None:
        self.request({"op": "unsubscribe", "sub": sub})

    def renew(self, sub: int, expiry: float) -> None:
        self.request({"op": "renew", "sub": sub, "expiry": expiry})

    def status(self) -> dict[str, Any]:
        reply = self.request({"op": "status"})
        return {k: v for k, v in reply.items() if k not in ("rid", "ok")}

    def _keep_push(self, msg: dict[str, Any]) -> None:
        """A push read while waiting for a reply: kept for :meth:`events` (a batch as its
        notifies), or raised (an error: the daemon closes the connection)."""
        kind = msg.get("event")
        if kind == "error":
            raise RequestError.from_wire(msg.get("error"))
        if kind == "notify_batch":
            self._events += ({"event": "notify", **e} for e in msg.get("events") or ())
        else:
            self._events.append(msg)

    def events(self) -> Iterator[BlockingMessage | int]:
        """Pushes as they come: an event (a :class:`BlockingMessage`, which a durable
        subscription's event acknowledges itself with), or the sub id of a subscription
        that ended (expired, or its durable consumer deleted).

        Raises ``TimeoutError`` when nothing arrives within the socket timeout.
        """
        while True:
            if not self._events:
                self._keep_push(self._read_one())
                continue
            msg = self._events.pop(0)
            kind = msg.get("event")
            if kind == "notify":
                yield self._message(msg)
            elif kind in ("expired", "ended"):
                yield int(msg["sub"])
            elif kind == "error":
                raise RequestError.from_wire(msg.get("error"))

    def set_timeout(self, timeout: float | None) -> None:
        self._sock.settimeout(timeout)

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
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import trio

from overlay.client_blocking import BlockingClient
from overlay.client_common import (
    API_VERSION,
    BadFilter,
    BlockingMessage,
    ClientError,
    Conflict,
    ConnectionLost,
    Event,
    Message,
    NotReady,
    Overloaded,
    Published,
    RequestError,
    StorageError,
    Timeout,
    TooLarge,
    UnknownSub,
    UnsupportedVersion,
    batch_frames,
    batch_outcomes,
    batching_of,
    default_state_dir,
    default_target,
    event_fields,
    publish_event,
    publish_request,
    sizes_of,
    subscribe_request,
    too_large,
)
from overlay.client_durable import (
    AsyncSettling,
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
    encode_frame,
)
from overlay.core.limits import SizeLimits
from overlay.core.pubsub import AttrValue

__all__ = [
    "API_VERSION",
    "AsyncClient",
    "BadFilter",
    "BlockingClient",
    "BlockingMessage",
    "ClientError",
    "Conflict",
    "ConnectionLost",
    "Event",
    "Message",
    "NotReady",
    "Overloaded",
    "Published",
    "RequestError",
    "StorageError",
    "Subscription",
    "Timeout",
    "TooLarge",
    "UnknownSub",
    "UnsupportedVersion",
    "batch_frames",
    "batch_outcomes",
    "batching_of",
    "connect",
    "default_state_dir",
    "default_target",
    "publish_event",
    "publish_request",
    "sizes_of",
    "subscribe_request",
    "too_large",
]


# -- async client ----------------------------------------------------------------------

#: Where one event's outcome of a batched publish goes.
_OutcomeChannel = trio.MemorySendChannel[Published | RequestError]


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

        return Message(**event_fields(notify),
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

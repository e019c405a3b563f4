"""One client connection of the local API: its subscriptions, its ordered replies, its queue.

Replies go out in request order even when a later request finishes first (a status
after a reliable publish waiting for its ack), while pushes are written as they come,
except a subscription's: those wait behind its ``subscribe`` reply, so a client never
sees an event for a handle it has not been given yet. That reply itself comes once the
subscription is in effect (``PubSubService.in_effect``).
Everything waiting to be written counts against ``max_queue_bytes``: a subscriber that
does not read is cut off with an ``overloaded`` error instead of growing our memory.

Batching (docs/API.md): a ``publish_batch`` carrying ``events`` gets one reply with a
result per event; a connection whose hello asked for ``batch_notify`` gets the notifies
that are ready together in ``notify_batch`` pushes, each frame at most ``max_frame``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from overlay.core.errors import FrameError
from overlay.core.framing import (
    CborEncoder,
    FrameDecoder,
    MapDecoder,
    encode_frame,
    frame_bytes,
)
from overlay.core.limits import SizeLimits
from overlay.runtime.api.outgoing import (
    BatchReply,
    Blocked,
    Gathered,
    NotifyBody,
    ReplySlot,
    batch_error,
    notify_bodies,
    notify_frames,
)
from overlay.runtime.api.requests import (
    API_VERSION,
    BAD_FRAME,
    BAD_REQUEST,
    OVERLOADED,
    UNKNOWN_SUB,
    UNSUPPORTED_VERSION,
    ApiError,
    Consumers,
    Fetch,
    Hello,
    Publish,
    PublishBatch,
    Renew,
    Settle,
    Status,
    Subscribe,
    Unsubscribe,
    max_batch_events,
    parse_request,
)
from overlay.runtime.api.service import (
    Done,
    Notifications,
    PublishResult,
    Push,
    notify_fields,
)

if TYPE_CHECKING:
    from overlay.runtime.api.server import ApiServer

log = logging.getLogger("overlay.api")

#: Largest ``rid``: it is echoed as a CBOR integer, never a tagged bignum.
MAX_RID = (1 << 64) - 1
#: Requests of one client handled in a row before the connection lets other tasks run.
REQUESTS_PER_TURN = 64
#: What this daemon offers beyond API.md's version 1 (hello's ``features``).
FEATURES = ["publish_batch", "notify_batch"]


class ApiConnection:
    def __init__(self, server: ApiServer, stream: trio.abc.Stream, conn_id: int) -> None:
        self.server = server
        self.service = server.service
        self.config = server.config
        self.stream = stream
        self.conn_id = conn_id
        self.sizes = SizeLimits(self.config.max_frame)
        self.subs: set[int] = set()
        #: Subscriptions whose ``subscribe`` reply is not written yet -> its slot.
        self._unreplied: dict[int, ReplySlot] = {}
        self.greeted = False
        #: Encodes this connection's replies and pushes (one encoder reused).
        self._encode = CborEncoder()
        #: The client asked at hello for notifies batched into ``notify_batch`` pushes.
        self.batch_notify = False
        self._pushes: deque[bytes | NotifyBody] = deque()
        self._replies: deque[ReplySlot] = deque()
        self._queued_bytes = 0
        self._wake = trio.Event()
        #: Whether ``_wake`` is set (setting a set Event is a call for nothing).
        self._woken = False
        self._closing = False
        #: Publishes waiting for the overlay (reliable ones): at most
        #: ``max_inflight_publishes``; past that the reader waits for ``_room``.
        self._inflight = 0
        self._room: trio.Event | None = None
        #: Publishes of one kind read in a row, not yet handed to the service.
        self._gathered: list[Gathered] = []
        self._nursery: trio.Nursery | None = None

    # -- lifecycle --------------------------------------------------------------------

    async def serve(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_loop, nursery.cancel_scope)
                await self._read_loop()
                nursery.cancel_scope.cancel()
        finally:
            self._closing = True
            for sub in sorted(self.subs):
                self.service.unsubscribe(sub, "disconnect")
            self.subs.clear()

    def _close_with(self, error: ApiError) -> None:
        """Send an error push (best effort) and close: the stream cannot go on."""
        if self._closing:
            return
        self._closing = True
        self._pushes.clear()
        self._replies.clear()
        self._pushes.append(encode_frame({"event": "error", "error": error.to_wire()}))
        self._woken = True
        self._wake.set()
        # The writer cancels the connection once the error is out; a client that does
        # not read gets ``close_grace`` seconds for it.
        if self._nursery is not None:
            self._nursery.cancel_scope.deadline = trio.current_time() + self.config.close_grace

    # -- reading ----------------------------------------------------------------------

    async def _read_loop(self) -> None:
        """Handle what each read brings before the next wait, ``REQUESTS_PER_TURN`` at a
        time: most requests are answered without a checkpoint, so their replies (and the
        pushes they cause) leave in one write per connection per turn, a turn's overlay
        work is carried out in one batch (``PubSubService.batch``), and other tasks
        (peers, timers, other clients) get their turn between."""
        decoder = FrameDecoder(self.config.max_frame)
        decode = MapDecoder()
        try:
            while not self._closing:
                data = await self.stream.receive_some(1 << 16)
                if not data:
                    decoder.close()
                    return
                self.server.stats["reads"] += 1  # requests / reads: how well reads batch
                decoder.feed(data)
                while not self._closing:
                    with self.service.batch():
                        more, blocked = self._handle_turn(decoder, decode)
                    if blocked is not None:
                        await self._publish_when_room(*blocked)
                    elif more:
                        await trio.lowlevel.checkpoint()
                    else:
                        break
        except FrameError as exc:
            self.server.stats["bad_frames"] += 1
            self._close_with(ApiError(BAD_FRAME, str(exc)))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        await trio.sleep_forever()  # until the writer (or the close deadline) ends us

    def _handle_turn(self, decoder: FrameDecoder,
                     decode: MapDecoder) -> tuple[bool, Blocked | None]:
        """Up to ``REQUESTS_PER_TURN`` of the requests read so far, with no checkpoint.
        Returns whether more may be waiting, and a publish that must first wait for room
        among the in-flight publishes (it ends the turn)."""
        try:
            for _ in range(REQUESTS_PER_TURN):
                if self._closing:
                    return False, None
                body = decoder.next_body()
                if body is None:
                    return False, None
                blocked = self._handle(decode(body))
                if blocked is not None:
                    return True, blocked
            return True, None
        finally:
            self._publish_gathered()

    def _handle(self, req: dict[str, Any]) -> Blocked | None:
        """Handle one request; a publish that must wait for room among the in-flight
        publishes is returned instead (the reader waits, so the client is not read)."""
        self.server.stats["requests"] += 1
        rid = req.get("rid")
        if type(rid) is not int or not 0 <= rid <= MAX_RID:
            self._reply_now(None, ApiError(BAD_REQUEST, "a request needs 'rid', an unsigned "
                                           "int below 2^64"))
            return None
        try:
            request = parse_request(req, self.sizes)
            if not self.greeted and not isinstance(request, Hello):
                raise ApiError(BAD_REQUEST, "the first request on a connection must be hello")
            if type(request) is Publish:
                return self._gather_publish(rid, request)
            if type(request) is PublishBatch:
                return self._gather_batch(rid, request)
            self._publish_gathered()  # the publishes read before this request go first
            if isinstance(request, Subscribe):
                self._start_subscribe(rid, request)
                return None
            if isinstance(request, Fetch | Consumers):
                self._start_answer(rid, request)
                return None
            result = self._execute(request)
        except ApiError as exc:
            self._reply_now(rid, exc)
            return None
        except Exception as exc:  # a bug of ours: the client gets 'internal', we go on
            log.exception("internal error handling %s", req.get("op"))
            self._reply_now(rid, ApiError.internal(exc))
            return None
        self._reply_now(rid, result)
        return None

    def _execute(self, request: Any) -> dict[str, Any]:
        service = self.service
        if isinstance(request, Hello):
            if request.version != API_VERSION:
                raise ApiError(UNSUPPORTED_VERSION,
                               f"API version {request.version} is not supported; use 1",
                               supported=[API_VERSION])
            self.greeted = True
            self.batch_notify = request.batch_notify
            return {"node": service.node_hex, "version": API_VERSION, "mode": service.mode,
                    **self.sizes.to_wire(), "features": [*FEATURES, *service.features],
                    "max_batch": max_batch_events(self.sizes.max_frame)}
        if isinstance(request, Status):
            return {**service.status(), "api": self.server.status()}
        if not service.ready:
            raise ApiError.not_ready()
        if isinstance(request, Renew | Unsubscribe | Settle):
            if request.sub not in self.subs:
                raise ApiError(UNKNOWN_SUB, f"no subscription {request.sub} on this connection")
            if isinstance(request, Renew):
                service.renew(request.sub, request.expiry)
            elif isinstance(request, Settle):
                service.settle(request)
            else:
                self.subs.discard(request.sub)
                service.unsubscribe(request.sub, "client")
            return {}
        raise ApiError(BAD_REQUEST, f"unhandled request {type(request).__name__}")

    def _start_subscribe(self, rid: int, request: Subscribe) -> None:
        """Create the subscription now (a bad filter is answered at once); reply once it
        is in effect."""
        if not self.service.ready:
            raise ApiError.not_ready()
        if len(self.subs) >= self.config.max_subscriptions_per_connection:
            raise ApiError(OVERLOADED, "too many subscriptions on this connection")
        sub = self.service.subscribe(request, self._push)
        self.subs.add(sub)
        slot = ReplySlot(sub=sub, trailing=[])
        self._replies.append(slot)
        self._unreplied[sub] = slot
        assert self._nursery is not None
        self._nursery.start_soon(self._run_subscribe, rid, sub, slot)

    async def _run_subscribe(self, rid: int, sub: int, slot: ReplySlot) -> None:
        try:
            await self.service.in_effect(sub)
        except ApiError as exc:  # refused (a durable consumer's root): no subscription
            self.subs.discard(sub)
            self._fill(slot, rid, exc)
            return
        except Exception:  # a bug of ours: the subscription exists, say so anyway
            log.exception("internal error waiting for subscription %d", sub)
        self._fill(slot, rid, {"sub": sub})

    def _start_answer(self, rid: int, request: Fetch | Consumers) -> None:
        """A request the overlay answers (a fetch, a consumer query): its reply keeps its
        place among the replies while a task waits for the answer."""
        if not self.service.ready:
            raise ApiError.not_ready()
        if isinstance(request, Fetch) and request.sub not in self.subs:
            raise ApiError(UNKNOWN_SUB, f"no subscription {request.sub} on this connection")
        slot = ReplySlot()
        self._replies.append(slot)
        assert self._nursery is not None
        self._nursery.start_soon(self._run_answer, rid, request, slot)

    async def _run_answer(self, rid: int, request: Fetch | Consumers, slot: ReplySlot) -> None:
        reply: dict[str, Any] | ApiError
        try:
            if isinstance(request, Fetch):
                events = await self.service.fetch(request)
                reply = {"events": [notify_fields(events.sub, event) for event in events.events]}
            else:
                reply = await self.service.consumers(request)
        except ApiError as exc:
            reply = exc
        except Exception as exc:  # a bug of ours: this request fails, the connection goes on
            log.exception("internal error answering %s", type(request).__name__)
            reply = ApiError.internal(exc)
        self._fill(slot, rid, reply)

    def _gather_publish(self, rid: int, request: Publish) -> Blocked | None:
        """Take the publish's reply place now and gather it with the publishes of its kind
        read in a row: they reach the service in one call (one pass through the overlay
        for a client's burst), before anything this client sent after them. A reliable
        publish past the in-flight bound is returned instead: the reader waits for room."""
        gathered = self._gathered
        if gathered and gathered[-1][2].reliable != request.reliable:
            self._publish_gathered()
            gathered = self._gathered
        # Asked once per run of publishes gathered: nothing between them awaits, so the
        # answer holds for the whole run (one call per event less).
        if not gathered and not self.service.ready:
            raise ApiError.not_ready()
        if request.reliable:
            if not self._room_for(1):
                return rid, request  # the turn ends: those gathered are handed over
            self._inflight += 1
        slot = ReplySlot()
        self._replies.append(slot)
        gathered.append((slot, rid, request))
        return None

    def _gather_batch(self, rid: int, batch: PublishBatch) -> Blocked | None:
        """:meth:`_gather_publish` for a ``publish_batch``: its valid events are
        gathered like single publishes, its refused ones answered at once; a reliable
        batch takes its in-flight places all together (or waits for them)."""
        if self._gathered and self._gathered[-1][2].reliable != batch.reliable:
            self._publish_gathered()
        if not self._gathered and not self.service.ready:
            raise ApiError.not_ready()
        if batch.reliable:
            valid = sum(type(event) is Publish for event in batch.events)
            if not self._room_for(valid):
                return rid, batch
            self._inflight += valid
        slot = ReplySlot()
        self._replies.append(slot)
        count = len(batch.events)
        reply = BatchReply(slot, rid, [None] * count, count)
        gathered = self._gathered
        for index, event in enumerate(batch.events):
            if isinstance(event, Publish):
                gathered.append((reply, index, event))
            else:
                self._fill_publish(reply, index, event)
        return None

    def _room_for(self, count: int) -> bool:
        """Whether ``count`` more reliable publishes may be in flight (a batch larger than
        the bound goes alone)."""
        return not self._inflight or self._inflight + count <= self.config.max_inflight_publishes

    async def _publish_when_room(self, rid: int, request: Publish | PublishBatch) -> None:
        """Bounded in-flight publishes: past the bound we stop reading this client."""
        count = 1 if isinstance(request, Publish) else len(request.events)
        while not self._room_for(count):
            if self._room is None:
                self._room = trio.Event()
            await self._room.wait()
        with self.service.batch():
            if isinstance(request, Publish):
                self._gather_publish(rid, request)
            else:
                self._gather_batch(rid, request)
            self._publish_gathered()

    def _publish_gathered(self) -> None:
        gathered = self._gathered
        if not gathered:
            return
        self._gathered = []
        requests = [request for _, _, request in gathered]
        if requests[0].reliable:
            self._begin_reliable(gathered, requests)
            return
        try:
            outcomes = self.service.publish_unreliable(requests)
        except Exception as exc:  # a bug of ours: these requests get 'internal', we go on
            log.exception("internal error in publish")
            outcomes = [ApiError.internal(exc)] * len(requests)
        for (slot, rid, _), outcome in zip(gathered, outcomes, strict=True):
            self._fill_publish(slot, rid, outcome)

    def _begin_reliable(self, gathered: list[Gathered], requests: list[Publish]) -> None:
        """Reliable publishes, each holding an in-flight place until it is answered."""
        dones = [self._answer_once(slot, rid) for slot, rid, _ in gathered]
        try:
            begun = self.service.begin_publishes(requests, dones)
        except Exception as exc:  # a bug of ours: those not answered yet get 'internal'
            log.exception("internal error in publish")
            failed = ApiError.internal(exc)
            for done in dones:
                done(failed)
            return
        assert self._nursery is not None
        for (slot, rid, request), started in zip(gathered, begun, strict=True):
            if not started:  # the service needs a task for it
                self._nursery.start_soon(self._run_publish, rid, request, slot)

    def _answer_once(self, slot: ReplySlot | BatchReply, rid: int) -> Done:
        answered = False

        def done(outcome: PublishResult | ApiError) -> None:
            nonlocal answered
            if not answered:
                answered = True
                self._publish_done()
                self._fill_publish(slot, rid, outcome)

        return done

    async def _run_publish(self, rid: int, request: Publish,
                           slot: ReplySlot | BatchReply) -> None:
        try:
            outcome: PublishResult | ApiError = await self.service.publish(request)
        except ApiError as exc:
            outcome = exc
        except Exception as exc:
            log.exception("internal error in publish")
            outcome = ApiError.internal(exc)
        finally:
            self._publish_done()
        self._fill_publish(slot, rid, outcome)

    def _publish_done(self) -> None:
        self._inflight -= 1
        if self._room is not None:
            self._room.set()
            self._room = None

    # -- writing ----------------------------------------------------------------------

    def _reply_now(self, rid: int | None, body: dict[str, Any] | ApiError) -> None:
        slot = ReplySlot()
        self._replies.append(slot)
        self._fill(slot, rid, body)

    def _fill(self, slot: ReplySlot, rid: int | None, body: dict[str, Any] | ApiError) -> None:
        if isinstance(body, ApiError):
            self._store(slot, {"rid": rid, "ok": False, "error": body.to_wire()})
        else:
            self._store(slot, {"rid": rid, "ok": True, **body})

    def _fill_publish(self, slot: ReplySlot | BatchReply, rid: int,
                      outcome: PublishResult | ApiError) -> None:
        """:meth:`_fill` for a publish's outcome (one per event: its map made at once); for
        an event of a batch, ``rid`` is its index there."""
        if isinstance(slot, BatchReply):
            slot.results[rid] = ({"msg_id": outcome.msg_id, "seq": outcome.seq}
                                 if isinstance(outcome, PublishResult)
                                 else {"error": batch_error(outcome)})
            slot.waiting -= 1
            if not slot.waiting:
                self._store(slot.slot, {"rid": slot.rid, "ok": True, "results": slot.results})
        elif isinstance(outcome, PublishResult):
            self._store(slot, {"rid": rid, "ok": True, "msg_id": outcome.msg_id,
                               "seq": outcome.seq})
        else:
            self._fill(slot, rid, outcome)

    def _store(self, slot: ReplySlot, reply: dict[str, Any]) -> None:
        """Encode ``reply`` into its slot and wake the writer."""
        slot.data = data = frame_bytes(self._encode(reply), self.config.max_frame)
        self._queued(len(data))

    def _push(self, push: Push) -> None:
        """Sink for the service: queue a push (a notify per event of a Notifications), or
        cut off a client that cannot keep up."""
        if self._closing:
            return
        queued: Sequence[bytes | NotifyBody]
        if isinstance(push, Notifications):
            encode, sub = self._encode, push.sub
            if self.batch_notify:
                queued = notify_bodies(encode, [notify_fields(sub, event)
                                                for event in push.events],
                                       self.config.max_frame)
            else:
                queued = [frame_bytes(encode(wire), self.config.max_frame)
                          for wire in push.to_wire()]
        else:
            self.subs.discard(push.sub)  # Expired, Ended: the subscription is over
            queued = [frame_bytes(self._encode(push.to_wire()), self.config.max_frame)]
        slot = self._unreplied.get(push.sub)
        if slot is not None and slot.trailing is not None:
            slot.trailing.extend(queued)
        else:
            self._pushes.extend(queued)
        self._queued(sum(len(item.data) if isinstance(item, NotifyBody) else len(item)
                         for item in queued))

    def _queued(self, size: int) -> None:
        """``size`` more bytes wait for the writer: wake it (once per wait: the frames of
        a turn come in hundreds), or cut off a client that does not read them."""
        self._queued_bytes += size
        if self._queued_bytes > self.config.max_queue_bytes and not self._closing:
            self.server.stats["overloaded_closes"] += 1
            log.warning("API connection %d is not reading: closing it (overloaded)", self.conn_id)
            self._close_with(ApiError(OVERLOADED, "outgoing queue full: the client is not "
                                      "reading fast enough"))
            self._queued_bytes = 0
        if not self._woken:
            self._woken = True
            self._wake.set()

    def _frames(self, pushes: Iterable[bytes | NotifyBody]) -> list[bytes]:
        if self.batch_notify:
            return notify_frames(pushes, self.config.max_frame)
        return list(pushes)  # type: ignore[arg-type]  # without batch_notify _push framed each

    async def _write_loop(self, scope: trio.CancelScope) -> None:
        try:
            while True:
                chunks = self._frames(self._pushes)
                self._pushes.clear()
                replies = self._replies
                while replies and (reply := replies[0].data) is not None:
                    slot = replies.popleft()
                    chunks.append(reply)
                    if slot.trailing is not None:
                        self._unreplied.pop(slot.sub, None)  # type: ignore[arg-type]  # a slot with trailing pushes is a subscribe's: sub is set
                        chunks.extend(self._frames(slot.trailing))
                if chunks:
                    data = b"".join(chunks)
                    self._queued_bytes = max(0, self._queued_bytes - len(data))
                    await self.stream.send_all(data)
                    continue
                if self._closing:
                    break
                await self._wake.wait()
                self._wake = trio.Event()
                self._woken = False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()

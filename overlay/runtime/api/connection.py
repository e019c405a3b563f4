"""One client connection of the local API: reading its requests, handling them in turns,
its subscriptions and its publishes in flight. What it writes, in which order and when,
is its :class:`~overlay.runtime.api.outbox.Outbox`'s.

A ``subscribe`` reply comes once the subscription is in effect
(``PubSubService.in_effect``); the subscription's events wait behind it (the outbox).

Batching (docs/API.md): a ``publish_batch`` carrying ``events`` gets one reply with a
result per event; a connection whose hello asked for ``batch_notify`` gets the notifies
that are ready together in ``notify_batch`` pushes, each frame at most ``max_frame``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from overlay.core.errors import FrameError
from overlay.core.framing import FrameDecoder, MapDecoder
from overlay.core.limits import SizeLimits
from overlay.runtime.api.outbox import Outbox
from overlay.runtime.api.outgoing import (
    BatchReply,
    Blocked,
    Gathered,
    ReplySlot,
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
        self.greeted = False
        self.out = Outbox(stream, self.config.max_frame, self.config.max_queue_bytes,
                          server.turn_writes, self._close_with, server.stats, conn_id)
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
                nursery.start_soon(self.out.write_loop, nursery.cancel_scope)
                await self._read_loop()
                nursery.cancel_scope.cancel()
        finally:
            self.out.closing = True
            for sub in sorted(self.subs):
                self.service.unsubscribe(sub, "disconnect")
            self.subs.clear()

    def _close_with(self, error: ApiError) -> None:
        """Send an error push (best effort) and close: the stream cannot go on."""
        # The writer cancels the connection once the error is out; a client that does
        # not read gets ``close_grace`` seconds for it.
        if self.out.close_with(error) and self._nursery is not None:
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
            while not self.out.closing:
                data = await self.stream.receive_some(1 << 16)
                if not data:
                    decoder.close()
                    return
                self.server.stats["reads"] += 1  # requests / reads: how well reads batch
                decoder.feed(data)
                while not self.out.closing:
                    with self.server.turn_writes.turn(self.out), self.service.batch():
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
                if self.out.closing:
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
            self.out.reply_now(None, ApiError(BAD_REQUEST, "a request needs 'rid', an unsigned "
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
            self.out.reply_now(rid, exc)
            return None
        except Exception as exc:  # a bug of ours: the client gets 'internal', we go on
            log.exception("internal error handling %s", req.get("op"))
            self.out.reply_now(rid, ApiError.internal(exc))
            return None
        self.out.reply_now(rid, result)
        return None

    def _execute(self, request: Any) -> dict[str, Any]:
        service = self.service
        if isinstance(request, Hello):
            if request.version != API_VERSION:
                raise ApiError(UNSUPPORTED_VERSION,
                               f"API version {request.version} is not supported; use 1",
                               supported=[API_VERSION])
            self.greeted = True
            self.out.batch_notify = request.batch_notify
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
        slot = self.out.reply_slot(sub)
        assert self._nursery is not None
        self._nursery.start_soon(self._run_subscribe, rid, sub, slot)

    async def _run_subscribe(self, rid: int, sub: int, slot: ReplySlot) -> None:
        try:
            await self.service.in_effect(sub)
        except ApiError as exc:  # refused (a durable consumer's root): no subscription
            self.subs.discard(sub)
            self.out.fill(slot, rid, exc)
            return
        except Exception:  # a bug of ours: the subscription exists, say so anyway
            log.exception("internal error waiting for subscription %d", sub)
        self.out.fill(slot, rid, {"sub": sub})

    def _start_answer(self, rid: int, request: Fetch | Consumers) -> None:
        """A request the overlay answers (a fetch, a consumer query): its reply keeps its
        place among the replies while a task waits for the answer."""
        if not self.service.ready:
            raise ApiError.not_ready()
        if isinstance(request, Fetch) and request.sub not in self.subs:
            raise ApiError(UNKNOWN_SUB, f"no subscription {request.sub} on this connection")
        slot = self.out.reply_slot()
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
        self.out.fill(slot, rid, reply)

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
        slot = self.out.reply_slot()
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
        slot = self.out.reply_slot()
        count = len(batch.events)
        reply = BatchReply(slot, rid, [None] * count, count)
        gathered = self._gathered
        for index, event in enumerate(batch.events):
            if isinstance(event, Publish):
                gathered.append((reply, index, event))
            else:
                self.out.fill_publish(reply, index, event)
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
            self.out.fill_publish(slot, rid, outcome)

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
                self.out.fill_publish(slot, rid, outcome)

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
        self.out.fill_publish(slot, rid, outcome)

    def _publish_done(self) -> None:
        self._inflight -= 1
        if self._room is not None:
            self._room.set()
            self._room = None

    def _push(self, push: Push) -> None:
        """Sink for the service: a push for this connection's client (its outbox queues
        it, or cuts off a client that cannot keep up)."""
        if not isinstance(push, Notifications):
            self.subs.discard(push.sub)  # Expired, Ended: the subscription is over
        self.out.push(push)

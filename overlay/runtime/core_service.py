"""What both modes' :class:`PubSubService` share: the local API over a pub/sub core.

The API server owns connections; a service owns the mapping from subscription handles
to the sinks that carry their pushes, and turns API requests into calls on the node's
pub/sub core (Scribe's ``ScribeApp`` or a ``GossipNode``, both with ``subscribe``,
``unsubscribe``, ``renew``, ``publish``), through :meth:`Daemon.call` so the core's
effects are carried out at once. Deliveries (``Deliver`` effects) become ``notify``
pushes (a run of them one ``Notifications`` hand-over); the ``expired`` notice becomes
an ``expired`` push; the ``published`` notice completes a reliable publish, the
``refused`` notice fails it.

Readings of API.md chosen here:
- a reliable publish is answered on the core's ``published`` notice: in structured mode
  once the topic's root has numbered the event and its replicas hold it, in
  unstructured mode once the local node holds it and has started spreading it (there
  is no root: ``seq`` is null). Without that notice within ``publish_timeout`` the
  reply is ``timeout``, and the client may publish again with the same ``msg_id``
  (the root numbers it once); the core's ``refused`` notice (the root cannot store the
  event) is the reply ``storage_error``; ``not_ready`` means only that this node has
  not joined;
- a subscription's ``expiry`` counts from its reply (the core is told at the reply,
  by a renew), so that no ``expired`` push comes before the handle it names;
- the ``subscribe`` reply comes once the subscription is in effect, so that an event
  published after it is delivered: in structured mode once the core's ``subscribed``
  notice says the topic's tree carries the subscription's filter from the root down,
  at most ``subscribe_timeout`` later (then the reply comes anyway, counted as
  ``subscribe_unsettled``: the tree is repairing and the subscription soon in effect);
  in unstructured mode at once;
- ``replay`` (structured mode) first delivers what the topic's root retains: ``last``
  N is the last N retained events that match the subscription's filter; in
  unstructured mode, where nothing is retained, a subscribe asking for it gets
  ``bad_request`` saying so instead of a silent no-op.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import trio

from matching import FilterSyntaxError
from overlay.core.effects import Deliver, Notice
from overlay.core.errors import LocalProtocolError
from overlay.core.protocol import ProtocolCore
from overlay.core.pubsub import Capabilities, NewEvent, PubSubCore, UnknownSubscriptionError
from overlay.runtime.api import ApiError, Expired, Notifications, PublishResult, Sink
from overlay.runtime.api.requests import Consumers, Fetch, Publish, Settle, Subscribe
from overlay.runtime.api.service import Done, Ended
from overlay.runtime.daemon import Daemon
from overlay.runtime.pending import PendingPublishes
from scribe.consumer_values import ConsumerConfig

#: Seconds a reliable publish waits for the core's ``published`` notice.
DEFAULT_PUBLISH_TIMEOUT = 10.0
#: Seconds a subscribe reply waits for the core's ``subscribed`` notice.
DEFAULT_SUBSCRIBE_TIMEOUT = 5.0
#: Seconds a consumer query, and a fetch beyond its ``wait``, wait for the root's answer.
DEFAULT_ANSWER_GRACE = 5.0

log = logging.getLogger("overlay.api")

#: The daemon's protocol core (a ChordNode, a GossipNode).
N = TypeVar("N", bound=ProtocolCore)
T = TypeVar("T")


class DurableCore(Protocol):
    """A core's durable consumers (Scribe's ``ScribeApp``): its answers come as notices
    (``subscribed``, ``consumer_refused``, ``fetched``, ``consumers``)."""

    def durable_subscribe(self, now: float, topic: str, name: str, sub_id: int,
                          filter_text: str = "", config: ConsumerConfig | None = None) -> None: ...

    def durable_ack(self, now: float, sub_id: int, op: str, msg_ids: tuple[str, ...],
                    delay: float = 0.0) -> None: ...

    def durable_fetch(self, now: float, sub_id: int, fetch_id: int, count: int,
                      wait: float) -> None: ...

    def consumers_query(self, now: float, query_id: int, topic: str, name: str | None = None,
                        delete: bool = False) -> None: ...


@dataclass
class _Answer:
    """A fetch or a consumer query waiting for the notice that answers it."""

    done: trio.Event = field(default_factory=trio.Event)
    value: dict[str, Any] | None = None
    #: A fetch's subscription: its end answers the fetch (``unknown_sub``).
    sub: int | None = None


class CoreService(Generic[N]):
    """Base of the modes' services; subclasses say how to reach the pub/sub core inside
    the daemon's protocol core ``N``."""

    mode = ""
    #: What the mode's core serves beyond plain subscriptions.
    capabilities: Capabilities

    def __init__(self, daemon: Daemon[N], publish_timeout: float = DEFAULT_PUBLISH_TIMEOUT,
                 subscribe_timeout: float = DEFAULT_SUBSCRIBE_TIMEOUT,
                 answer_grace: float = DEFAULT_ANSWER_GRACE) -> None:
        self.daemon = daemon
        self.publish_timeout = publish_timeout
        self.subscribe_timeout = subscribe_timeout
        self.answer_grace = answer_grace
        #: Subscriptions waiting for their ``subscribed`` notice.
        self._settling: dict[int, trio.Event] = {}
        #: Expiries asked for by subscriptions not answered yet (their clock starts at
        #: the reply).
        self._expiries: dict[int, float] = {}
        self._sinks: dict[int, Sink] = {}
        self._handles = itertools.count(1)
        #: Fresh msg_ids: 128 random bits, seeded from the OS (``secrets`` would read the
        #: OS for every publish).
        self._ids = random.Random()
        #: Reliable publishes waiting for their ``published`` notice.
        self.pending = PendingPublishes(publish_timeout)
        self.counters = {"published": 0, "delivered": 0, "undeliverable": 0,
                         "subscribe_unsettled": 0}
        #: Durable subscriptions whose consumer's root refused them before their reply.
        self._refused: dict[int, ApiError] = {}
        #: The subscriptions attached to durable consumers.
        self._durable: set[int] = set()
        #: Fetches and consumer queries waiting for the core's answer, by id.
        self._answers: dict[int, _Answer] = {}
        self._answer_ids = itertools.count(1)
        daemon.deliver_handlers.append(self._on_deliver)
        daemon.notice_handlers.append(self._on_notice)
        daemon.services.append(self._time_out_publishes)

    # -- what subclasses provide ---------------------------------------------------------------

    @property
    def ready(self) -> bool:
        raise NotImplementedError

    def core_of(self, node: N) -> PubSubCore:
        """The pub/sub core inside the daemon's protocol core."""
        raise NotImplementedError

    def core_status(self, node: N) -> dict[str, Any]:
        raise NotImplementedError

    # -- PubSubService -----------------------------------------------------------------------

    @property
    def features(self) -> tuple[str, ...]:
        return ("durable",) if self.capabilities.durable else ()

    @property
    def node_hex(self) -> str:
        node = self.daemon.node
        return "" if node is None else str(node.node_hex)

    def subscribe(self, request: Subscribe, sink: Sink) -> int:
        self._require_ready()
        if request.durable is not None:
            return self._durable_subscribe(request, sink)
        capabilities = self.capabilities
        if request.replay is not None and not capabilities.replay:
            raise ApiError("bad_request", f"replay is not served in {self.mode} mode: no "
                           "root retains a topic's events there")
        if request.group is not None and not capabilities.groups:
            raise ApiError("bad_request", f"groups are not served in {self.mode} mode")
        handle = next(self._handles)
        extra: dict[str, Any] = {"group": request.group} if capabilities.groups else {}
        if request.replay is not None:
            extra.update(replay_last=request.replay.last, replay_since=request.replay.since_seq)
        if capabilities.settles:  # before the call: the notice may come during it (at the root)
            self._settling[handle] = trio.Event()
        # The expiry clock starts at the reply (in_effect), not here: a short expiry must
        # not end a subscription before its client holds the handle.
        if request.expiry is not None:
            self._expiries[handle] = request.expiry
        try:
            self._call(lambda core, now: core.subscribe(now, request.topic, request.filter,
                                                        handle, None, **extra))
        except FilterSyntaxError as exc:
            self._settling.pop(handle, None)
            self._expiries.pop(handle, None)
            raise ApiError("bad_filter", str(exc), pos=exc.pos) from None
        except (ValueError, LocalProtocolError) as exc:
            self._settling.pop(handle, None)
            self._expiries.pop(handle, None)
            raise ApiError("bad_request", str(exc)) from None
        self._sinks[handle] = sink
        return handle

    async def in_effect(self, sub: int) -> None:
        """Return once the subscription is in effect (at most ``subscribe_timeout``); its
        reply goes out then, and its expiry clock starts."""
        settled = self._settling.get(sub)
        try:
            if settled is not None:
                with trio.move_on_after(self.subscribe_timeout):
                    await settled.wait()
                if not settled.is_set():
                    self.counters["subscribe_unsettled"] += 1
        finally:
            self._settling.pop(sub, None)
            expiry = self._expiries.pop(sub, None)
            if expiry is not None and sub in self._sinks:
                self._call(lambda core, now: core.renew(now, sub, expiry))
        refused = self._refused.pop(sub, None)
        if refused is not None:  # a durable consumer's root refused the attachment
            raise refused

    def renew(self, sub: int, expiry: float) -> None:
        if sub in self._durable:
            raise ApiError("bad_request", f"subscription {sub} is durable: it has no expiry "
                           "(unsubscribe detaches it)")
        try:
            self._call(lambda core, now: core.renew(now, sub, expiry))
        except UnknownSubscriptionError:
            raise ApiError("unknown_sub", f"no subscription {sub}") from None
        except ValueError as exc:
            raise ApiError("bad_request", str(exc)) from None

    def unsubscribe(self, sub: int, reason: str) -> None:
        if sub in self._durable:
            self._durable.discard(sub)
            for answer in self._answers.values():
                if answer.sub == sub and answer.value is None:
                    answer.value = {"ended": True}
                    answer.done.set()
        self._sinks.pop(sub, None)
        self._expiries.pop(sub, None)
        settling = self._settling.pop(sub, None)
        if settling is not None:
            settling.set()  # its reply need not wait any more
        try:
            self._call(lambda core, now: core.unsubscribe(now, sub, reason))
        except UnknownSubscriptionError:
            raise ApiError("unknown_sub", f"no subscription {sub}") from None

    def publish_unreliable(self, requests: Sequence[Publish]) -> list[PublishResult | ApiError]:
        """Unreliable publishes (answered without waiting for the overlay), in order, in
        one call into the core: the layers between a request and the core are crossed
        once for a client's burst rather than once per event. Per request, its result or
        the ApiError refusing it; one refused request does not stop the others."""
        if not self.ready:
            return [ApiError.not_ready()] * len(requests)
        ts = time.time()  # one turn of the reader: the same publish time for all
        msg_ids = [self._msg_id(request) for request in requests]
        outcomes = self._publish_all(requests, msg_ids, ts)
        self.counters["published"] += outcomes.count(None)
        return [PublishResult(msg_id, None) if o is None else o
                for msg_id, o in zip(msg_ids, outcomes, strict=True)]

    def begin_publishes(self, requests: Sequence[Publish], dones: Sequence[Done]) -> list[bool]:
        """Reliable publishes, in order, in one call into the core. Each ``done`` gets its
        publish's result, or an ApiError (refused, or ``timeout`` when no ``published``
        notice came within ``publish_timeout``), exactly once, maybe before this returns;
        so every one is begun here (True for each)."""
        if not self.ready:
            for done in dones:
                done(ApiError.not_ready())
            return [True] * len(requests)
        ts = time.time()
        msg_ids = [self._msg_id(request) for request in requests]
        # Registered first: at the root the notices come during the call.
        now = trio.current_time()
        waiters = [self.pending.add(request.topic, msg_id, done, now)
                   for request, msg_id, done in zip(requests, msg_ids, dones, strict=True)]
        outcomes = self._publish_all(requests, msg_ids, ts)
        for waiter, done, refused in zip(waiters, dones, outcomes, strict=True):
            if refused is None:
                self.pending.watch(waiter)
            else:
                self.pending.discard(waiter)
                done(refused)
        self.counters["published"] += outcomes.count(None)
        return [True] * len(requests)

    async def publish(self, request: Publish) -> PublishResult:
        if not request.reliable:
            outcome = self.publish_unreliable([request])[0]
        else:
            answered = trio.Event()
            outcomes: list[PublishResult | ApiError] = []

            def answer(result: PublishResult | ApiError) -> None:
                outcomes.append(result)
                answered.set()

            self.begin_publishes([request], [answer])
            await answered.wait()
            outcome = outcomes[0]
        if isinstance(outcome, ApiError):
            raise outcome
        return outcome

    def status(self) -> dict[str, Any]:
        node = self.daemon.node
        if node is None:
            return {"ready": False, "mode": self.mode}
        driver = self.daemon.driver
        return {"ready": self.ready, "mode": self.mode, "node": node.node_hex,
                "address": self.daemon.address, **self.core_status(node),
                "subscriptions": len(self._sinks),
                "counters": {**self.counters, "publish_timeouts": self.pending.timeouts,
                             "internal_errors": 0 if driver is None else driver.internal_errors,
                             "oversized": 0 if driver is None
                             else driver.transport.stats.oversized},
                "limits": self.daemon.config.limits.sizes.to_wire()}

    # -- effects from the core ------------------------------------------------------------------

    def _on_deliver(self, effect: Deliver) -> None:
        sink = self._sinks.get(effect.sub)
        if sink is None:
            self.counters["undeliverable"] += len(effect.events)
            return
        self.counters["delivered"] += len(effect.events)
        sink(Notifications(effect.sub, effect.events))

    def _on_notice(self, notice: Notice) -> None:
        if notice.kind == "published":
            self.pending.published(notice.data["topic"], notice.data["msg_id"],
                                   notice.data.get("seq"))
        elif notice.kind == "refused":
            self.pending.refused(notice.data["topic"], notice.data["msg_id"],
                                 notice.data["reason"])
        elif notice.kind == "subscribed":
            settling = self._settling.get(notice.data["sub"])
            if settling is not None:
                settling.set()
        elif notice.kind == "expired":
            sink = self._sinks.pop(notice.data["sub"], None)
            if sink is not None:
                sink(Expired(notice.data["sub"]))
        elif notice.kind in ("fetched", "consumers"):
            key = notice.data["fetch_id" if notice.kind == "fetched" else "query_id"]
            answer = self._answers.get(key)
            if answer is not None and answer.value is None:
                answer.value = notice.data
                answer.done.set()
        elif notice.kind == "consumer_refused":
            self._consumer_refused(notice.data["sub"], notice.data["code"],
                                   notice.data["error"])

    # -- durable consumers ------------------------------------------------------------------------

    def durable_core(self, node: N) -> DurableCore:
        """The core's durable consumers (ApiError in a mode without them)."""
        raise ApiError("bad_request", f"durable consumers are not served in {self.mode} mode: "
                       "no root keeps a topic's log there")

    def _durable_subscribe(self, request: Subscribe, sink: Sink) -> int:
        durable = request.durable
        assert durable is not None
        handle = next(self._handles)
        self._settling[handle] = trio.Event()  # set by the root's attachment (subscribed)
        try:
            self._call_durable(lambda core, now: core.durable_subscribe(
                now, request.topic, durable.name, handle, request.filter, durable.config))
        except FilterSyntaxError as exc:
            self._settling.pop(handle, None)
            raise ApiError("bad_filter", str(exc), pos=exc.pos) from None
        except (ValueError, LocalProtocolError) as exc:
            self._settling.pop(handle, None)
            raise ApiError("bad_request", str(exc)) from None
        self._sinks[handle] = sink
        self._durable.add(handle)
        return handle

    def _not_durable(self, sub: int) -> ApiError:
        """The error for an acknowledgement or fetch the core found no durable
        subscription for: it ended meanwhile, or it is a plain one."""
        if sub not in self._sinks:
            return ApiError("unknown_sub", f"no subscription {sub} (it has ended)")
        return ApiError("bad_request", f"subscription {sub} is not durable")

    def _consumer_refused(self, sub: int, code: str, message: str) -> None:
        """The consumer's root refused ``sub`` (before its reply: the subscribe fails) or
        ended it (its consumer was deleted: an ``ended`` push)."""
        self._durable.discard(sub)
        settling = self._settling.get(sub)
        if settling is not None:
            self._refused[sub] = ApiError(
                "conflict" if code == "conflict" else "bad_request", message)
            self._sinks.pop(sub, None)
            settling.set()
            return
        sink = self._sinks.pop(sub, None)
        if sink is not None:
            sink(Ended(sub, code, message))

    def settle(self, request: Settle) -> None:
        self._require_ready()
        try:
            self._call_durable(lambda core, now: core.durable_ack(
                now, request.sub, request.op, request.msg_ids, request.delay))
        except UnknownSubscriptionError:
            raise self._not_durable(request.sub) from None
        except ValueError as exc:
            raise ApiError("bad_request", str(exc)) from None

    async def fetch(self, request: Fetch) -> Notifications:
        self._require_ready()
        fetch_id = next(self._answer_ids)

        def ask(core: DurableCore, now: float) -> None:
            core.durable_fetch(now, request.sub, fetch_id, request.max, request.wait)

        try:
            answer = await self._ask(fetch_id, ask, request.wait + self.answer_grace,
                                     request.sub)
        except UnknownSubscriptionError:
            raise self._not_durable(request.sub) from None
        except ValueError as exc:
            raise ApiError("bad_request", str(exc)) from None
        if answer is not None and answer.get("ended"):
            raise ApiError("unknown_sub", f"subscription {request.sub} ended while its fetch "
                           "waited")
        if answer is None:
            raise ApiError("timeout", "no answer from the consumer's root within the fetch's "
                           f"wait and {self.answer_grace:g} s: its events, if any were given, "
                           "are delivered again after ack_wait")
        return Notifications(request.sub, answer["events"])

    async def consumers(self, request: Consumers) -> dict[str, Any]:
        self._require_ready()
        query_id = next(self._answer_ids)

        def ask(core: DurableCore, now: float) -> None:
            core.consumers_query(now, query_id, request.topic, request.durable, request.delete)

        try:
            answer = await self._ask(query_id, ask, self.answer_grace)
        except ValueError as exc:
            raise ApiError("bad_request", str(exc)) from None
        if answer is None:
            raise ApiError("timeout", f"no answer from the root of {request.topic!r} within "
                           f"{self.answer_grace:g} s")
        if request.delete:
            return {"deleted": bool(answer["consumers"])}
        return {"consumers": answer["consumers"], "more": answer["more"]}

    async def _ask(self, answer_id: int, ask: Callable[[DurableCore, float], None],
                   within: float, sub: int | None = None) -> dict[str, Any] | None:
        """Call ``ask`` into the durable core, and wait up to ``within`` s for the notice
        that answers ``answer_id`` (None: none came), or for subscription ``sub`` to end."""
        answer = self._answers[answer_id] = _Answer(sub=sub)
        try:
            self._call_durable(ask)
            with trio.move_on_after(within):
                await answer.done.wait()
            return answer.value
        finally:
            del self._answers[answer_id]

    def _call_durable(self, fn: Callable[[DurableCore, float], T]) -> T:
        return self.daemon.call(lambda node, now: fn(self.durable_core(node), now))

    # -- helpers ----------------------------------------------------------------------------------

    def _msg_id(self, request: Publish) -> str:
        # randbytes(16) as random.py writes it, one call less per event.
        return request.msg_id or self._ids.getrandbits(128).to_bytes(16, "little").hex()

    def _publish_all(self, requests: Sequence[Publish], msg_ids: Sequence[str],
                     ts: float) -> list[ApiError | None]:
        """The requests' events in one call into the core (one step: a run of one topic's
        events is handled together there). Per request None, or the ApiError refusing it."""
        events = [NewEvent(request.topic, request.attrs, request.payload, msg_id, ts,
                           request.reliable, request.ttl)
                  for request, msg_id in zip(requests, msg_ids, strict=True)]
        try:
            # Reliable in structured mode: the root answers once its replicas hold the
            # event (scribe.retention).
            outcomes = self._call(lambda core, now: core.publish_many(now, events))
        except Exception as exc:  # a bug of ours: the burst fails, the daemon goes on
            log.exception("internal error in publish")
            return [ApiError.internal(exc)] * len(requests)
        return [None if type(o) is str else ApiError("bad_request", str(o)) for o in outcomes]

    async def _time_out_publishes(self, daemon: Daemon[N]) -> None:
        await self.pending.run()

    def _require_ready(self) -> None:
        if not self.ready:
            raise ApiError.not_ready()

    def _call(self, fn: Callable[[PubSubCore, float], T]) -> T:
        return self.daemon.call(lambda node, now: fn(self.core_of(node), now))

    def batch(self) -> AbstractContextManager[None]:
        return self.daemon.batch()


__all__ = ["DEFAULT_PUBLISH_TIMEOUT", "CoreService"]

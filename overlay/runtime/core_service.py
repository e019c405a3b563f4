"""What both modes' :class:`PubSubService` share: the local API over a pub/sub core.

The API server owns connections; a service owns the mapping from subscription handles
to the sinks that carry their pushes, and turns API requests into calls on the node's
pub/sub core (Scribe's ``ScribeApp`` or a ``GossipNode``, both with ``subscribe``,
``unsubscribe``, ``renew``, ``publish``), through :meth:`Daemon.call` so the core's
effects are carried out at once. Deliveries (``Deliver`` effects) become ``notify``
pushes; the ``expired`` notice becomes an ``expired`` push; the ``published`` notice
completes a reliable publish, the ``refused`` notice fails it.

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
from typing import Any, Generic, TypeVar

import trio

from matching import FilterSyntaxError
from overlay.core.effects import Deliver, Notice
from overlay.core.errors import LocalProtocolError
from overlay.core.protocol import ProtocolCore
from overlay.core.pubsub import Capabilities, PubSubCore, UnknownSubscriptionError
from overlay.runtime.api import ApiError, Expired, Notification, PublishResult, Sink
from overlay.runtime.api.requests import Publish, Subscribe
from overlay.runtime.api.service import Done
from overlay.runtime.daemon import Daemon
from overlay.runtime.pending import PendingPublishes, Waiter

#: Seconds a reliable publish waits for the core's ``published`` notice.
DEFAULT_PUBLISH_TIMEOUT = 10.0
#: Seconds a subscribe reply waits for the core's ``subscribed`` notice.
DEFAULT_SUBSCRIBE_TIMEOUT = 5.0

log = logging.getLogger("overlay.api")

#: The daemon's protocol core (a ChordNode, a GossipNode).
N = TypeVar("N", bound=ProtocolCore)
T = TypeVar("T")


class CoreService(Generic[N]):
    """Base of the modes' services; subclasses say how to reach the pub/sub core inside
    the daemon's protocol core ``N``."""

    mode = ""
    #: What the mode's core serves beyond plain subscriptions.
    capabilities: Capabilities

    def __init__(self, daemon: Daemon[N], publish_timeout: float = DEFAULT_PUBLISH_TIMEOUT,
                 subscribe_timeout: float = DEFAULT_SUBSCRIBE_TIMEOUT) -> None:
        self.daemon = daemon
        self.publish_timeout = publish_timeout
        self.subscribe_timeout = subscribe_timeout
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
    def node_hex(self) -> str:
        node = self.daemon.node
        return "" if node is None else str(node.node_hex)

    def subscribe(self, request: Subscribe, sink: Sink) -> int:
        self._require_ready()
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

    def renew(self, sub: int, expiry: float) -> None:
        try:
            self._call(lambda core, now: core.renew(now, sub, expiry))
        except UnknownSubscriptionError:
            raise ApiError("unknown_sub", f"no subscription {sub}") from None
        except ValueError as exc:
            raise ApiError("bad_request", str(exc)) from None

    def unsubscribe(self, sub: int, reason: str) -> None:
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

        def publish_all(core: PubSubCore, now: float) -> list[PublishResult | ApiError]:
            outcomes: list[PublishResult | ApiError] = []
            for request in requests:
                msg_id = self._msg_id(request)
                refused = self._publish_one(core, now, request, msg_id, ts)
                outcomes.append(PublishResult(msg_id, None) if refused is None else refused)
            return outcomes

        outcomes: list[PublishResult | ApiError] = self._call(publish_all)
        self.counters["published"] += sum(type(o) is PublishResult for o in outcomes)
        return outcomes

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
        waiters: list[Waiter] = []

        def publish_all(core: PubSubCore, now: float) -> None:
            for request, done in zip(requests, dones, strict=True):
                msg_id = self._msg_id(request)
                # Registered first: at the root the notice may come during the call.
                waiter = self.pending.add(request.topic, msg_id, done)
                refused = self._publish_one(core, now, request, msg_id, ts)
                if refused is None:
                    waiters.append(waiter)
                else:
                    self.pending.discard(waiter)
                    done(refused)

        self._call(publish_all)
        self.counters["published"] += len(waiters)
        for waiter in waiters:
            self.pending.watch(waiter)
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
        event = effect.event
        sink = self._sinks.get(effect.sub)
        if sink is None:
            self.counters["undeliverable"] += 1
            return
        self.counters["delivered"] += 1
        sink(Notification(effect.sub, event))

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

    # -- helpers ----------------------------------------------------------------------------------

    def _msg_id(self, request: Publish) -> str:
        # randbytes(16) as random.py writes it, one call less per event.
        return request.msg_id or self._ids.getrandbits(128).to_bytes(16, "little").hex()

    def _publish_one(self, core: PubSubCore, now: float, request: Publish, msg_id: str,
                     ts: float) -> ApiError | None:
        """One publish inside a call into the core: None, or the ApiError refusing it."""
        try:
            # Reliable in structured mode: the root answers once its replicas hold the
            # event (scribe.retention).
            core.publish(now, request.topic, request.attrs, request.payload, msg_id, ts,
                         request.reliable)
        except (ValueError, LocalProtocolError) as exc:
            return ApiError("bad_request", str(exc))
        except Exception as exc:  # a bug of ours: this request fails, not its batch
            log.exception("internal error in publish")
            return ApiError.internal(exc)
        return None

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

"""The structured mode's :class:`PubSubService`: the local API over Scribe on Chord.

The API server owns connections; this object owns the mapping from subscription handles
to the sinks that carry their pushes, and turns API requests into calls on the node's
:class:`~scribe.app.ScribeApp` (through :meth:`Daemon.call`, so the core's effects are
carried out at once). Deliveries (``Deliver`` effects) become ``notify`` pushes; the
``expired`` notice becomes an ``expired`` push; the ``published`` notice (the topic's
root numbered the event) completes a reliable publish.

Readings of API.md chosen here:
- a reliable publish is answered once the topic's root has numbered the event (the
  root's replicas holding it comes with the reliable-delivery work); when the root does
  not answer within ``publish_timeout`` the reply is ``not_ready`` and the client may
  publish again with the same ``msg_id`` (the root drops the duplicate);
- ``replay`` needs the root's retained events, which this node does not keep yet: a
  subscribe asking for it gets ``bad_request`` saying so instead of a silent no-op.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections import defaultdict
from typing import Any

import trio

from chord.kbr import NodeRef
from chord.node import ChordNode
from chord.ring import hex_id
from matching import FilterSyntaxError
from overlay.core.effects import Deliver, Notice
from overlay.runtime.api import ApiError, Expired, Notification, PublishResult, Sink
from overlay.runtime.api.requests import Publish, Subscribe
from overlay.runtime.daemon import Daemon
from scribe.app import ScribeApp
from scribe.config import DuplicateSubscriptionError, UnknownSubscriptionError
from scribe.dissemination import DeliveredEvent

#: Seconds a reliable publish waits for the root's numbering before answering not_ready.
DEFAULT_PUBLISH_TIMEOUT = 10.0


class ScribeService:
    mode = "structured"

    def __init__(self, daemon: Daemon, publish_timeout: float = DEFAULT_PUBLISH_TIMEOUT) -> None:
        self.daemon = daemon
        self.publish_timeout = publish_timeout
        self._sinks: dict[int, Sink] = {}
        self._handles = itertools.count(1)
        #: (topic, msg_id) -> what the waiting publishes get: the root's seq, once known.
        self._waiting: dict[tuple[str, str], list[trio.MemorySendChannel[int | None]]] = (
            defaultdict(list))
        self.counters = {"published": 0, "delivered": 0, "publish_timeouts": 0,
                         "undeliverable": 0}
        daemon.deliver_handlers.append(self._on_deliver)
        daemon.notice_handlers.append(self._on_notice)

    # -- PubSubService -----------------------------------------------------------------------

    @property
    def node_hex(self) -> str:
        node = self.daemon.node
        return "" if node is None else node.node_hex

    @property
    def ready(self) -> bool:
        node = self.daemon.node
        return node is not None and node.joined and not node.leaving

    def subscribe(self, request: Subscribe, sink: Sink) -> int:
        self._require_ready()
        if request.replay is not None:
            raise ApiError("bad_request", "replay is not available: this node does not keep "
                           "retained events yet")
        handle = next(self._handles)
        try:
            self._call(lambda app, now: app.subscribe(now, request.topic, request.filter, handle,
                                                      request.expiry, request.group))
        except FilterSyntaxError as exc:
            raise ApiError("bad_filter", str(exc), pos=exc.pos) from None
        except DuplicateSubscriptionError as exc:  # handles come from our own counter
            raise ApiError("internal", str(exc)) from None
        except ValueError as exc:
            raise ApiError("bad_request", str(exc)) from None
        self._sinks[handle] = sink
        return handle

    def renew(self, sub: int, expiry: float) -> None:
        try:
            self._call(lambda app, now: app.renew(now, sub, expiry))
        except UnknownSubscriptionError:
            raise ApiError("unknown_sub", f"no subscription {sub}") from None
        except ValueError as exc:
            raise ApiError("bad_request", str(exc)) from None

    def unsubscribe(self, sub: int, reason: str) -> None:
        self._sinks.pop(sub, None)
        try:
            self._call(lambda app, now: app.unsubscribe(now, sub, reason))
        except UnknownSubscriptionError:
            raise ApiError("unknown_sub", f"no subscription {sub}") from None

    async def publish(self, request: Publish) -> PublishResult:
        self._require_ready()
        msg_id = request.msg_id or secrets.token_hex(16)
        key = (request.topic, msg_id)
        if not request.reliable:
            self._publish(request, msg_id)
            return PublishResult(msg_id, None)
        send, receive = trio.open_memory_channel[int | None](1)
        # Registered before the call: a root on this very node numbers it synchronously.
        self._waiting[key].append(send)
        try:
            self._publish(request, msg_id)
            with trio.move_on_after(self.publish_timeout):
                return PublishResult(msg_id, await receive.receive())
            self.counters["publish_timeouts"] += 1
            raise ApiError("not_ready", f"the root of topic {request.topic!r} did not take the "
                           f"event within {self.publish_timeout:g} s; publish again with "
                           f"msg_id {msg_id} (duplicates are dropped)")
        finally:
            waiters = self._waiting.get(key)
            if waiters is not None and send in waiters:
                waiters.remove(send)
                if not waiters:
                    del self._waiting[key]

    def status(self) -> dict[str, Any]:
        node = self.daemon.node
        if node is None:
            return {"ready": False, "mode": self.mode}
        state = node.state()
        app = node.app

        def ref(n: NodeRef) -> dict[str, str]:
            return {"node": hex_id(n.id, node.config.bits), "address": n.addr}

        return {
            "ready": self.ready, "mode": self.mode, "node": node.node_hex,
            "address": self.daemon.address,
            "successor": ref(state.successors[0]) if state.successors else None,
            "predecessor": None if state.predecessor is None else ref(state.predecessor),
            "successors": [ref(s) for s in state.successors],
            "topics": app.status() if isinstance(app, ScribeApp) else {},
            "subscriptions": len(self._sinks),
            "counters": dict(self.counters),
        }

    # -- effects from the core ------------------------------------------------------------------

    def _on_deliver(self, effect: Deliver) -> None:
        event = effect.event
        sink = self._sinks.get(effect.sub)
        if sink is None or not isinstance(event, DeliveredEvent):
            self.counters["undeliverable"] += 1
            return
        self.counters["delivered"] += 1
        sink(Notification(effect.sub, event.topic, event.msg_id, event.seq, dict(event.attrs),
                          event.payload, event.publisher, event.ts))

    def _on_notice(self, notice: Notice) -> None:
        if notice.kind == "published":
            key = (notice.data["topic"], notice.data["msg_id"])
            for send in self._waiting.pop(key, []):
                send.send_nowait(notice.data.get("seq"))
        elif notice.kind == "expired":
            sink = self._sinks.pop(notice.data["sub"], None)
            if sink is not None:
                sink(Expired(notice.data["sub"]))

    # -- helpers ----------------------------------------------------------------------------------

    def _publish(self, request: Publish, msg_id: str) -> None:
        try:
            self._call(lambda app, now: app.publish(now, request.topic, request.attrs,
                                                    request.payload, msg_id, ts=time.time()))
        except ValueError as exc:
            raise ApiError("bad_request", str(exc)) from None
        self.counters["published"] += 1

    def _require_ready(self) -> None:
        if not self.ready:
            raise ApiError("not_ready", "this node has not joined the ring yet")

    def _call(self, fn: Any) -> Any:
        def on_app(node: ChordNode, now: float) -> Any:
            if not isinstance(node.app, ScribeApp):
                raise ApiError("internal", "this node runs no Scribe application")
            return fn(node.app, now)

        return self.daemon.call(on_app)


__all__ = ["DEFAULT_PUBLISH_TIMEOUT", "ScribeService"]

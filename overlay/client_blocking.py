"""The blocking Python client (:class:`BlockingClient`), for scripts: one request at a
time, pushes buffered. Exported by :mod:`overlay.client`.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from overlay.client_common import (
    API_VERSION,
    BlockingMessage,
    ConnectionLost,
    Published,
    RequestError,
    batch_frames,
    batch_outcomes,
    batching_of,
    default_target,
    event_fields,
    publish_request,
    sizes_of,
    subscribe_request,
    too_large,
)
from overlay.client_durable import (
    BlockingSettling,
    consumers_request,
    durable_fields,
    fetch_request,
    settle_request,
    settle_runs,
)
from overlay.core.framing import (
    FrameDecoder,
    MapDecoder,
    encode_frame,
)
from overlay.core.limits import SizeLimits
from overlay.core.pubsub import AttrValue

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

        return BlockingMessage(**event_fields(notify),
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

"""Peer transport over TCP with trio.

- One persistent outbound connection per peer address, opened on first send. Its
  writer task takes every message queued so far (up to ``batch_bytes``) and writes them
  with one ``send_all``: batching is what lets trio move hundreds of thousands of small
  messages a second instead of tens of thousands. Messages taken together also share
  frames (:func:`bundle_bodies`): one frame header, one decode call and, with a cluster
  key, one seal per ``max_frame`` bytes of messages instead of per message.
- Inbound connections are read by one task each; decoded messages go to the owner's
  inbox channel as :class:`Inbound`. A frame that breaks the framing closes that
  connection; an invalid message is skipped and counted. Either way the node goes on.
- Queues are bounded. A send that finds its peer's queue full, or a connection that
  fails, reports each unsent message back as :class:`Unreachable`, so the core can
  route around the peer at once.
- Handshake: version, advertised address and nonces in the clear; with a cluster key,
  both sides then prove they hold it (see :mod:`overlay.runtime.crypto`) and every frame
  is sealed. A peer without the key is refused and logged.
- ``request()`` correlates a reply with its request for runtime code that needs an
  answer (cores correlate inside their own messages).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

import trio

from overlay.core.errors import (
    FrameError,
    HandshakeError,
    MessageError,
    RemoteProtocolError,
)
from overlay.core.framing import (
    CborEncoder,
    FrameDecoder,
    MapDecoder,
    array_head,
    decode_map,
    encode_map,
    frame_bytes,
    group_for_frames,
)
from overlay.core.limits import DEFAULT_MAX_FRAME
from overlay.core.messages import Message, decode_message, encode_message
from overlay.runtime.crypto import TAG_BYTES, FrameCipher
from overlay.runtime.handshake import client_handshake, server_handshake

log = logging.getLogger("overlay.transport")

#: Envelope keys added beside a message's fields for request/response correlation.
REQUEST_KEY = "~r"
ANSWER_KEY = "~a"
#: The one key of a frame that carries several messages: ``{"~b": [message, ...]}``.
BUNDLE_KEY = "~b"
#: A bundle's bytes before its array (the map's head and its key).
_BUNDLE_HEAD = encode_map({BUNDLE_KEY: []})[:-1]


def bundle_bodies(bodies: list[bytes], max_frame: int) -> list[bytes]:
    """Frame bodies carrying the encoded messages ``bodies`` in order: each run that fits
    ``max_frame`` bytes as a bundle goes as one; a run of one message goes as itself."""
    return [group[0] if len(group) == 1 else
            b"".join((_BUNDLE_HEAD, array_head(len(group)), *group))
            for group in group_for_frames(bodies, len(_BUNDLE_HEAD), max_frame)]


@dataclass(frozen=True)
class TransportConfig:
    bind_host: str = "127.0.0.1"
    bind_port: int = 0
    #: ``host:port`` other nodes use to reach us; default: bind host and actual port.
    advertised: str | None = None
    cluster_key: bytes | None = None
    max_frame: int = DEFAULT_MAX_FRAME
    send_queue_frames: int = 16_384
    batch_bytes: int = 256 << 10
    connect_timeout: float = 3.0
    handshake_timeout: float = 5.0
    #: One-way delay added to every frame we send (labs and tests: no netem here).
    delay: float = 0.0

    def __post_init__(self) -> None:
        if self.cluster_key is not None and len(self.cluster_key) != 32:
            raise ValueError("cluster key must be 32 bytes")
        if self.send_queue_frames < 1 or self.batch_bytes < 1 or self.max_frame < 64:
            raise ValueError("queue, batch and frame limits must be positive")
        if self.delay < 0:
            raise ValueError("delay must be >= 0")


@dataclass(frozen=True)
class Inbound:
    """A message from peer ``src`` (its advertised address); ``rid`` if it asks a reply."""

    src: str
    msg: Message
    rid: int | None = None


@dataclass(frozen=True)
class Unreachable:
    """``msg`` could not be handed to ``dest``."""

    dest: str
    msg: Message
    reason: str


@dataclass
class TransportStats:
    #: Frames on the wire; a frame carries one message or a bundle of several.
    frames_sent: int = 0
    frames_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    bytes_sent: int = 0
    batches_sent: int = 0
    connections_opened: int = 0
    peers_refused: int = 0
    bad_frames: int = 0
    bad_messages: int = 0
    unreachable: int = 0
    #: Messages of ours over ``max_frame``, never sent: the size model lets none be
    #: built, so each is a bug (logged once per message type).
    oversized: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class _Queued:
    msg: Message
    body: bytes
    enqueued_at: float


@dataclass
class _OutboundPeer:
    dest: str
    send_channel: trio.MemorySendChannel[_Queued]
    receive_channel: trio.MemoryReceiveChannel[_Queued]
    inflight: list[_Queued] = field(default_factory=list)
    failure: str | None = None


def split_address(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


class Transport:
    """TCP links to peers; owned by a nursery through :meth:`run`."""

    def __init__(
        self, config: TransportConfig, inbox: trio.MemorySendChannel[Inbound | Unreachable]
    ) -> None:
        self.config = config
        self.inbox = inbox
        self.address = config.advertised or ""
        self.stats = TransportStats()
        self._oversized_types: set[str] = set()
        self._peers: dict[str, _OutboundPeer] = {}
        self._pending: dict[int, trio.MemorySendChannel[Message]] = {}
        self._rids = itertools.count(1)
        self._nursery: trio.Nursery | None = None
        #: Encodes every message sent (one encoder reused: a message per event per hop).
        self._encode = CborEncoder()

    # -- lifecycle --------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until cancelled; ``task_status.started`` gets our address."""
        cfg = self.config
        listeners = await trio.open_tcp_listeners(cfg.bind_port, host=cfg.bind_host)
        port = listeners[0].socket.getsockname()[1]
        if not self.address:
            host = cfg.bind_host if ":" not in cfg.bind_host else f"[{cfg.bind_host}]"
            self.address = f"{host}:{port}"
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(trio.serve_listeners, self._serve_inbound, listeners)
            task_status.started(self.address)
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None
                for peer in self._peers.values():
                    peer.send_channel.close()

    # -- sending ------------------------------------------------------------------------

    def send(self, dest: str, msg: Message, *, rid: int | None = None,
             answer_to: int | None = None) -> None:
        """Queue ``msg`` for ``dest`` without blocking; failures come back as Unreachable."""
        wire = encode_message(msg)
        if rid is not None:
            wire[REQUEST_KEY] = rid
        if answer_to is not None:
            wire[ANSWER_KEY] = answer_to
        body = self._encode(wire)
        if len(body) > self.config.max_frame:
            # A bug of ours (the size model bounds every message): counted, logged once
            # per type, dropped. Never reported as the peer's failure, never retried here.
            self.stats.oversized += 1
            if msg.type_name not in self._oversized_types:
                self._oversized_types.add(msg.type_name)
                log.error("not sending %s of %d bytes to %s: over max_frame %d (a bug; "
                          "further ones of this type are only counted)", msg.type_name,
                          len(body), dest, self.config.max_frame)
            return
        if dest == self.address:
            # To ourselves: no socket; decode the copy so the core gets a fresh object.
            self._loopback(body)
            return
        peer = self._peers.get(dest)
        if peer is None:
            peer = self._open_peer(dest)
            if peer is None:
                self._report_unreachable(dest, msg, "transport closed")
                return
        try:
            peer.send_channel.send_nowait(_Queued(msg, body, trio.current_time()))
        except trio.WouldBlock:
            self._report_unreachable(dest, msg, "send queue full")
        except trio.ClosedResourceError:
            self._report_unreachable(dest, msg, "connection closing")

    async def request(self, dest: str, msg: Message, timeout: float = 5.0) -> Message:
        """Send ``msg`` and wait for the reply the peer's runtime sends with ``reply()``."""
        rid = next(self._rids)
        send_channel, receive_channel = trio.open_memory_channel[Message](1)
        self._pending[rid] = send_channel
        try:
            self.send(dest, msg, rid=rid)
            with trio.fail_after(timeout):
                return await receive_channel.receive()
        finally:
            del self._pending[rid]

    def reply(self, dest: str, rid: int, msg: Message) -> None:
        self.send(dest, msg, answer_to=rid)

    def _loopback(self, body: bytes) -> None:
        self._dispatch(self.address, decode_map(body))

    def _open_peer(self, dest: str) -> _OutboundPeer | None:
        if self._nursery is None:
            return None
        send_channel, receive_channel = trio.open_memory_channel[_Queued](
            self.config.send_queue_frames
        )
        peer = _OutboundPeer(dest, send_channel, receive_channel)
        self._peers[dest] = peer
        self._nursery.start_soon(self._run_outbound, peer)
        return peer

    def _report_unreachable(self, dest: str, msg: Message, reason: str) -> None:
        self.stats.unreachable += 1
        try:
            self.inbox.send_nowait(Unreachable(dest, msg, reason))
        except (trio.WouldBlock, trio.ClosedResourceError):
            log.warning("inbox full: lost unreachable report for %s to %s", msg.type_name, dest)

    async def _run_outbound(self, peer: _OutboundPeer) -> None:
        cfg = self.config
        try:
            host, port = split_address(peer.dest)
            with trio.fail_after(cfg.connect_timeout):
                stream = await trio.open_tcp_stream(host, port)
            async with stream:
                with trio.fail_after(cfg.handshake_timeout):
                    cipher, _ = await client_handshake(stream, self.address, cfg)
                self.stats.connections_opened += 1
                # Both tasks record why they stopped and cancel the other; neither raises,
                # so no ExceptionGroup has to be taken apart here.
                async with trio.open_nursery() as conn:
                    conn.start_soon(self._watch_eof, stream, peer, conn.cancel_scope)
                    conn.start_soon(self._write_loop, peer, stream, cipher, conn.cancel_scope)
        except trio.TooSlowError:
            peer.failure = "timed out"
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            peer.failure = f"connection failed: {exc}"
        except HandshakeError as exc:
            peer.failure = f"handshake refused: {exc}"
            log.warning("peer %s refused our handshake: %s", peer.dest, exc)
        except (RemoteProtocolError, ValueError) as exc:
            peer.failure = f"protocol error: {exc}"
            log.warning("peer %s: %s", peer.dest, exc)
        except Exception as exc:
            peer.failure = f"internal error: {exc}"
            log.exception("internal error on link to %s", peer.dest)
        finally:
            if self._peers.get(peer.dest) is peer:
                del self._peers[peer.dest]
            peer.send_channel.close()
            unsent = peer.inflight + _drain(peer.receive_channel)
            for item in unsent:
                self._report_unreachable(peer.dest, item.msg, peer.failure or "connection closed")

    async def _write_loop(self, peer: _OutboundPeer, stream: trio.abc.Stream,
                          cipher: FrameCipher | None, scope: trio.CancelScope) -> None:
        cfg, stats = self.config, self.stats
        receive_channel = peer.receive_channel
        try:
            async for first in receive_channel:
                batch = [first]
                size = len(first.body)
                while size < cfg.batch_bytes:
                    try:
                        item = receive_channel.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    batch.append(item)
                    size += len(item.body)
                peer.inflight = batch
                if cfg.delay:
                    await trio.sleep_until(first.enqueued_at + cfg.delay)
                bodies = bundle_bodies([item.body for item in batch], cfg.max_frame)
                if cipher is None:
                    data = b"".join(frame_bytes(body, cfg.max_frame) for body in bodies)
                else:
                    limit = cfg.max_frame + TAG_BYTES
                    data = b"".join(frame_bytes(cipher.seal(body), limit) for body in bodies)
                await stream.send_all(data)
                peer.inflight = []
                stats.frames_sent += len(bodies)
                stats.messages_sent += len(batch)
                stats.bytes_sent += len(data)
                stats.batches_sent += 1
            peer.failure = "transport closing"
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            peer.failure = f"write failed: {exc}"
        scope.cancel()

    @staticmethod
    async def _watch_eof(stream: trio.abc.Stream, peer: _OutboundPeer,
                         scope: trio.CancelScope) -> None:
        # Peers never write on our outbound link after the handshake: any read result
        # means it closed, and the writer must stop rather than write into the void.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await stream.receive_some(1)
        peer.failure = peer.failure or "peer closed the connection"
        scope.cancel()

    # -- receiving ----------------------------------------------------------------------

    async def _serve_inbound(self, stream: trio.SocketStream) -> None:
        cfg = self.config
        peer_label = _peer_label(stream)
        async with stream:
            try:
                with trio.fail_after(cfg.handshake_timeout):
                    src, cipher, decoder = await server_handshake(stream, cfg)
                await self._read_loop(stream, src, cipher, decoder)
            except trio.TooSlowError:
                self.stats.peers_refused += 1
                log.warning("refused %s: handshake timed out", peer_label)
            except HandshakeError as exc:
                self.stats.peers_refused += 1
                log.warning("refused %s: %s", peer_label, exc)
            except FrameError as exc:
                self.stats.bad_frames += 1
                log.warning("closed link from %s: %s", peer_label, exc)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            except Exception:
                # A bug of ours must cost one link, not the node.
                log.exception("internal error on link from %s", peer_label)

    async def _read_loop(self, stream: trio.abc.Stream, src: str, cipher: FrameCipher | None,
                         decoder: FrameDecoder) -> None:
        inbox = self.inbox
        decode = MapDecoder()
        while True:
            for body in decoder.bodies():
                if cipher is not None:
                    body = cipher.open(body)
                self.stats.frames_received += 1
                for wire in self._unbundle(src, decode(body)):
                    item = self._decode_inbound(src, wire)
                    if item is None:
                        continue
                    try:
                        inbox.send_nowait(item)
                    except trio.WouldBlock:
                        await inbox.send(item)  # the core is behind: stop reading; TCP pushes back
            data = await stream.receive_some(1 << 18)
            if not data:
                decoder.close()
                return
            decoder.feed(data)

    def _dispatch(self, src: str, wire: dict[str, Any]) -> None:
        item = self._decode_inbound(src, wire)
        if item is not None:
            try:
                self.inbox.send_nowait(item)
            except trio.WouldBlock:
                log.warning("inbox full: dropped a %s sent to ourselves", item.msg.type_name)

    def _unbundle(self, src: str, wire: dict[str, Any]) -> list[dict[str, Any]]:
        """The messages of one frame: itself, or a bundle's (:func:`bundle_bodies`)."""
        bundle = wire.get(BUNDLE_KEY)
        if bundle is None:
            return [wire]
        if len(wire) == 1 and type(bundle) is list and all(type(m) is dict for m in bundle):
            return bundle
        # Framing is intact, so one bad frame need not cost the whole link.
        self.stats.bad_messages += 1
        log.warning("skipped a bad bundle from %s: not a list of messages alone", src)
        return []

    def _decode_inbound(self, src: str, wire: dict[str, Any]) -> Inbound | None:
        self.stats.messages_received += 1
        rid = wire.pop(REQUEST_KEY, None)
        answer_to = wire.pop(ANSWER_KEY, None)
        try:
            if not (rid is None or _is_uint(rid)) or not (answer_to is None or _is_uint(answer_to)):
                raise MessageError("request ids must be unsigned integers")
            msg = decode_message(wire)
        except MessageError as exc:
            # Framing is intact, so one bad message need not cost the whole link.
            self.stats.bad_messages += 1
            log.warning("skipped a bad message from %s: %s", src, exc)
            return None
        if answer_to is not None:
            waiter = self._pending.get(answer_to)
            if waiter is not None:
                with contextlib.suppress(trio.WouldBlock):  # a second reply is ignored
                    waiter.send_nowait(msg)
            return None
        return Inbound(src, msg, rid)


def _is_uint(value: Any) -> bool:
    return type(value) is int and value >= 0


def _drain(channel: trio.MemoryReceiveChannel[_Queued]) -> list[_Queued]:
    items: list[_Queued] = []
    while True:
        try:
            items.append(channel.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return items


def _peer_label(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "unknown peer"


__all__ = [
    "BUNDLE_KEY",
    "Inbound",
    "Transport",
    "TransportConfig",
    "Unreachable",
    "split_address",
]

"""Connection handshake between peers: version, identity, and proof of the cluster key.

Client -> server (clear): ``{"t": "hello", "v": 1, "addr": ..., "nonce": 16 bytes,
"sec": bool, "max_frame": int}``. Both sides must use the same ``max_frame`` (the size
model: an event that fits one node's messages must fit every hop's); a server refuses
a hello with another one, or without one. Server -> client: ``{"t": "welcome", "v": 1,
"nonce": ..., "sec": ...}`` or ``{"t": "refused", "reason": ...}`` before it closes.
With a cluster key both sides then exchange one sealed frame (``auth`` carrying the
client's address, ``auth_ok``): only a holder of the key can produce them, so a peer
without it is refused before any message of it reaches a core.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import trio

from overlay.core.errors import FrameError, HandshakeError
from overlay.core.framing import FrameDecoder, decode_map, encode_frame, encode_map, frame_bytes
from overlay.core.limits import PEER_PROTOCOL_VERSION
from overlay.runtime.crypto import NONCE_BYTES, TAG_BYTES, FrameCipher, new_nonce

if TYPE_CHECKING:
    from overlay.runtime.transport import TransportConfig

#: Handshake frames are tiny; a peer sending more before authenticating is refused.
HANDSHAKE_MAX_FRAME = 4096


async def read_frame(stream: trio.abc.ReceiveStream, decoder: FrameDecoder) -> bytes:
    """Read until ``decoder`` holds one whole frame; leftover bytes stay in it."""
    while (body := decoder.next_body()) is None:
        data = await stream.receive_some(1 << 16)
        if not data:
            raise HandshakeError("peer closed the connection during the handshake")
        decoder.feed(data)
    return body


async def _read_map(stream: trio.abc.ReceiveStream, decoder: FrameDecoder,
                    cipher: FrameCipher | None = None) -> dict[str, Any]:
    body = await read_frame(stream, decoder)
    if cipher is not None:
        body = cipher.open(body)
    try:
        return decode_map(body)
    except FrameError as exc:
        raise HandshakeError(f"bad handshake frame: {exc}") from None


async def _refuse(stream: trio.abc.SendStream, reason: str) -> HandshakeError:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await stream.send_all(encode_frame({"t": "refused", "reason": reason}))
    return HandshakeError(reason)


def _check_nonce(value: Any) -> bytes:
    if not isinstance(value, bytes) or len(value) != NONCE_BYTES:
        raise HandshakeError("handshake nonce must be 16 bytes")
    return value


async def client_handshake(
    stream: trio.abc.Stream, my_address: str, config: TransportConfig
) -> tuple[FrameCipher | None, FrameDecoder]:
    key = config.cluster_key
    decoder = FrameDecoder(HANDSHAKE_MAX_FRAME)
    nonce = new_nonce()
    hello = {"t": "hello", "v": PEER_PROTOCOL_VERSION, "addr": my_address, "nonce": nonce,
             "sec": key is not None, "max_frame": config.max_frame}
    await stream.send_all(encode_frame(hello))
    answer = await _read_map(stream, decoder)
    if answer.get("t") == "refused":
        raise HandshakeError(f"refused: {answer.get('reason')!r}")
    if answer.get("t") != "welcome" or answer.get("v") != PEER_PROTOCOL_VERSION:
        raise HandshakeError(f"unexpected handshake answer {answer.get('t')!r}")
    server_nonce = _check_nonce(answer.get("nonce"))
    if answer.get("sec") is not (key is not None):
        raise HandshakeError("the peer and we disagree on using a cluster key")
    cipher = None
    if key is not None:
        cipher = FrameCipher(key, nonce, server_nonce, is_client=True)
        await stream.send_all(frame_bytes(cipher.seal(encode_map({"t": "auth",
                                                                  "addr": my_address}))))
        if (await _read_map(stream, decoder, cipher)).get("t") != "auth_ok":
            raise HandshakeError("the peer did not confirm the cluster key")
    decoder.max_frame = config.max_frame + (TAG_BYTES if key is not None else 0)
    return cipher, decoder


async def server_handshake(
    stream: trio.abc.Stream, config: TransportConfig
) -> tuple[str, FrameCipher | None, FrameDecoder]:
    key = config.cluster_key
    decoder = FrameDecoder(HANDSHAKE_MAX_FRAME)
    try:
        hello = await _read_map(stream, decoder)
    except FrameError as exc:
        raise HandshakeError(f"bad hello: {exc}") from None
    if hello.get("t") != "hello":
        raise await _refuse(stream, "expected a hello frame")
    if hello.get("v") != PEER_PROTOCOL_VERSION:
        raise await _refuse(stream, f"unsupported protocol version {hello.get('v')!r}")
    addr = hello.get("addr")
    if not isinstance(addr, str) or not 0 < len(addr) <= 300:
        raise await _refuse(stream, "hello needs the peer's address")
    client_nonce = _check_nonce(hello.get("nonce"))
    if hello.get("max_frame") != config.max_frame:
        raise await _refuse(stream, f"this overlay's max_frame is {config.max_frame}, the "
                                    f"peer's {hello.get('max_frame')!r}: every node must use "
                                    "the same")
    if hello.get("sec") is not (key is not None):
        reason = "this cluster requires a cluster key" if key else "this node has no cluster key"
        raise await _refuse(stream, reason)
    server_nonce = new_nonce()
    await stream.send_all(encode_frame({"t": "welcome", "v": PEER_PROTOCOL_VERSION,
                                        "nonce": server_nonce, "sec": key is not None}))
    cipher = None
    if key is not None:
        cipher = FrameCipher(key, client_nonce, server_nonce, is_client=False)
        auth = await _read_map(stream, decoder, cipher)
        if auth.get("t") != "auth" or auth.get("addr") != addr:
            raise HandshakeError("sealed auth frame does not match the hello")
        await stream.send_all(frame_bytes(cipher.seal(encode_map({"t": "auth_ok"}))))
    decoder.max_frame = config.max_frame + (TAG_BYTES if key is not None else 0)
    return addr, cipher, decoder

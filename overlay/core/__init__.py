"""Shared vocabulary of the protocol cores: effects, messages, framing, errors, timers."""

from overlay.core.effects import Deliver, Effect, Notice, Send, Trace
from overlay.core.errors import (
    FrameError,
    HandshakeError,
    LocalProtocolError,
    MessageError,
    OverlayError,
    RemoteProtocolError,
)
from overlay.core.framing import FrameDecoder, decode_map, encode_frame, encode_map
from overlay.core.ids import format_id, hash_id, parse_id
from overlay.core.messages import (
    Message,
    Record,
    decode_message,
    encode_message,
    message,
    record,
)
from overlay.core.protocol import CoreBase, ProtocolCore
from overlay.core.timers import Timers

__all__ = [
    "CoreBase",
    "Deliver",
    "Effect",
    "FrameDecoder",
    "FrameError",
    "HandshakeError",
    "LocalProtocolError",
    "Message",
    "MessageError",
    "Notice",
    "OverlayError",
    "ProtocolCore",
    "Record",
    "RemoteProtocolError",
    "Send",
    "Timers",
    "Trace",
    "decode_map",
    "decode_message",
    "encode_frame",
    "encode_map",
    "encode_message",
    "format_id",
    "hash_id",
    "message",
    "parse_id",
    "record",
]

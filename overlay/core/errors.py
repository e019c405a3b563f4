"""Errors of the protocol cores, split by blame (as h11 does).

- :class:`LocalProtocolError`: *we* misused our own API (a bug on this side, or a
  caller asking for something impossible). Never caused by a peer.
- :class:`RemoteProtocolError`: a peer or client sent something that breaks the
  protocol. The connection that carried it may be closed; the node goes on serving
  everyone else. ``code`` is the API error code (API.md) that fits the fault.
"""

from __future__ import annotations


class OverlayError(Exception):
    """Base class of every error the project raises on purpose."""


class LocalProtocolError(OverlayError):
    """This side misused the protocol or its own API."""


class RemoteProtocolError(OverlayError):
    """The other side violated the protocol."""

    code: str = "bad_request"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class FrameError(RemoteProtocolError):
    """A frame could not be read: too large, truncated, not CBOR, or not a map.

    The byte stream cannot be trusted after this, so the connection must close.
    """

    code = "bad_frame"


class MessageError(RemoteProtocolError):
    """A well-formed frame holds an unknown message type or invalid fields."""

    code = "bad_request"


class HandshakeError(RemoteProtocolError):
    """A peer failed the connection handshake (version, or cluster key)."""

    code = "bad_handshake"

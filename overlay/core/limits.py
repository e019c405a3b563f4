"""Size limits shared by the wire codec, the transport and the API server."""

from __future__ import annotations

#: Largest frame body (bytes after the 4-byte length) accepted by default: 1 MiB (API.md).
DEFAULT_MAX_FRAME = 1 << 20

#: Deepest nesting of CBOR arrays/maps we decode; our messages nest only a few levels.
MAX_CBOR_DEPTH = 32

#: Version of the peer-to-peer protocol, exchanged in the connection handshake.
PEER_PROTOCOL_VERSION = 1

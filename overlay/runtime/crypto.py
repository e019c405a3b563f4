"""Cluster key: per-connection AEAD keys for peer links (ChaCha20-Poly1305 + HKDF).

Both sides send a fresh random nonce in the clear handshake. Each direction then gets
its own key, ``HKDF-SHA256(cluster_key, salt = client_nonce || server_nonce, info =
direction)``, and numbers its frames with a 64-bit counter used as the AEAD nonce, so
nonces never repeat under a key, and a frame replayed from another connection or
reordered within one fails authentication.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from overlay.core.errors import HandshakeError, LocalProtocolError

KEY_BYTES = 32
NONCE_BYTES = 16
TAG_BYTES = 16


def generate_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def format_key(key: bytes) -> str:
    return key.hex()


def load_key(path: Path | str) -> bytes:
    """Read a key file written by ``overlay keygen`` (64 hex digits)."""
    text = Path(path).read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise LocalProtocolError(f"cluster key file {path} does not hold hex digits") from None
    if len(key) != KEY_BYTES:
        raise LocalProtocolError(
            f"cluster key in {path} has {len(key)} bytes, expected {KEY_BYTES}"
        )
    return key


def write_key(path: Path | str, key: bytes) -> None:
    """Write a key file readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(format_key(key) + "\n")


def _derive(key: bytes, salt: bytes, info: bytes) -> ChaCha20Poly1305:
    material = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, info=info).derive(key)
    return ChaCha20Poly1305(material)


class FrameCipher:
    """Seals outgoing and opens incoming frame bodies of one connection."""

    def __init__(self, cluster_key: bytes, client_nonce: bytes, server_nonce: bytes,
                 is_client: bool) -> None:
        salt = client_nonce + server_nonce
        to_server = _derive(cluster_key, salt, b"overlay/1 client->server")
        to_client = _derive(cluster_key, salt, b"overlay/1 server->client")
        self._seal_aead, self._open_aead = (
            (to_server, to_client) if is_client else (to_client, to_server)
        )
        self._sent = 0
        self._received = 0

    @staticmethod
    def _nonce(counter: int) -> bytes:
        return counter.to_bytes(12, "big")

    def seal(self, plaintext: bytes) -> bytes:
        nonce = self._nonce(self._sent)
        self._sent += 1
        return self._seal_aead.encrypt(nonce, plaintext, None)

    def open(self, ciphertext: bytes) -> bytes:
        nonce = self._nonce(self._received)
        try:
            plaintext = self._open_aead.decrypt(nonce, ciphertext, None)
        except InvalidTag:
            raise HandshakeError(
                "frame failed authentication: the peer does not hold our cluster key"
            ) from None
        self._received += 1
        return plaintext


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)

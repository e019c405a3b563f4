"""A Bloom filter of byte strings, hashed with mmh3, and the byte encoding of values.

Positions are ``(h1 + i * h2) mod size`` for i < HASHES, from one 128-bit MurmurHash3
(Kirsch-Mitzenmacher double hashing). Sizes are powers of two, so a filter can be
*unfolded* to a larger size by repeating its bytes: an item at ``h mod m`` sets the bit
``h mod M`` of the larger filter, which is one of the repeats. Filters of different
sizes (peers may be configured differently) combine at the larger size without losing
any item.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import mmh3

HASHES = 4
MIN_BYTES = 64
MAX_BYTES = 65536


def value_bytes(value: object) -> bytes:
    """A kind-tagged encoding under which values the language calls equal (1 and 1.0)
    are equal, and values of different kinds (1 and TRUE, 1 and '1') are not."""
    if isinstance(value, bool):
        return b"b1" if value else b"b0"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return b"n" + format(value, "x").encode()  # hex: no digit limit on huge ints
    if isinstance(value, float):
        return b"n" + value.hex().encode()
    return b"s" + str(value).encode("utf-8", "surrogatepass")


def name_bytes(name: str) -> bytes:
    return name.encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class Bloom:
    bits: bytes

    @staticmethod
    def empty(size_bytes: int) -> Bloom:
        if not valid_size(size_bytes):
            raise ValueError(f"a Bloom filter has a power of two of bytes in "
                             f"[{MIN_BYTES}, {MAX_BYTES}], not {size_bytes}")
        return Bloom(bytes(size_bytes))

    def with_items(self, items: Iterable[bytes]) -> Bloom:
        bits = bytearray(self.bits)
        size = len(bits) * 8
        for item in items:
            for pos in _positions(item, size):
                bits[pos >> 3] |= 1 << (pos & 7)
        return Bloom(bytes(bits))

    def __contains__(self, item: bytes) -> bool:
        bits = self.bits
        return all(bits[pos >> 3] >> (pos & 7) & 1 for pos in _positions(item, len(bits) * 8))

    def union(self, other: Bloom) -> Bloom:
        size = max(len(self.bits), len(other.bits))
        a, b = (int.from_bytes(f.bits * (size // len(f.bits)), "little") for f in (self, other))
        return Bloom((a | b).to_bytes(size, "little"))

    def fill_ratio(self) -> float:
        return int.from_bytes(self.bits, "little").bit_count() / (len(self.bits) * 8)


def valid_size(size_bytes: int) -> bool:
    return MIN_BYTES <= size_bytes <= MAX_BYTES and size_bytes & (size_bytes - 1) == 0


def _positions(item: bytes, size: int) -> list[int]:
    h1, h2 = mmh3.hash64(item, 0, signed=False)
    mask = size - 1
    return [(h1 + i * h2) & mask for i in range(HASHES)]

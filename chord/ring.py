"""The identifier ring: ids of nodes and keys, and interval arithmetic modulo ``2**bits``.

Every interval test of Chord goes through these pure functions. Intervals run clockwise
from ``a`` to ``b``. When ``a == b`` the interval is the whole ring (except ``a`` for the
open one): a node alone is its own successor and owns every key, and (a, a) is what
``closest_preceding_node`` searches on a one-node ring.
"""

from __future__ import annotations

from overlay.core.ids import format_id, hash_id


def ring_size(bits: int) -> int:
    return 1 << bits


def node_id(address: str, bits: int) -> int:
    """A node's place on the ring: the hash of its advertised address (it cannot choose)."""
    return hash_id(address, bits)


def distance(a: int, b: int, size: int) -> int:
    """Clockwise distance from ``a`` to ``b``: how far ``b`` lies after ``a``."""
    return (b - a) % size


def in_open(x: int, a: int, b: int, size: int) -> bool:
    """``x`` in (a, b) going clockwise; (a, a) is every id but ``a``."""
    d = (x - a) % size
    if a == b:
        return d != 0
    return 0 < d < (b - a) % size


def in_half_open(x: int, a: int, b: int, size: int) -> bool:
    """``x`` in (a, b] going clockwise; (a, a] is the whole ring."""
    if a == b:
        return True
    d = (x - a) % size
    return 0 < d <= (b - a) % size


def finger_start(n: int, i: int, size: int) -> int:
    """Start of finger ``i`` of node ``n``: the first id the finger is meant to cover."""
    return (n + (1 << i)) % size


def hex_id(ident: int, bits: int) -> str:
    """Fixed-width hex of an id (TRACES.md)."""
    return format_id(ident, bits)

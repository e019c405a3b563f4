"""The finger table, and the search over everything a node knows for the closest node
that precedes a key (``closest_preceding_node``).

Finger i of node n is ``succ(n + 2**i)``. With m = 128 and N nodes, all fingers whose
start lies before n's successor point to it, and in general only about log2 N entries
are distinct; refreshing finger i therefore also settles every later finger whose start
falls before the node found (:meth:`FingerTable.settle`), so a full refresh takes about
log2 N lookups, not m.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Iterable

from chord.kbr import NodeRef
from chord.ring import distance, finger_start


class FingerTable:
    def __init__(self, local: NodeRef, bits: int) -> None:
        self.local = local
        self.bits = bits
        self.ring_size = 1 << bits
        self.starts = [finger_start(local.id, i, self.ring_size) for i in range(bits)]
        self.nodes: list[NodeRef | None] = [None] * bits
        #: Bumped by every change (as :attr:`SuccessorList.version`).
        self.version = 0

    def settle(self, i: int, node: NodeRef) -> tuple[int, bool]:
        """Finger ``i`` is ``node`` (a lookup of its start found it). Every later finger
        whose start lies between finger i's start and ``node`` is ``node`` too. Returns
        the index of the first finger after those (``bits`` if none) and whether any
        entry changed."""
        # A finger that finds this node itself covers the rest of the ring up to us.
        reach = distance(self.local.id, node.id, self.ring_size) or self.ring_size
        # Finger j starts 2**j after us, so it lies within reach iff j < reach.bit_length().
        following = min(max(i + 1, reach.bit_length()), self.bits)
        fresh = [node] * (following - i)
        if self.nodes[i:following] == fresh:
            return following, False
        self.nodes[i:following] = fresh
        self.version += 1
        return following, True

    def load(self, nodes: Iterable[NodeRef]) -> None:
        """Take a whole table (``bits`` entries; the oracle's correct one)."""
        fresh: list[NodeRef | None] = list(nodes)
        if len(fresh) != self.bits:
            raise ValueError(f"a finger table has {self.bits} entries, not {len(fresh)}")
        self.nodes = fresh
        self.version += 1

    def remove(self, addr: str) -> bool:
        changed = False
        for i, node in enumerate(self.nodes):
            if node is not None and node.addr == addr:
                self.nodes[i] = None
                changed = True
        self.version += changed
        return changed

    def clear(self) -> None:
        self.nodes = [None] * self.bits
        self.version += 1


class RoutingIndex:
    """Distinct known nodes (fingers and successor list) sorted by clockwise distance
    from this node, rebuilt only when the tables change, so that each routing step is
    a binary search instead of a scan over m fingers."""

    def __init__(self, local: NodeRef, ring_size: int, nodes: Iterable[NodeRef | None]) -> None:
        self.local = local
        self.ring_size = ring_size
        by_distance: dict[int, NodeRef] = {}
        previous = None
        for node in nodes:
            # Fingers come in long runs of one node: skip repeats cheaply.
            if node is not previous and node is not None and node.id != local.id:
                by_distance[(node.id - local.id) % ring_size] = node
            previous = node
        self.distances = sorted(by_distance)
        self.nodes = [by_distance[d] for d in self.distances]

    def closest_preceding_node(self, key: int, avoid: Collection[str] = ()) -> NodeRef | None:
        """The known node closest before ``key`` (in (n, key)), skipping addresses in
        ``avoid``; None when no known node lies there."""
        # (key == n asks for the node farthest round the ring: (n, n) is all but n.)
        reach = distance(self.local.id, key, self.ring_size) or self.ring_size
        i = bisect_left(self.distances, reach) - 1
        nodes = self.nodes
        while i >= 0:
            node = nodes[i]
            if node.addr not in avoid:
                return node
            i -= 1
        return None

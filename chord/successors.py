"""The successor list: the first r nodes after this one, in ring order.

It is what keeps the ring whole when nodes fail (ToN 2003, section IV-E): when the
successor fails, the next entry takes its place at once, and stabilize refills the list
from the new successor's own list. The list never holds this node itself; it is empty
when the node is alone (then it is its own successor).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from chord.kbr import NodeRef
from chord.ring import distance


class SuccessorList:
    def __init__(self, local: NodeRef, size: int, ring_size: int) -> None:
        self.local = local
        self.size = size
        self.ring_size = ring_size
        self.nodes: list[NodeRef] = []
        #: Bumped by every change: what was derived from the list (the routing index,
        #: the ring trace, the successor the fingers follow) is stale when it moves.
        self.version = 0

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[NodeRef]:
        return iter(self.nodes)

    def first(self) -> NodeRef | None:
        return self.nodes[0] if self.nodes else None

    def replace(self, nodes: Iterable[NodeRef]) -> bool:
        """Take ``nodes`` (ring order, nearest first), stopping where the ring wraps back
        to this node, without duplicates, cut to r. Returns whether the list changed."""
        fresh: list[NodeRef] = []
        seen: set[str] = set()
        local = self.local
        for node in nodes:
            if node.id == local.id:
                break  # the rest goes round the ring again
            if node.addr not in seen:
                seen.add(node.addr)
                fresh.append(node)
                if len(fresh) == self.size:
                    break
        if fresh == self.nodes:
            return False
        self.nodes = fresh
        self.version += 1
        return True

    def adopt(self, successor: NodeRef, its_successors: Iterable[NodeRef]) -> bool:
        """The list stabilize computes: the successor, then the successor's own list."""
        return self.replace([successor, *its_successors])

    def insert(self, node: NodeRef) -> bool:
        """Put ``node`` in its ring position (a closer node learnt about), cut to r."""
        if node.id == self.local.id or any(n.addr == node.addr for n in self.nodes):
            return False
        local_id, size = self.local.id, self.ring_size
        d = distance(local_id, node.id, size)
        position = next((k for k, known in enumerate(self.nodes)
                         if distance(local_id, known.id, size) > d), len(self.nodes))
        if position >= self.size:
            return False
        self.nodes.insert(position, node)
        del self.nodes[self.size:]
        self.version += 1
        return True

    def remove(self, addr: str) -> bool:
        before = len(self.nodes)
        self.nodes = [n for n in self.nodes if n.addr != addr]
        if len(self.nodes) == before:
            return False
        self.version += 1
        return True

    def clear(self) -> None:
        self.nodes = []
        self.version += 1

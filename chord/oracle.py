"""The tables a static set of nodes should have, from a global view of the sorted ring.

:func:`build_tables` installs them at once (``--bootstrap oracle``: big static
experiments need not wait for thousands of joins); :func:`ring_errors` compares what
nodes hold against them (tests and scenarios: "is the ring correct now?").
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from chord.kbr import NodeRef
from chord.node import ChordNode
from chord.ring import hex_id


class SortedRing:
    """The nodes of a ring in id order, answering ``succ(key)`` by binary search."""

    def __init__(self, refs: Sequence[NodeRef]) -> None:
        self.refs = sorted(refs, key=lambda r: r.id)
        self.ids = [r.id for r in self.refs]
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("two nodes have the same id")

    def __len__(self) -> int:
        return len(self.refs)

    def successor_of(self, key: int) -> NodeRef:
        """``succ(key)``: the first node whose id is ``key`` or follows it."""
        return self.refs[bisect_left(self.ids, key) % len(self.refs)]

    def successors(self, ref: NodeRef, count: int) -> list[NodeRef]:
        """The ``count`` nodes after ``ref`` (fewer in a ring smaller than count + 1)."""
        i = bisect_left(self.ids, ref.id)
        n = len(self.refs)
        return [self.refs[(i + k) % n] for k in range(1, min(count, n - 1) + 1)]

    def predecessor(self, ref: NodeRef) -> NodeRef | None:
        if len(self.refs) < 2:
            return None
        return self.refs[bisect_left(self.ids, ref.id) - 1]

    def fingers(self, node: ChordNode) -> list[NodeRef]:
        return [self.successor_of(start) for start in node.fingers.starts]


def build_tables(nodes: Sequence[ChordNode], now: float) -> None:
    """Give every node (fresh, not yet in a ring) the correct predecessor, successor list
    and fingers for the ring they form together, and start its maintenance."""
    ring = SortedRing([n.local for n in nodes])
    for node in nodes:
        node.successors.replace(ring.successors(node.local, node.config.successors))
        node.fingers.load(ring.fingers(node))
        node.set_predecessor(now, ring.predecessor(node.local))
        node.became_member(now)


def ring_errors(nodes: Sequence[ChordNode], fingers: bool = True,
                limit: int = 20) -> list[str]:
    """How the tables of ``nodes`` (the live ring) differ from the correct ones; at most
    ``limit`` lines, empty when every table is right."""
    ring = SortedRing([n.local for n in nodes])
    errors: list[str] = []

    def report(node: ChordNode, what: str, have: object, want: object) -> None:
        errors.append(f"{hex_id(node.local.id, node.bits)} {what}: has {have}, "
                      f"should have {want}")

    for node in nodes:
        if not node.joined:
            report(node, "membership", "not joined", "joined")
        want_succ = ring.successors(node.local, node.config.successors)
        if node.successors.nodes != want_succ:
            report(node, "successor list", _ids(node.successors.nodes), _ids(want_succ))
        if node.pred != ring.predecessor(node.local):
            report(node, "predecessor", node.pred, ring.predecessor(node.local))
        if fingers:
            wrong = [i for i, (have, want) in enumerate(zip(node.fingers.nodes,
                                                            ring.fingers(node), strict=True))
                     if have != want]
            if wrong:
                report(node, f"fingers {wrong[:5]}", "other nodes", "succ(start)")
        if len(errors) >= limit:
            break
    return errors[:limit]


def _ids(refs: Sequence[NodeRef]) -> list[int]:
    return [r.id for r in refs]

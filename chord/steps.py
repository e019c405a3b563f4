"""The one routing decision every lookup step and routed message takes: given a key, is
this node its owner, or which node comes next?

Both iterative lookups (the answering node) and recursive routes (the forwarding node)
use :func:`next_step`, so they agree on every case, including the unusual ones while the
ring settles: a node asked as the owner whose predecessor shows that a closer node has
joined points back at that predecessor.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from typing import Protocol

from chord.fingers import RoutingIndex
from chord.kbr import NodeRef
from chord.ring import distance, in_half_open


class RoutingView(Protocol):
    """What a routing decision reads of a node (:class:`chord.node.ChordNode` is one)."""

    @property
    def local(self) -> NodeRef: ...

    @property
    def ring_size(self) -> int: ...

    @property
    def pred(self) -> NodeRef | None: ...

    def is_responsible(self, key: int) -> bool: ...

    def first_successor(self, avoid: Collection[str]) -> NodeRef | None: ...

    def routing_index(self) -> RoutingIndex: ...


class Step(enum.Enum):
    #: This node owns the key.
    OWNER = "owner"
    #: The key lies between this node and its successor: the successor owns it.
    SUCCESSOR = "successor"
    #: Asked as the owner, but the key lies just behind: the predecessor (a node that
    #: joined since the asker looked) or one before it owns it.
    BEHIND = "behind"
    #: Not near: the closest node before the key that this node knows.
    CLOSER = "closer"


def next_step(node: RoutingView, key: int, avoid: Collection[str],
              as_owner: bool) -> tuple[Step, NodeRef]:
    """What ``node`` does with ``key``. ``as_owner``: the asker believes this node owns
    it. ``avoid``: addresses known to be dead, never returned."""
    if node.is_responsible(key):
        return Step.OWNER, node.local
    successor = node.first_successor(avoid)
    if successor is None:
        return Step.OWNER, node.local  # alone
    size = node.ring_size
    local_id = node.local.id
    if in_half_open(key, local_id, successor.id, size):
        return Step.SUCCESSOR, successor
    if as_owner:
        pred = node.pred
        if pred is None or pred.addr in avoid:
            # Nothing says otherwise (our predecessor failed, as the asker found, or has
            # not notified us yet), and the key is not after us: take the asker's word.
            # (Pointing elsewhere would send the lookup round the ring and back here.)
            return Step.OWNER, node.local
        if distance(key, local_id, size) < distance(local_id, key, size):
            return Step.BEHIND, pred
    # The successor precedes the key, so some known node always does.
    return Step.CLOSER, node.routing_index().closest_preceding_node(key, avoid) or successor

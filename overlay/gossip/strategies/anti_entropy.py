"""Anti-entropy: every round, reconcile held events with ``fanout`` random peers.

Events spread only this way (a publish just holds the event): each round a node sends a
digest of its recent events to random peers; ``push`` lets the peer ask for what it
lacks, ``pull`` has the peer send what the node lacks, ``push-pull`` does both (see
:mod:`~overlay.gossip.digests`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from overlay.gossip.config import AntiEntropyConfig
from overlay.gossip.strategies.base import Strategy

if TYPE_CHECKING:
    from overlay.gossip.node import GossipNode


class AntiEntropy(Strategy):
    def __init__(self, node: GossipNode, config: AntiEntropyConfig) -> None:
        super().__init__(node)
        self.fanout = config.fanout
        self.push = config.mode in ("push", "push-pull")
        self.pull = config.mode in ("pull", "push-pull")

    def wants_rounds(self) -> bool:
        return True

    def on_round(self, now: float) -> None:
        node = self.node
        for dest in node.peers.sample(self.fanout):
            node.repair.send_digest(now, dest, self.push, self.pull)

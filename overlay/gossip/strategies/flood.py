"""Flooding with a hop limit, and pbcast, whose first phase is a (possibly thinned) flood.

Flooding: a node forwards the first copy of an event to every neighbour but the one it
came from while the event has made fewer than ``ttl`` transmissions; a first copy that
has used them up is dropped (``drop``, reason ``ttl``).

Bimodal multicast adds two things: each node forwards to ``fanout`` random neighbours
instead of all of them (the unreliable first phase), and every round it sends a digest
to random peers, which fetch what they lack (the repair phase, :mod:`~overlay.gossip.digests`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from overlay.core.messages import Message
from overlay.gossip.config import FloodConfig, PbcastConfig
from overlay.gossip.messages import Event
from overlay.gossip.store import HeldEvent
from overlay.gossip.strategies.base import Strategy

if TYPE_CHECKING:
    from overlay.gossip.node import GossipNode


class Flood(Strategy):
    def __init__(self, node: GossipNode, config: FloodConfig | PbcastConfig) -> None:
        super().__init__(node)
        self.ttl = config.ttl
        self.fanout = config.fanout if isinstance(config, PbcastConfig) else None

    def publish(self, now: float, held: HeldEvent) -> None:
        self._forward(held, 1, self.ttl, guided=False, came_from=None)

    def on_event(self, now: float, src: str, msg: Event) -> None:
        held, first = self.node.accept(now, src, msg.body, msg.hop, msg.guided)
        if not first:
            return
        # The publisher's hop limit travels with the event; a copy without one (from a
        # node spreading differently) gets this node's.
        ttl = self.ttl if msg.ttl is None else msg.ttl
        if msg.hop >= ttl:
            self.node.trace_drop(msg.body, "ttl")
            return
        self._forward(held, msg.hop + 1, ttl, msg.guided, came_from=src)

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        """With selective routing a copy may have been the only one on its way: the
        event takes the routes that are left (the view has dropped ``dest`` already)."""
        node = self.node
        if node.interest is None or not isinstance(msg, Event) or msg.ttl is None:
            return
        held = node.store.get(msg.body.msg_id)
        if held is not None:
            self._forward(held, msg.hop, msg.ttl, msg.guided, held.came_from,
                          skip=held.routed)

    def _forward(self, held: HeldEvent, hop: int, ttl: int, guided: bool,
                 came_from: str | None, skip: frozenset[str] = frozenset()) -> None:
        node = self.node
        body = held.body
        # A copy sent now arrives at ``hop`` and may make ``ttl - hop`` more hops.
        exclude = skip if came_from is None else skip | {came_from}
        targets, guided = node.choose(body, guided, self.fanout, exclude,
                                      budget=ttl - hop, came_from=came_from)
        if node.interest is not None:
            # Where it went (digests offer it there; a failed copy is not sent again).
            held.routed = skip.union(targets)
            held.routed_epoch = node.interest.epoch
        for dest in targets:
            node.trace_forward(dest, body, hop)
            node.send(dest, Event(body, hop, ttl, guided))


class Pbcast(Flood):
    def __init__(self, node: GossipNode, config: PbcastConfig) -> None:
        super().__init__(node, config)
        self.digest_fanout = config.digest_fanout

    def wants_rounds(self) -> bool:
        return True

    def on_round(self, now: float) -> None:
        node = self.node
        for dest in node.peers.sample(self.digest_fanout):
            node.repair.send_digest(now, dest, push=True, pull=False)

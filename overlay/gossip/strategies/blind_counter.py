"""Blind counter rumor mongering (Portman and Seneviratne, ISCC 2002).

The publisher sends the event to ``fanout`` (B) random neighbours. A node that receives
it, for each of its first ``forward_limit`` (F) receptions, sends it to B random
neighbours among those it believes have not seen it: a node knows a neighbour has it
only if it got the event from that neighbour or sent it there. *Blind*: no feedback, a
node loses interest whoever the recipients were; *counter*: after F receptions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from overlay.gossip.config import BlindCounterConfig
from overlay.gossip.messages import Event, EventBody
from overlay.gossip.store import HeldEvent
from overlay.gossip.strategies.base import Strategy

if TYPE_CHECKING:
    from overlay.gossip.node import GossipNode


@dataclass(slots=True)
class Spread:
    """What a node knows about one event it spreads."""

    receptions: int = 0
    #: Neighbours known to have the event.
    holders: set[str] = field(default_factory=set)


class BlindCounter(Strategy):
    def __init__(self, node: GossipNode, config: BlindCounterConfig) -> None:
        super().__init__(node)
        self.fanout = config.fanout
        self.forward_limit = config.forward_limit
        self.spreads: dict[str, Spread] = {}

    def publish(self, now: float, held: HeldEvent) -> None:
        spread = self.spreads[held.body.msg_id] = Spread()
        self._send(held.body, 1, False, spread)

    def on_event(self, now: float, src: str, msg: Event) -> None:
        self.node.accept(now, src, msg.body, msg.hop, msg.guided)
        spread = self.spreads.get(msg.body.msg_id)
        if spread is None:
            spread = self.spreads[msg.body.msg_id] = Spread()
        spread.receptions += 1
        spread.holders.add(src)
        if spread.receptions <= self.forward_limit:
            self._send(msg.body, msg.hop + 1, msg.guided, spread)

    def forget(self, msg_ids: list[str]) -> None:
        for msg_id in msg_ids:
            self.spreads.pop(msg_id, None)

    def _send(self, body: EventBody, hop: int, guided: bool, spread: Spread) -> None:
        node = self.node
        targets, guided = node.choose(body, guided, self.fanout, spread.holders)
        for dest in targets:
            spread.holders.add(dest)
            node.trace_forward(dest, body, hop)
            node.send(dest, Event(body, hop, None, guided))

"""Random walk: a few walkers each carry the event from neighbour to random neighbour.

The publisher starts ``walkers`` walkers, each to a random neighbour. A node that a
walker reaches passes it on to one random neighbour, not back to where it came from
unless there is no other, whether or not it had the event already (a walker that stopped
at known nodes would die early); the walker ends after ``ttl`` steps (``drop``, reason
``ttl``). A step to a neighbour that turns out unreachable is taken again to another.
With selective routing a walker prefers neighbours through which the event may match.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from overlay.core.messages import Message
from overlay.gossip.config import RandomWalkConfig
from overlay.gossip.messages import Event, EventBody
from overlay.gossip.store import HeldEvent
from overlay.gossip.strategies.base import Strategy

if TYPE_CHECKING:
    from overlay.gossip.node import GossipNode


class RandomWalk(Strategy):
    def __init__(self, node: GossipNode, config: RandomWalkConfig) -> None:
        super().__init__(node)
        self.walkers = config.walkers
        self.ttl = config.ttl

    def publish(self, now: float, held: HeldEvent) -> None:
        for _ in range(self.walkers):
            self._step(held.body, 1, self.ttl, guided=False, came_from=None)

    def on_event(self, now: float, src: str, msg: Event) -> None:
        self.node.accept(now, src, msg.body, msg.hop, msg.guided)
        ttl = self.ttl if msg.ttl is None else msg.ttl
        if msg.hop >= ttl:
            self.node.trace_drop(msg.body, "ttl")
            return
        self._step(msg.body, msg.hop + 1, ttl, msg.guided, came_from=src)

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        if isinstance(msg, Event) and msg.ttl is not None:
            self._step(msg.body, msg.hop, msg.ttl, msg.guided, came_from=dest)

    def _step(self, body: EventBody, hop: int, ttl: int, guided: bool,
              came_from: str | None) -> None:
        node = self.node
        exclude = () if came_from is None else (came_from,)
        targets, guided = node.choose(body, guided, 1, exclude, keep_going=True)
        if not targets and came_from is not None:
            targets, guided = node.choose(body, guided, 1, (), keep_going=True)
        for dest in targets:
            node.trace_forward(dest, body, hop)
            node.send(dest, Event(body, hop, ttl, guided))

"""Push rumor mongering with feedback, losing interest by coin or by counter.

A node spreads each event it holds *hot*: every round it pushes its hot rumors to
``fanout`` random peers each (the rumors for one peer go in one
:class:`~overlay.gossip.messages.Rumor`). The peer takes in what is new (which becomes hot
there) and answers with :class:`~overlay.gossip.messages.Feedback` naming what it knew.
For each rumor the peer knew, the sender loses interest in it with probability
``p_stop`` (coin), or once that has happened ``counter`` times (counter; with
``reset_counter`` only consecutive times count, a push the peer needed starts over).
A cold rumor is still held (duplicates, digests) but pushed no more.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from overlay.gossip.config import RumorConfig
from overlay.gossip.messages import Carried, Event, Feedback, Rumor, carried_runs
from overlay.gossip.store import HeldEvent
from overlay.gossip.strategies.base import Strategy

if TYPE_CHECKING:
    from overlay.gossip.node import GossipNode


@dataclass(slots=True)
class HotRumor:
    held: HeldEvent
    #: Pushes the peer did not need since interest was last renewed (counter variant).
    unneeded: int = 0


class RumorMongering(Strategy):
    def __init__(self, node: GossipNode, config: RumorConfig) -> None:
        super().__init__(node)
        self.config = config
        self.hot: dict[str, HotRumor] = {}
        #: Per peer, the rumors of the last push to it, until its feedback comes.
        self._pushed: dict[str, deque[tuple[str, ...]]] = {}

    def publish(self, now: float, held: HeldEvent) -> None:
        self.hot[held.body.msg_id] = HotRumor(held)

    def adopt(self, now: float, held: HeldEvent) -> None:
        self.hot[held.body.msg_id] = HotRumor(held)

    def on_event(self, now: float, src: str, msg: Event) -> None:
        held, first = self.node.accept(now, src, msg.body, msg.hop, msg.guided)
        if first:
            self.adopt(now, held)

    def wants_rounds(self) -> bool:
        return bool(self.hot)

    def on_round(self, now: float) -> None:
        if not self.hot:
            return
        node = self.node
        pushes: dict[str, list[Carried]] = {}
        for msg_id, rumor in list(self.hot.items()):
            held = rumor.held
            targets, guided = node.choose(held.body, held.guided, self.config.fanout, ())
            if not targets:
                del self.hot[msg_id]  # nobody left to tell
                continue
            for dest in targets:
                pushes.setdefault(dest, []).append(Carried(held.body, held.hop + 1, guided))
        sizes = node.config.sizes
        for dest, items in pushes.items():
            for item in items:
                node.trace_forward(dest, item.body, item.hop)
            # A push too large for one message goes in several; each is answered by a
            # feedback of its own, matched to the pushes in the order they were sent.
            runs = carried_runs(items, sizes)
            self._pushed[dest] = deque(tuple(item.body.msg_id for item in run) for run in runs)
            for run in runs:
                node.send(dest, Rumor(tuple(run)))

    def on_feedback(self, now: float, src: str, msg: Feedback) -> None:
        waiting = self._pushed.get(src)
        if not waiting:
            return
        pushed = waiting.popleft()
        if not waiting:
            del self._pushed[src]
        known = set(msg.known)
        cfg = self.config
        for msg_id in pushed:
            rumor = self.hot.get(msg_id)
            if rumor is None:
                continue
            if msg_id not in known:
                if cfg.reset_counter:
                    rumor.unneeded = 0
            elif cfg.p_stop is not None:
                if self.node.rng.random() < cfg.p_stop:
                    del self.hot[msg_id]
            else:
                rumor.unneeded += 1
                if cfg.counter is not None and rumor.unneeded >= cfg.counter:
                    del self.hot[msg_id]

    def forget(self, msg_ids: list[str]) -> None:
        for msg_id in msg_ids:
            self.hot.pop(msg_id, None)

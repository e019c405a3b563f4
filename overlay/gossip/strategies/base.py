"""What every dissemination strategy offers its node, with the defaults most of them keep.

A strategy decides where events go; the node does everything else (duplicate
suppression, local delivery, trace records, peer sampling, digests). Every node takes
every kind of event message whatever its own strategy, so nodes configured differently
still exchange events: by default an :class:`~overlay.gossip.messages.Event` or a
:class:`~overlay.gossip.messages.Rumor` is taken in (and a rumor answered with feedback)
without being spread further.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from overlay.core.messages import Message
from overlay.gossip.messages import Event, Feedback, Rumor
from overlay.gossip.store import HeldEvent

if TYPE_CHECKING:
    from overlay.gossip.node import GossipNode


class Strategy:
    def __init__(self, node: GossipNode) -> None:
        self.node = node

    def publish(self, now: float, held: HeldEvent) -> None:
        """Start spreading an event published at this node (already held and delivered)."""

    def on_event(self, now: float, src: str, msg: Event) -> None:
        self.node.accept(now, src, msg.body, msg.hop, msg.guided)

    def on_rumor(self, now: float, src: str, msg: Rumor) -> None:
        known = []
        for item in msg.items:
            held, first = self.node.accept(now, src, item.body, item.hop, item.guided)
            if first:
                self.adopt(now, held)
            else:
                known.append(item.body.msg_id)
        self.node.send(src, Feedback(tuple(known)))

    def adopt(self, now: float, held: HeldEvent) -> None:
        """A rumor push brought a new event: a rumor-mongering node starts spreading it."""

    def on_feedback(self, now: float, src: str, msg: Feedback) -> None:
        pass

    def wants_rounds(self) -> bool:
        """Whether the strategy has periodic work now (the node runs rounds only then)."""
        return False

    def on_round(self, now: float) -> None:
        pass

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        pass

    def forget(self, msg_ids: list[str]) -> None:
        """The node no longer holds these events: drop any state kept about them."""

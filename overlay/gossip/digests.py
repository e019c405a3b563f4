"""Digest exchange: compare held events with a peer and send across what one side lacks.

Used by anti-entropy and by pbcast's repair phase, and answered by every node whatever
its strategy. A :class:`~overlay.gossip.messages.Digest` lists the sender's recent events;
with ``push`` the receiver asks (:class:`~overlay.gossip.messages.Request`) for those it
lacks, with ``pull`` it sends the sender those the digest does not list. Retransmitted
events travel in a :class:`~overlay.gossip.messages.Repair` and are delivered, never
spread further by the receiver.

Trace: a ``repair`` record (kind ``digest``) for each event a node asks for, or, when a
pull brings it unasked, for each new event so received.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from overlay.core.limits import batches
from overlay.gossip.messages import (
    MAX_BATCH,
    Carried,
    Digest,
    Repair,
    Request,
    carried_runs,
    id_cost,
)
from overlay.gossip.store import HeldEvent

if TYPE_CHECKING:
    from overlay.gossip.node import GossipNode


class DigestRepair:
    def __init__(self, node: GossipNode) -> None:
        self.node = node
        #: msg_id -> when it was asked for; not asked again until an answer had time.
        self._asked: dict[str, float] = {}

    def send_digest(self, now: float, dest: str, push: bool, pull: bool) -> None:
        node = self.node
        selective = node.interest is not None
        by_topic: dict[str, list[str]] = {}
        # A digest offers the newest events, at most ``max_digest`` of them and no more
        # than fit one message (it is an offer renewed each round, not a full list).
        budget = node.config.sizes.batch_bytes
        for held in node.store.recent(now, node.config.max_digest):
            body = held.body
            # With selective routing, offer only what this node would route to the peer.
            if not selective or dest in node.routed(held):
                listed = by_topic.get(body.topic)
                cost = id_cost(body.msg_id) + (0 if listed is not None else id_cost(body.topic))
                if cost > budget:
                    break
                budget -= cost
                if listed is None:
                    listed = by_topic[body.topic] = []
                listed.append(body.msg_id)
        offered = {topic: tuple(msg_ids) for topic, msg_ids in by_topic.items()}
        if offered or pull:
            node.send(dest, Digest(offered, push, pull))

    def on_digest(self, now: float, src: str, msg: Digest) -> None:
        node = self.node
        store = node.store
        if msg.push:
            retry_after = now - node.config.round_interval
            missing = []
            for topic, ids in msg.ids.items():
                for msg_id in ids:
                    if msg_id in store or self._asked.get(msg_id, retry_after) > retry_after:
                        continue
                    self._asked[msg_id] = now
                    missing.append(msg_id)
                    node.trace_repair(topic, msg_id, src)
            for run in batches(missing[:node.config.max_digest], id_cost,
                               node.config.sizes.batch_bytes, MAX_BATCH):
                node.send(src, Request(tuple(run)))
        if msg.pull:
            offered = {msg_id for ids in msg.ids.values() for msg_id in ids}
            extra = [held for held in store.recent(now, node.config.max_digest)
                     if held.body.msg_id not in offered]
            self._retransmit(src, extra)

    def on_request(self, now: float, src: str, msg: Request) -> None:
        held = [h for h in map(self.node.store.get, msg.ids[:self.node.config.max_digest])
                if h is not None]
        self._retransmit(src, held)

    def on_repair(self, now: float, src: str, msg: Repair) -> None:
        node = self.node
        for item in msg.items:
            asked = self._asked.pop(item.body.msg_id, None) is not None
            _, first = node.accept(now, src, item.body, item.hop, item.guided)
            if first and not asked:
                node.trace_repair(item.body.topic, item.body.msg_id, src)

    def forget_asked(self, now: float) -> None:
        """Drop requests old enough that their answer is not coming."""
        horizon = now - self.node.config.digest_window
        for msg_id in [m for m, at in self._asked.items() if at < horizon]:
            del self._asked[msg_id]

    def _retransmit(self, dest: str, events: list[HeldEvent]) -> None:
        if not events:
            return
        node = self.node
        items = []
        for held in events:
            hop = held.hop + 1
            node.trace_forward(dest, held.body, hop)
            items.append(Carried(held.body, hop, held.guided))
        for run in carried_runs(items, node.config.sizes):
            node.send(dest, Repair(tuple(run)))

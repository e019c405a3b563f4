"""Selective routing: neighbours advertise what may match through them; events follow.

Every node advertises to each neighbour, per topic, summaries (``matching.Summary``) in
layers: layer 0 its own subscriptions, layer d the interests d hops beyond it, made of
layer d-1 of what its *other* neighbours advertised (so nothing is echoed straight
back), up to ``radius`` layers. Propagation is bounded: a subscription is known within
``radius`` hops of its node and nowhere else.

An event goes only to neighbours through which it may match (:meth:`InterestRouting.narrow`).
A neighbour whose advert has not arrived yet may lead anywhere, so it is never ruled
out (summaries never give false negatives). What to do when no neighbour matches is the
dissemination's choice (see ``GossipNode.choose``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matching import Summary
from overlay.gossip.config import SelectiveConfig
from overlay.gossip.messages import AttrValue, Interest

#: Per topic, one summary per layer (index = hops beyond the advertising node).
Layers = dict[str, tuple[Summary, ...]]
WireLayers = dict[str, tuple[dict[str, Any], ...]]


class InterestRouting:
    def __init__(self, config: SelectiveConfig) -> None:
        self.config = config
        self.local: dict[str, Summary] = {}
        #: What each neighbour advertised.
        self.heard: dict[str, Layers] = {}
        #: Per neighbour and topic, the union of its layers (what may match through it).
        self._reach: dict[str, dict[str, Summary]] = {}
        #: The last advert sent to each neighbour, to send only changes.
        self._sent: dict[str, WireLayers] = {}
        #: Something changed since adverts were last computed.
        self.dirty = False

    def may_match(self, peer: str, topic: str, attrs: Mapping[str, AttrValue]) -> bool:
        reach = self._reach.get(peer)
        if reach is None:
            return True
        summary = reach.get(topic)
        return summary is not None and summary.may_match(attrs)

    def narrow(self, candidates: Sequence[str], topic: str,
               attrs: Mapping[str, AttrValue]) -> list[str]:
        """The candidates through which an event of ``topic`` with ``attrs`` may match."""
        return [peer for peer in candidates if self.may_match(peer, topic, attrs)]

    # -- inputs ------------------------------------------------------------------------------

    def set_local(self, topic: str, summary: Summary | None) -> None:
        if summary is None:
            self.local.pop(topic, None)
        else:
            self.local[topic] = summary
        self.dirty = True

    def heard_from(self, peer: str, msg: Interest) -> None:
        max_filters = self.config.max_filters
        layers = {topic: tuple(Summary.from_wire(layer, max_filters) for layer in wire)
                  for topic, wire in msg.topics.items()}
        self.heard[peer] = layers
        self._reach[peer] = {topic: self._union(parts) for topic, parts in layers.items()}
        self.dirty = True

    def neighbour_changed(self, peer: str, added: bool) -> None:
        if not added:
            self.heard.pop(peer, None)
            self._reach.pop(peer, None)
            self._sent.pop(peer, None)
        self.dirty = True

    # -- adverts -----------------------------------------------------------------------------

    def adverts(self, neighbours: Sequence[str]) -> list[tuple[str, Interest]]:
        """The adverts that differ from what each neighbour last got from this node."""
        self.dirty = False
        out = []
        for peer in neighbours:
            wire = self._advert_for(peer, neighbours)
            if self._sent.get(peer) != wire:
                self._sent[peer] = wire
                out.append((peer, Interest(wire)))
        return out

    def _advert_for(self, peer: str, neighbours: Sequence[str]) -> WireLayers:
        others = [self.heard[n] for n in neighbours if n != peer and n in self.heard]
        topics = sorted(set(self.local).union(*others))
        empty = Summary.empty(self.config.max_filters)
        advert: WireLayers = {}
        for topic in topics:
            layers = [self.local.get(topic, empty)]
            for depth in range(1, self.config.radius):
                parts = [heard[topic][depth - 1] for heard in others
                         if topic in heard and len(heard[topic]) >= depth]
                layers.append(self._union(parts) if parts else empty)
            while layers and layers[-1] == empty:
                layers.pop()
            if layers:
                advert[topic] = tuple(layer.to_wire() for layer in layers)
        return advert

    def _union(self, parts: Sequence[Summary]) -> Summary:
        if not parts:
            return Summary.empty(self.config.max_filters)
        return parts[0].merge(*parts[1:]) if len(parts) > 1 else parts[0]

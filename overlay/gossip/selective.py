"""Selective routing: per neighbour link, which interested nodes lie beyond it and how far.

Adverts (:class:`~overlay.gossip.messages.Interest`) are distance vectors toward
subscribers. A node tells each neighbour p, per topic, the subscriber nodes it knows of
within ``radius`` hops: itself (hops 0, the summary of its own filters) and what its
*other* neighbours told it, one hop further (split horizon: nothing learnt from p goes
back to p). Each subscriber is kept at its fewest hops and, up to ``max_named`` of
them (the nearest), by name; the rest are merged into anonymous per-hop summaries
(layers). Summaries are ``matching.Summary`` objects, coarsened past ``max_filters``, so
an advert stays bounded however many subscriptions lie behind it.

A hop count only grows along a cycle and entries past ``radius`` are dropped, so a
subscription or link that goes away leaves every table within ``radius`` cascades of
adverts: no counting to infinity. Adverts are sent again when the active view changes
(a new neighbour gets the whole advert, a lost one's entries go) and in full every
``refresh_interval`` seconds.

Routing an event with a hop *budget* (:meth:`InterestRouting.route`; the budget is the
hops a copy may still make after reaching the neighbour, from flooding's or pbcast's
``ttl``):

- a named subscriber whose summary may match is approached along a shortest path: the
  event goes to ``paths`` of the neighbours with the fewest hops to it (if within the
  budget; neighbours leading to more matching subscribers first, so paths are shared),
  unless the neighbour it came from is as near to it as this node, or nearer: this
  node is then not on that neighbour's way, and that neighbour carries it on itself;
- an anonymous layer within the budget that may match sends it toward that neighbour;
- a neighbour whose advert has not come yet may lead anywhere, and so may every
  neighbour when the budget reaches past ``radius``: the event goes there as it would
  without selective routing.

Why nothing within reach is lost (adverts settled, no loss): among the holders nearest
to an interested node S, take the one that got the event first. The neighbour it got it
from held it earlier, so is not among them: it is one hop farther from S, and this
holder, on its way, sent the event on to a neighbour one hop nearer to S. That
contradicts its being nearest, unless it is S. The hop budget adds one condition: a
copy that travelled more hops than the shortest path (a faster, longer path got there
first) has less budget left, as flooding's hop limit is spent by a longer first copy.
A copy that cannot be delivered (a crashed relay) is routed again by its sender over
the routes that are left (:class:`~overlay.gossip.strategies.flood.Flood`).

Strategies without a hop limit (rumor mongering, blind counter, random walks) use
:meth:`narrow`: every neighbour through which the event may match at all, within
``radius``. Digests (anti-entropy, pbcast's repair) offer an event to a peer only when this node
would route it there (:meth:`GossipNode.routed`: :meth:`route` over the whole radius from
where the event came), so a lost copy on the way to an interested node is repaired by
the node before the gap, hop by hop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from matching import Summary
from overlay.core.pubsub import AttrValue
from overlay.gossip.config import SelectiveConfig
from overlay.gossip.messages import Interest, Named, TopicInterest
from overlay.gossip.summaries import (
    Memo,
    Part,
    empty_part,
    merge_parts,
    part_from_wire,
    part_of,
)


@dataclass
class Heard:
    """What one neighbour advertised for one topic."""

    #: Subscriber id -> (hops from the neighbour, the summary of its filters).
    named: dict[str, tuple[int, Part]]
    #: Anonymous summaries, index = hops from the neighbour.
    layers: tuple[Part, ...]

    def may_match(self, attrs: Mapping[str, AttrValue]) -> bool:
        """Whether an interest beyond (within the radius) may match."""
        return any(layer.summary.may_match(attrs) for layer in self.layers) or any(
            part.summary.may_match(attrs) for _, part in self.named.values())


@dataclass
class Route:
    """One named subscriber as this node sees it: the hops to it through each neighbour
    that knows it, and its summary (the union, should neighbours disagree)."""

    part: Part
    hops: dict[str, int] = field(default_factory=dict)
    best: int = 0
    nearest: frozenset[str] = frozenset()


#: Per topic, (named entries by subscriber, anonymous layers) of one advert.
Advert = dict[str, tuple[list[tuple[str, int, Part]], list[Part]]]
#: What the neighbours know of one topic (see ``InterestRouting._gather``).
Gathered = tuple[dict[str, list[tuple[int, str, Part]]], list[tuple[int, str, Part]]]


class InterestRouting:
    def __init__(self, config: SelectiveConfig, node_id: str,
                 id_of: Callable[[str], str]) -> None:
        self.config = config
        self.node_id = node_id
        #: A neighbour's id (as adverts name subscribers) from its address.
        self.id_of = id_of
        self.local: dict[str, Part] = {}
        #: What each neighbour advertised, per topic.
        self.heard: dict[str, dict[str, Heard]] = {}
        #: Per topic, per named subscriber: the routes to it (built when first needed).
        self._routes: dict[str, dict[str, Route]] = {}
        #: The keys of the last advert sent to each neighbour, to send only changes.
        self._sent: dict[str, dict[str, tuple[Any, ...]]] = {}
        #: Something changed since adverts were last computed.
        self.dirty = False
        #: Counts changes of the routing tables (cached routing answers are stale).
        self.epoch = 0

    # -- routing -----------------------------------------------------------------------------

    def route(self, candidates: Sequence[str], topic: str, attrs: Mapping[str, AttrValue],
              budget: int, came_from: str | None) -> list[str]:
        """The candidates an event of ``topic`` with ``attrs`` goes to, received from
        ``came_from`` (None: published here), when a copy may make ``budget`` more hops
        after the neighbour (see the module's description)."""
        if budget < 0:
            return []
        chosen: set[str] = set()
        beyond_horizon = budget >= self.config.radius
        for peer in candidates:
            topics = self.heard.get(peer)
            if topics is None or beyond_horizon:
                chosen.add(peer)
                continue
            heard = topics.get(topic)
            if heard is not None and heard.layers and any(
                    layer.summary.may_match(attrs) for layer in heard.layers[:budget + 1]):
                chosen.add(peer)
        if len(chosen) < len(candidates):
            self._approach(candidates, chosen, topic, attrs, budget, came_from)
        return [peer for peer in candidates if peer in chosen]

    def _approach(self, candidates: Sequence[str], chosen: set[str], topic: str,
                  attrs: Mapping[str, AttrValue], budget: int, came_from: str | None) -> None:
        """Add to ``chosen`` ``paths`` of the nearest neighbours toward every named
        subscriber that may match, preferring neighbours that lead to more of them."""
        allowed = set(candidates)
        wanted: list[frozenset[str]] = []
        for route in self._routes_for(topic).values():
            if route.best > budget:
                continue
            # The sender as near to the subscriber as this node, or nearer, sends the
            # event on toward it itself; this node carries it on only when it lies on
            # the sender's way (the sender one hop farther, or not knowing the subscriber).
            hops_back = route.hops.get(came_from) if came_from is not None else None
            if hops_back is not None and hops_back <= route.best + 1:
                continue
            nearest = route.nearest
            if len(nearest & chosen) >= self.config.paths:
                continue
            if route.part.summary.may_match(attrs):
                wanted.append(nearest & allowed)
        if not wanted:
            return
        score = Counter(peer for nearest in wanted for peer in nearest)
        order = {peer: i for i, peer in enumerate(candidates)}
        for nearest in sorted(wanted, key=len):
            missing = min(self.config.paths, len(nearest)) - len(nearest & chosen)
            if missing > 0:
                chosen.update(sorted(nearest - chosen,
                                     key=lambda p: (-score[p], order[p]))[:missing])

    def may_match(self, peer: str, topic: str, attrs: Mapping[str, AttrValue]) -> bool:
        """Whether an event may match through ``peer`` at all (an unknown peer: yes)."""
        topics = self.heard.get(peer)
        if topics is None:
            return True
        heard = topics.get(topic)
        return heard is not None and heard.may_match(attrs)

    def narrow(self, candidates: Sequence[str], topic: str,
               attrs: Mapping[str, AttrValue]) -> list[str]:
        """The candidates through which an event of ``topic`` with ``attrs`` may match."""
        return [peer for peer in candidates if self.may_match(peer, topic, attrs)]

    def _routes_for(self, topic: str) -> dict[str, Route]:
        routes = self._routes.get(topic)
        if routes is not None:
            return routes
        routes = {}
        max_filters = self.config.max_filters
        for peer, topics in self.heard.items():
            heard = topics.get(topic)
            if heard is None:
                continue
            for sub, (hops, part) in heard.named.items():
                if sub == self.node_id:
                    continue
                route = routes.get(sub)
                if route is None:
                    routes[sub] = Route(part, {peer: hops})
                else:
                    route.hops[peer] = hops
                    if part.key != route.part.key:
                        route.part = merge_parts([route.part, part], max_filters)
        for route in routes.values():
            route.best = min(route.hops.values())
            route.nearest = frozenset(p for p, h in route.hops.items() if h == route.best)
        self._routes[topic] = routes
        return routes

    # -- inputs ------------------------------------------------------------------------------

    def set_local(self, topic: str, summary: Summary | None) -> None:
        if summary is None:
            self.local.pop(topic, None)
        else:
            self.local[topic] = part_of(summary)
        self.dirty = True

    def heard_from(self, peer: str, msg: Interest) -> None:
        max_filters = self.config.max_filters
        heard = {
            topic: Heard({n.node: (n.hops, part_from_wire(n.summary, max_filters))
                          for n in interest.named},
                         tuple(part_from_wire(layer, max_filters) for layer in interest.layers))
            for topic, interest in msg.topics.items()}
        if msg.ask:
            self._sent.pop(peer, None)
            self.dirty = True
        if _keys(heard) != _keys(self.heard.get(peer)):
            self.heard[peer] = heard
            self._tables_changed()

    def neighbour_changed(self, peer: str, added: bool) -> None:
        if not added:
            self.heard.pop(peer, None)
            self._sent.pop(peer, None)
        self._tables_changed()

    def _tables_changed(self) -> None:
        self._routes.clear()
        self.epoch += 1
        self.dirty = True

    def resend(self) -> None:
        """Send every advert again at the next batch (soft state)."""
        self._sent.clear()
        self.dirty = True

    # -- adverts -----------------------------------------------------------------------------

    def adverts(self, neighbours: Sequence[str]) -> list[tuple[str, Interest]]:
        """The adverts that differ from what each neighbour last got from this node."""
        self.dirty = False
        heard = {n: self.heard[n] for n in neighbours if n in self.heard}
        topics = sorted(set(self.local).union(*heard.values()))
        gathered = [(topic, self._gather(topic, heard)) for topic in topics]
        out = []
        for peer in neighbours:
            peer_id = self.id_of(peer)
            advert: Advert = {}
            for topic, found in gathered:
                named, layers = self._topic_advert(topic, found, peer, peer_id)
                if named or layers:
                    advert[topic] = (named, layers)
            keys = {topic: (tuple((sub, hops, part.key) for sub, hops, part in named),
                            tuple(layer.key for layer in layers))
                    for topic, (named, layers) in advert.items()}
            if self._sent.get(peer) != keys:
                self._sent[peer] = keys
                out.append((peer, Interest(ask=peer not in self.heard, topics={
                    topic: TopicInterest(tuple(_named(*entry) for entry in named),
                                         tuple(layer.wire for layer in layers))
                    for topic, (named, layers) in advert.items()})))
        return out

    def _gather(self, topic: str, heard: Mapping[str, dict[str, Heard]]) -> Gathered:
        """What the neighbours know of ``topic``, one hop further from this node: per
        subscriber the (hops, neighbour, summary) by fewest hops, and anonymous layers
        as (hops, neighbour, summary)."""
        radius = self.config.radius
        named: dict[str, list[tuple[int, str, Part]]] = {}
        layers: list[tuple[int, str, Part]] = []
        for peer, topics in heard.items():
            h = topics.get(topic)
            if h is None:
                continue
            for sub, (hops, part) in h.named.items():
                if hops + 1 < radius and sub != self.node_id:
                    named.setdefault(sub, []).append((hops + 1, peer, part))
            for depth, part in enumerate(h.layers[:radius - 1]):
                if not part.empty:
                    layers.append((depth + 1, peer, part))
        for routes in named.values():
            routes.sort(key=lambda r: r[0])
        return named, layers

    def _topic_advert(self, topic: str, found: Gathered, peer: str, peer_id: str
                      ) -> tuple[list[tuple[str, int, Part]], list[Part]]:
        """The advert of ``topic`` to ``peer``: what this node has and what its other
        neighbours told it (split horizon), nearest subscribers named, layers after."""
        radius, max_filters = self.config.radius, self.config.max_filters
        gathered_named, gathered_layers = found
        best: list[tuple[int, str, Part]] = []
        if topic in self.local:
            best.append((0, self.node_id, self.local[topic]))
        for sub, routes in gathered_named.items():
            if sub == peer_id:
                continue
            usable = [r for r in routes if r[1] != peer]
            if not usable:
                continue
            hops, _, part = usable[0]
            same = [r[2] for r in usable if r[0] == hops and r[2].key != part.key]
            if same:  # neighbours disagree (a change on its way): the union
                part = merge_parts([part, *same], max_filters)
            best.append((hops, sub, part))
        best.sort(key=lambda item: (item[0], item[1]))
        max_named = self.config.max_named
        named = [(sub, hops, part) for hops, sub, part in best[:max_named]]
        layer_parts: list[list[Part]] = [[] for _ in range(radius)]
        for hops, _, part in best[max_named:]:
            layer_parts[hops].append(part)
        for hops, source, part in gathered_layers:
            if source != peer:
                layer_parts[hops].append(part)
        layers: list[Part] = []
        for parts in layer_parts:
            layers.append(merge_parts(parts, max_filters) if parts else empty_part(max_filters))
            if layers[-1].summary.matches_all:
                break  # a budget reaching this far lets everything through anyway
        while layers and layers[-1].empty:
            layers.pop()
        return named, layers


def _keys(heard: dict[str, Heard] | None) -> object:
    if heard is None:
        return None
    return {topic: ({sub: (hops, part.key) for sub, (hops, part) in h.named.items()},
                    tuple(layer.key for layer in h.layers)) for topic, h in heard.items()}


_named_memo: Memo[tuple[str, int, str], Named] = Memo()


def _named(sub: str, hops: int, part: Part) -> Named:
    """The wire entry of a named subscriber (immutable, so built once and shared)."""
    key = (sub, hops, part.key)
    found = _named_memo.get(key)
    if found is None or found.summary is not part.wire:
        found = _named_memo.put(key, Named(sub, hops, part.wire))
    return found

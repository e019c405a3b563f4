"""Anycast groups: each event goes to exactly one matching member of each group.

The search is depth-first over the tree, starting at the root: a node asked to serve a
group for an event gives it to a local member whose filter matches, if it has one
(local first); otherwise to the child whose digest advertises a possibly matching
member of the group at the smallest distance (closest first, taking turns among equally
close children so a group's events spread over its members); a child that finds no
matching member in its subtree hands the group back, and the node tries its next
child, then hands the group back to its own parent. Summaries never say no when a
member matches, so the search finds a matching member whenever one is in the tree; it
may visit a subtree in vain only when a summary was coarse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from chord.kbr import NodeRef
from overlay.core.pubsub import AttrValue
from scribe.subscriptions import Subscription, TopicSubscriptions
from scribe.tree import ChildEdge, TopicTree


@dataclass
class GroupSearch:
    """This node's part in one group's search for one event."""

    #: Who asked this node to serve the group (None at the root): where it goes back.
    upstream: NodeRef | None
    #: Children already asked.
    tried: set[int] = field(default_factory=set)


class Steering:
    """Chooses where a group's event goes next, taking turns among equal choices."""

    def __init__(self) -> None:
        self._turn: dict[tuple[str, str], int] = {}

    def next_step(self, tree: TopicTree | None, topic_subs: TopicSubscriptions | None,
                  group: str, attrs: Mapping[str, AttrValue],
                  search: GroupSearch) -> Subscription | ChildEdge | None:
        """A local member to deliver to, a child to ask, or None: hand the group back."""
        if topic_subs is not None:
            member = topic_subs.take_group_member(group, attrs)
            if member is not None:
                return member
        if tree is None:
            return None
        candidates: list[tuple[int, int, ChildEdge]] = []
        for edge in tree.children.values():
            if edge.ref.id in search.tried:
                continue
            entry = edge.digest.group_may_match(group, attrs)
            if entry is not None:
                candidates.append((entry.distance, edge.ref.id, edge))
        if not candidates:
            return None
        nearest = min(distance for distance, _, _ in candidates)
        closest = sorted(c for c in candidates if c[0] == nearest)
        key = (tree.topic, group)
        turn = self._turn.get(key, 0)
        self._turn[key] = turn + 1
        chosen = closest[turn % len(closest)][2]
        search.tried.add(chosen.ref.id)
        return chosen


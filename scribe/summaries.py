"""Digests: what a tree edge knows of the subscriptions below it.

A digest holds the ``matching.Summary`` of the subtree's plain (group-less)
subscriptions, which decides whether an event goes down the edge at all, and, for each
anycast group with members below, the summary of those members' filters and the
distance to the nearest member, which steer the depth-first search for the one member
that gets the event. A node's digest is its own subscriptions merged with its
children's digests; it is sent to the parent only when it changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from matching import Filter, Summary
from overlay.core.framing import encode_map
from overlay.core.pubsub import AttrValue
from scribe.wire_records import MAX_PATH, DigestWire, GroupDigestWire

#: The filter every event matches: what a summary holds when summaries are switched off.
MATCH_ALL = Filter(None)


@dataclass(frozen=True)
class GroupDigest:
    summary: Summary
    #: Tree edges from the advertising node down to its nearest member (0: a local one).
    distance: int


#: The distance a digest that left groups out gives each group it did not list: such a
#: subtree is asked after every subtree that named the group.
UNLISTED_DISTANCE = MAX_PATH


@dataclass(frozen=True)
class Digest:
    plain: Summary
    groups: Mapping[str, GroupDigest] = field(default_factory=dict)
    #: Members of groups not in ``groups`` may be below (a digest cut to its byte bound).
    more_groups: bool = False

    @staticmethod
    def empty() -> Digest:
        return Digest(Summary.empty())

    def plain_may_match(self, attrs: Mapping[str, AttrValue]) -> bool:
        return self.plain.may_match(attrs)

    def group_may_match(self, group: str, attrs: Mapping[str, AttrValue]) -> GroupDigest | None:
        """The group's entry when a member below may match ``attrs``, else None."""
        entry = self.groups.get(group)
        if entry is None:
            return _UNLISTED if self.more_groups else None
        return entry if entry.summary.may_match(attrs) else None

    def to_wire(self, max_bytes: int) -> DigestWire:
        """The digest for a message, in at most about ``max_bytes``: the groups nearest
        their members first; those that do not fit are left out, and ``more_groups`` says
        so (a parent then asks this subtree for any group, after those that named it)."""
        plain = self.plain.to_wire()
        if not self.groups:  # nothing to cut: the plain summary is bounded on its own
            return DigestWire(plain, {}, self.more_groups)
        used = len(encode_map(plain))
        groups: dict[str, GroupDigestWire] = {}
        more = self.more_groups
        for name, entry in sorted(self.groups.items(), key=lambda item: (item[1].distance,
                                                                          item[0])):
            wire = GroupDigestWire(entry.summary.to_wire(), entry.distance)
            cost = len(name.encode()) + len(encode_map(wire.summary)) + 16
            if used + cost > max_bytes:
                more = True
                break
            used += cost
            groups[name] = wire
        return DigestWire(plain, dict(sorted(groups.items())), more)

    @staticmethod
    def from_wire(wire: DigestWire, max_filters: int) -> Digest:
        return Digest(Summary.from_wire(wire.plain, max_filters), {
            name: GroupDigest(Summary.from_wire(entry.summary, max_filters), entry.distance)
            for name, entry in wire.groups.items()}, wire.more_groups)


#: What an unlisted group's entry is taken to be in a digest that left groups out.
_UNLISTED = GroupDigest(Summary.everything(), UNLISTED_DISTANCE)


def local_digest(plain_filters: Iterable[Filter], group_filters: Mapping[str, list[Filter]],
                 summaries: bool, max_filters: int) -> Digest:
    """The digest of one node's own subscriptions on a topic.

    With ``summaries`` off every filter counts as the empty one, so every edge that leads
    to a subscription (of a group) advertises "everything" and filtering happens only
    at the subscriber's node.
    """

    def summarize(filters: Iterable[Filter]) -> Summary:
        filters = list(filters)
        if not summaries and filters:
            filters = [MATCH_ALL]
        return Summary.of(filters, max_filters)

    return Digest(summarize(plain_filters), {
        name: GroupDigest(summarize(filters), 0)
        for name, filters in group_filters.items() if filters})


def aggregate(local: Digest, children: Iterable[Digest]) -> Digest:
    """A node's digest: its own subscriptions and everything below its children."""
    children = list(children)
    if not children:
        return local
    plain = local.plain.merge(*(child.plain for child in children))
    groups: dict[str, GroupDigest] = {}
    for name in sorted({name for d in (local, *children) for name in d.groups}):
        below = [child.groups[name] for child in children if name in child.groups]
        own = local.groups.get(name)
        parts = [entry.summary for entry in below]
        if own is not None:
            summary, distance = own.summary.merge(*parts), 0
        else:
            summary = parts[0].merge(*parts[1:])
            distance = 1 + min(entry.distance for entry in below)
        groups[name] = GroupDigest(summary, distance)
    return Digest(plain, groups, any(child.more_groups for child in children))

"""A node's local subscriptions: by handle, and per topic for matching events.

Plain subscriptions of a topic sit in a ``matching.Index``, so a node with many of them
finds the matching ones without evaluating each filter. Members of an anycast group are
kept per group; when an event is for the group here, they take turns (round robin
among those whose filter matches), which spreads the group's events over its local
members.

When the node is about to handle several events of a topic in a row (a fill, a run of
held copies, a release of events that waited for their replicas), they are matched in
one call (:meth:`TopicSubscriptions.ahead`: ``Index.match_many``, which pays numpy's
per-call costs once for them all) and ``matching_plain`` answers from that.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from matching import Filter, Index, Matches
from overlay.core.pubsub import (
    AttrValue,
    DuplicateSubscriptionError,
    UnknownSubscriptionError,
)
from scribe.summaries import Digest, local_digest


@dataclass
class Subscription:
    sub_id: int
    topic: str
    filter_text: str
    filter: Filter
    group: str | None
    #: Time (on the driver's clock) when it ends unless renewed; None: never.
    expires_at: float | None
    #: Seq of the last event delivered to it (0: none): none is delivered twice.
    last_seq: int = 0
    #: While its replay is awaited, live events wait here (handed over after it).
    replay_queue: list[Any] | None = None


class TopicSubscriptions:
    """One topic's local subscriptions."""

    def __init__(self) -> None:
        self.plain: dict[int, Subscription] = {}
        self._plain_index: Index[int] = Index()
        #: The plain subscriptions in handle order, while every one of them matches every
        #: event (empty filters): then an event needs no matching at all.
        self._everyone: tuple[Subscription, ...] | None = None
        self.groups: dict[str, dict[int, Subscription]] = {}
        self._turn: dict[str, int] = {}
        self._digest: Digest | None = None
        #: Plain matches of events about to be handled (:meth:`ahead`), by the id of
        #: their attributes: those attributes (the id is only theirs while they live),
        #: the count of changes they were matched at, and the matches.
        self._ahead: dict[int, tuple[Mapping[str, AttrValue], int, Matches[int]]] = {}
        #: Plain subscriptions added or removed so far: matches found ahead of one are
        #: not used after it.
        self._changes = 0

    def __len__(self) -> int:
        return len(self.plain) + sum(len(members) for members in self.groups.values())

    def add(self, sub: Subscription) -> None:
        if sub.group is None:
            self.plain[sub.sub_id] = sub
            self._plain_index.add(sub.sub_id, sub.filter)
            self._everyone = None
            self._changes += 1
        else:
            self.groups.setdefault(sub.group, {})[sub.sub_id] = sub
        self._digest = None

    def remove(self, sub: Subscription) -> None:
        if sub.group is None:
            del self.plain[sub.sub_id]
            self._plain_index.remove(sub.sub_id)
            self._everyone = None
            self._changes += 1
        else:
            members = self.groups[sub.group]
            del members[sub.sub_id]
            if not members:
                del self.groups[sub.group]
                self._turn.pop(sub.group, None)
        self._digest = None

    def matching_plain(self, attrs: Mapping[str, AttrValue]) -> Sequence[Subscription]:
        """Plain subscriptions whose filter matches, in handle order (deterministic)."""
        everyone = self._everyone  # kept only while every filter matches everything
        if everyone is not None:
            return everyone
        if not self.plain:
            return ()
        index = self._plain_index
        if index.matches_everything:
            everyone = self._everyone = tuple(self.plain[k] for k in sorted(self.plain))
            return everyone
        ahead = self._ahead.get(id(attrs)) if self._ahead else None
        if ahead is not None and ahead[0] is attrs and ahead[1] == self._changes:
            keys: Iterator[int] | set[int] = iter(ahead[2].keys())
        else:
            keys = index.match(attrs)
        return [self.plain[sub_id] for sub_id in sorted(keys)]

    @contextmanager
    def ahead(self, events: Sequence[Mapping[str, AttrValue]]) -> Iterator[None]:
        """While in this context, :meth:`matching_plain` answers ``events`` (the same
        attribute objects) from one ``match_many`` call made here, unless plain
        subscriptions change meanwhile. Only a cost: an event not asked for, or asked
        for after a change, is matched again on its own."""
        previous = self._ahead
        if len(events) > 1 and self.plain and self._everyone is None \
                and not self._plain_index.matches_everything:
            found = self._plain_index.match_many(events)
            changes = self._changes
            self._ahead = {**previous, **{id(attrs): (attrs, changes, matches)
                                          for attrs, matches in zip(events, found, strict=True)}}
        try:
            yield
        finally:
            self._ahead = previous

    def take_group_member(self, group: str,
                          attrs: Mapping[str, AttrValue]) -> Subscription | None:
        """The local member of ``group`` whose turn it is among those that match."""
        members = self.groups.get(group)
        if not members:
            return None
        matching = [sub for _, sub in sorted(members.items()) if sub.filter.matches(attrs)]
        if not matching:
            return None
        turn = self._turn.get(group, 0)
        self._turn[group] = turn + 1
        return matching[turn % len(matching)]

    def digest(self, summaries: bool, max_filters: int) -> Digest:
        """This node's own contribution to the topic's digest (cached until a change)."""
        if self._digest is None:
            self._digest = local_digest(
                (sub.filter for sub in self.plain.values()),
                {name: [sub.filter for sub in members.values()]
                 for name, members in self.groups.items()},
                summaries, max_filters)
        return self._digest


class Subscriptions:
    """Every local subscription of the node, by handle and by topic."""

    def __init__(self) -> None:
        self._by_id: dict[int, Subscription] = {}
        self._by_topic: dict[str, TopicSubscriptions] = {}

    def __contains__(self, sub_id: int) -> bool:
        return sub_id in self._by_id

    def get(self, sub_id: int) -> Subscription:
        try:
            return self._by_id[sub_id]
        except KeyError:
            raise UnknownSubscriptionError(sub_id) from None

    def topic(self, topic: str) -> TopicSubscriptions | None:
        return self._by_topic.get(topic)

    def add(self, sub: Subscription) -> None:
        if sub.sub_id in self._by_id:
            raise DuplicateSubscriptionError(sub.sub_id)
        self._by_id[sub.sub_id] = sub
        self._by_topic.setdefault(sub.topic, TopicSubscriptions()).add(sub)

    def remove(self, sub_id: int) -> Subscription:
        sub = self.get(sub_id)
        del self._by_id[sub_id]
        topic_subs = self._by_topic[sub.topic]
        topic_subs.remove(sub)
        if not topic_subs:
            del self._by_topic[sub.topic]
        return sub

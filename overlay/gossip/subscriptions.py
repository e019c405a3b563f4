"""A node's local subscriptions.

Subscriptions are kept by handle and per topic; an event is handed to each subscription
of its topic whose filter matches (in handle order, so runs are deterministic).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from matching import Filter, Summary
from overlay.core.pubsub import AttrValue, DuplicateSubscriptionError, UnknownSubscriptionError


@dataclass
class Subscription:
    sub_id: int
    topic: str
    filter_text: str
    filter: Filter
    #: Time (driver's clock) when it ends unless renewed; None: never.
    expires_at: float | None


class Subscriptions:
    def __init__(self) -> None:
        self._by_id: dict[int, Subscription] = {}
        self._by_topic: dict[str, dict[int, Subscription]] = {}

    def __contains__(self, sub_id: int) -> bool:
        return sub_id in self._by_id

    def __iter__(self) -> Iterator[Subscription]:
        return iter(list(self._by_id.values()))

    def __len__(self) -> int:
        return len(self._by_id)

    def topics(self) -> list[str]:
        return sorted(self._by_topic)

    def get(self, sub_id: int) -> Subscription:
        try:
            return self._by_id[sub_id]
        except KeyError:
            raise UnknownSubscriptionError(sub_id) from None

    def add(self, sub: Subscription) -> None:
        if sub.sub_id in self._by_id:
            raise DuplicateSubscriptionError(sub.sub_id)
        self._by_id[sub.sub_id] = sub
        topic_subs = self._by_topic.setdefault(sub.topic, {})
        topic_subs[sub.sub_id] = sub
        self._by_topic[sub.topic] = dict(sorted(topic_subs.items()))

    def remove(self, sub_id: int) -> Subscription:
        sub = self.get(sub_id)
        del self._by_id[sub_id]
        topic_subs = self._by_topic[sub.topic]
        del topic_subs[sub_id]
        if not topic_subs:
            del self._by_topic[sub.topic]
        return sub

    def matching(self, topic: str, attrs: Mapping[str, AttrValue]) -> list[Subscription]:
        """This topic's subscriptions whose filter matches, in handle order."""
        topic_subs = self._by_topic.get(topic)
        if not topic_subs:
            return []
        return [sub for sub in topic_subs.values() if sub.filter.matches(attrs)]

    def summary(self, topic: str, max_filters: int) -> Summary | None:
        """The summary of this topic's filters (None: no subscription to it here)."""
        topic_subs = self._by_topic.get(topic)
        if not topic_subs:
            return None
        return Summary.of([sub.filter for sub in topic_subs.values()], max_filters)

"""A node's local subscriptions, what they receive, and the errors application calls raise.

Subscriptions are kept by handle and per topic; an event is handed to each subscription
of its topic whose filter matches (in handle order, so runs are deterministic).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from matching import Filter, Summary
from overlay.core.errors import LocalProtocolError
from overlay.gossip.messages import AttrValue

#: Why a local subscription ended (TRACES.md ``unsubscribe.reason``).
UNSUBSCRIBE_REASONS = ("client", "expired", "disconnect")


class UnknownSubscriptionError(LocalProtocolError):
    """An application call named a subscription this node does not hold (API ``unknown_sub``)."""

    code = "unknown_sub"

    def __init__(self, sub_id: int) -> None:
        super().__init__(f"no subscription {sub_id} on this node")
        self.sub_id = sub_id


class DuplicateSubscriptionError(LocalProtocolError):
    """``subscribe`` was given a handle that is already in use on this node."""

    def __init__(self, sub_id: int) -> None:
        super().__init__(f"subscription {sub_id} already exists on this node")
        self.sub_id = sub_id


@dataclass(frozen=True, slots=True)
class DeliveredEvent:
    """What a local subscription receives (the fields of the API's ``notify`` push)."""

    topic: str
    msg_id: str
    #: Always None in unstructured mode: nobody numbers a topic's events.
    seq: int | None
    attrs: Mapping[str, AttrValue]
    payload: bytes
    #: Hex id of the node where it was published.
    publisher: str
    #: Publish time given by the publishing application.
    ts: float
    #: Overlay transmissions from the publisher's node to this one.
    hop: int


@dataclass
class Subscription:
    sub_id: int
    topic: str
    filter_text: str
    filter: Filter
    #: Time (driver's clock) when it ends unless renewed; None: never.
    expires_at: float | None


def expiry_time(now: float, expiry: float | None) -> float | None:
    """When a subscription given ``expiry`` seconds of life at ``now`` ends."""
    if expiry is None:
        return None
    if isinstance(expiry, bool) or not isinstance(expiry, int | float) or \
            not math.isfinite(expiry) or expiry <= 0:
        raise ValueError(f"expiry must be a positive number of seconds, got {expiry!r}")
    return now + float(expiry)


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

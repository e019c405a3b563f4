"""The publish/subscribe vocabulary both modes, the API and the clients share: limits,
attribute values and the one strict set of checks of what an application gives (topic,
msg_id, attributes, group, expiry), what a subscription receives, the subscription
errors, and the :class:`PubSubCore` protocol that Scribe's ``ScribeApp`` and the
unstructured ``GossipNode`` implement. One definition of each rule: the API's request
parser, both cores' application calls and their wire messages check with these.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard

from overlay.core.errors import LocalProtocolError
from overlay.core.records import UNSUBSCRIBE_REASONS

#: Longest topic name, in characters.
MAX_TOPIC_CHARS = 1024
#: Most attributes of one event, and longest attribute name, in characters.
MAX_ATTRS = 256
MAX_ATTR_NAME_CHARS = 256
#: Longest anycast group name, in characters.
MAX_GROUP_CHARS = 256
#: Longest message id (lowercase hex text).
MAX_MSG_ID_CHARS = 64
#: Attribute integers (and filter literals) are 64-bit signed.
MIN_INT = -(1 << 63)
MAX_INT = (1 << 63) - 1

AttrValue = str | int | float | bool
Attrs = dict[str, AttrValue]

#: A whole msg_id, or any node id in hex (a regular expression: several times cheaper
#: than a set of its characters, and checked for every event a node handles).
_HEX_ID = re.compile(f"[0-9a-f]{{1,{MAX_MSG_ID_CHARS}}}").fullmatch


def is_topic(topic: object) -> TypeGuard[str]:
    """The rule for topics: text of 1 to MAX_TOPIC_CHARS characters."""
    return type(topic) is str and 0 < len(topic) <= MAX_TOPIC_CHARS


def check_topic(topic: str) -> None:
    if not is_topic(topic):
        raise ValueError(f"a topic is text of 1 to {MAX_TOPIC_CHARS} characters")


def check_group(group: str) -> None:
    if type(group) is not str or not 0 < len(group) <= MAX_GROUP_CHARS:
        raise ValueError(f"a group is text of 1 to {MAX_GROUP_CHARS} characters")


def check_hex(text: str, what: str = "a msg_id") -> None:
    """A msg_id (or a node id): 1 to 64 lowercase hex digits."""
    if type(text) is not str or _HEX_ID(text) is None:
        raise ValueError(f"{what} is 1 to {MAX_MSG_ID_CHARS} lowercase hex digits, "
                         f"got {str(text)[:80]!r}")


def is_hex_id(text: str) -> bool:
    """:func:`check_hex`'s test alone, for the per-event fast paths."""
    return _HEX_ID(text) is not None


@functools.lru_cache(maxsize=1024)
def is_node_hex(text: str) -> bool:
    """:func:`is_hex_id` for the node ids events carry (their publisher): the same few
    come with every event, so the answers are remembered (finding one again took 1.3k
    instructions against 3.2k for the test, callgrind). Not for msg_ids: each is new."""
    return is_hex_id(text)


def check_msg_id(msg_id: str) -> None:
    check_hex(msg_id, "a msg_id")


def check_attrs(attrs: Mapping[str, Any]) -> None:
    """At most 256 attributes; names text of 1 to 256 characters; values text, 64-bit
    integers, floats other than NaN, or booleans."""
    if len(attrs) > MAX_ATTRS:
        raise ValueError(f"at most {MAX_ATTRS} attributes, got {len(attrs)}")
    for name, value in attrs.items():
        if type(name) is not str or not 0 < len(name) <= MAX_ATTR_NAME_CHARS:
            raise ValueError(f"attribute names are text of 1 to {MAX_ATTR_NAME_CHARS} "
                             f"characters, got {str(name)[:80]!r}")
        kind = type(value)
        if kind is int:
            if not MIN_INT <= value <= MAX_INT:
                raise ValueError(f"attribute {name!r}: integers are 64-bit signed "
                                 f"({MIN_INT}..{MAX_INT})")
        elif kind is float:
            if value != value:
                raise ValueError(f"attribute {name!r} is NaN")
        elif kind is not str and kind is not bool:
            raise ValueError(f"attribute {name!r} must be text, an integer, a number or a "
                             f"boolean, got {kind.__name__}")


def check_expiry(expiry: float) -> None:
    if isinstance(expiry, bool) or not isinstance(expiry, int | float) or \
            not math.isfinite(expiry) or expiry <= 0:
        raise ValueError(f"expiry must be a positive, finite number of seconds, got {expiry!r}")


#: Longest ``ttl`` an event may carry: ten years, in seconds.
MAX_TTL = 315_360_000.0


def check_ttl(ttl: float) -> None:
    """An event's ``ttl`` (API ``publish``): a positive number of seconds, at most MAX_TTL."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or \
            not math.isfinite(ttl) or not 0 < ttl <= MAX_TTL:
        raise ValueError(f"ttl must be a positive number of seconds up to {MAX_TTL:.0f}, "
                         f"got {ttl!r}")


def expiry_time(now: float, expiry: float | None) -> float | None:
    """When a subscription given ``expiry`` seconds of life at ``now`` ends (None: never)."""
    if expiry is None:
        return None
    check_expiry(expiry)
    return now + float(expiry)


def check_unsubscribe_reason(reason: str) -> None:
    if reason not in UNSUBSCRIBE_REASONS:
        raise ValueError(f"reason must be one of {UNSUBSCRIBE_REASONS}, got {reason!r}")


@dataclass(slots=True)  # one per delivery, and frozen costs each field a call
class DeliveredEvent:
    """What a local subscription receives (the fields of the API's ``notify`` push)."""

    topic: str
    msg_id: str
    #: Number the topic's root gave the event (per topic, from 1); None in unstructured
    #: mode, where nobody numbers a topic's events.
    seq: int | None
    attrs: Mapping[str, AttrValue]
    payload: bytes
    #: Hex id of the node where it was published.
    publisher: str
    #: Publish time given by the publishing application.
    ts: float
    #: Overlay transmissions that brought it here (tree depth, or gossip hops).
    hop: int
    #: Deliveries of this event to the subscription's durable consumer so far, this one
    #: included (1 for any other subscription).
    attempt: int = 1


class UnknownSubscriptionError(LocalProtocolError):
    """An application call named a subscription this node does not hold (API
    ``unknown_sub``)."""

    code = "unknown_sub"

    def __init__(self, sub_id: int) -> None:
        super().__init__(f"no subscription {sub_id} on this node")
        self.sub_id = sub_id


class DuplicateSubscriptionError(LocalProtocolError):
    """``subscribe`` was given a handle that is already in use on this node."""

    def __init__(self, sub_id: int) -> None:
        super().__init__(f"subscription {sub_id} already exists on this node")
        self.sub_id = sub_id


@dataclass(slots=True)  # one per event published: frozen costs each field a call (1.2 -> 0.2 us)
class NewEvent:
    """An event an application publishes, as :meth:`PubSubCore.publish_many` takes it
    (the arguments of :meth:`PubSubCore.publish`, checked there the same way)."""

    topic: str
    attrs: Mapping[str, AttrValue]
    payload: bytes = b""
    msg_id: str | None = None
    ts: float | None = None
    reliable: bool = True
    ttl: float | None = None


#: Per event of a :meth:`PubSubCore.publish_many`: its msg_id, or the error refusing it.
PublishOutcome = str | ValueError | LocalProtocolError


def publish_each(core: PubSubCore, now: float,
                 events: Sequence[NewEvent]) -> list[PublishOutcome]:
    """:meth:`PubSubCore.publish_many` as one :meth:`PubSubCore.publish` per event, for a
    core that gains nothing from handling a burst in one step."""
    outcomes: list[PublishOutcome] = []
    for ev in events:
        try:
            outcomes.append(core.publish(now, ev.topic, ev.attrs, ev.payload, ev.msg_id,
                                         ev.ts, ev.reliable, ev.ttl))
        except (ValueError, LocalProtocolError) as exc:
            outcomes.append(exc)
    return outcomes


@dataclass(frozen=True)
class Capabilities:
    """What a mode serves beyond plain subscriptions."""

    #: ``replay`` of retained events (a root retains a topic's numbered events).
    replay: bool
    #: Anycast ``group`` subscriptions.
    groups: bool
    #: The core says when a subscription is in effect (a ``subscribed`` notice).
    settles: bool
    #: Events are numbered per topic (``seq`` in replies and pushes).
    numbered: bool
    #: Events may carry a ``ttl``, and durable consumers are served (a root keeps them).
    durable: bool


class PubSubCore(Protocol):
    """The application calls of a pub/sub core (sans-IO: ``now`` is passed in, effects
    are drained by the driver). Bad input raises ``ValueError`` (a filter:
    ``matching.FilterSyntaxError``); an unknown handle :class:`UnknownSubscriptionError`."""

    capabilities: Capabilities

    def subscribe(self, now: float, topic: str, filter_text: str, sub_id: int,
                  expiry: float | None = None, group: str | None = None,
                  replay_last: int | None = None, replay_since: int | None = None) -> None: ...

    def unsubscribe(self, now: float, sub_id: int, reason: str = "client") -> None: ...

    def renew(self, now: float, sub_id: int, expiry: float | None) -> None: ...

    def publish(self, now: float, topic: str, attrs: Mapping[str, AttrValue],
                payload: bytes = b"", msg_id: str | None = None, ts: float | None = None,
                reliable: bool = True, ttl: float | None = None) -> str: ...

    def publish_many(self, now: float, events: Sequence[NewEvent]) -> list[PublishOutcome]:
        """``events`` in order, as :meth:`publish` would take them one by one, in one
        step: per event its msg_id, or the error refusing it (the others go on)."""
        ...

    def status(self) -> dict[str, Any]: ...

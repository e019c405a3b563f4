"""Durable consumers' wire messages (scribe.consumers; docs/DESIGN.md, Durable
consumers). Each validates its fields when built, as Scribe's other messages do.

From a member's node to the topic's root (routed toward the topic's key, or sent to the
root the node last heard from): :class:`ConsumerAttach` (also the member's lease,
refreshed every heartbeat interval), :class:`ConsumerDetach`, :class:`ConsumerAck`,
:class:`ConsumerFetch`. From the root: :class:`ConsumerAttached` and
:class:`ConsumerDeliver` to the member's node, :class:`ConsumerSync` to its replicas.
"""

from __future__ import annotations

from typing import Any

from chord.kbr import NodeRef
from overlay.core.messages import message
from overlay.core.pubsub import check_msg_id
from scribe.consumer_values import (
    MAX_DELAY,
    MAX_FETCH,
    MAX_FETCH_WAIT,
    ConsumerConfig,
    ConsumerError,
    Progress,
)
from scribe.messages import _TopicMessage
from scribe.wire_records import MAX_BATCH, MAX_REASON, EventBody

#: Characters of a durable consumer's name.
MAX_NAME_CHARS = 256
#: Most msg_ids one acknowledgement carries.
MAX_ACK_IDS = 1024
ACK_OPS = ("ack", "nak", "term")
#: Why a root refuses or ends an attachment: the consumer exists with other settings or
#: another filter; its settings or filter are not valid; it was deleted.
REFUSALS = ("conflict", "invalid", "deleted")
#: Most consumers one report lists; the root also bounds a report by bytes
#: (``report_cost``), leaving the rest out and saying so (``more``).
MAX_REPORTED = 4096


def check_name(name: str) -> None:
    if type(name) is not str or not 1 <= len(name) <= MAX_NAME_CHARS or not name.isprintable():
        raise ValueError(f"a durable consumer's name is 1 to {MAX_NAME_CHARS} printable "
                         "characters")


def check_sub(sub: int) -> None:
    if type(sub) is not int or not 0 <= sub < 1 << 63:
        raise ValueError("a subscription handle is an unsigned int")


def _config(data: Any) -> ConsumerConfig:
    try:
        return ConsumerConfig.from_wire(list(data))
    except ConsumerError as exc:
        raise ValueError(str(exc)) from None


class _ConsumerMessage(_TopicMessage):
    topic: str
    name: str

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        check_name(self.name)


@message("scribe.consumer_attach")
class ConsumerAttach(_ConsumerMessage):
    """Subscription ``sub`` on ``member``'s node attaches to the consumer (creating it
    with ``config`` and ``filter`` when it does not exist), or renews its lease."""

    topic: str
    name: str
    member: NodeRef
    sub: int
    config: tuple[Any, ...]
    filter: str

    def __post_init__(self) -> None:
        _ConsumerMessage.__post_init__(self)
        check_sub(self.sub)
        _config(self.config)
        if type(self.filter) is not str:
            raise ValueError("a filter is text")

    @property
    def settings(self) -> ConsumerConfig:
        return _config(self.config)


@message("scribe.consumer_attached")
class ConsumerAttached(_ConsumerMessage):
    """The root has ``sub`` attached (``error`` None), or refuses or ends it (``error``:
    why, ``code``: one of REFUSALS)."""

    topic: str
    name: str
    sub: int
    root: NodeRef
    error: str | None = None
    code: str | None = None

    def __post_init__(self) -> None:
        _ConsumerMessage.__post_init__(self)
        check_sub(self.sub)
        if self.error is not None and len(self.error) > MAX_REASON:
            raise ValueError(f"an error is at most {MAX_REASON} characters")
        if (self.code is None) != (self.error is None) or \
                (self.code is not None and self.code not in REFUSALS):
            raise ValueError(f"a refusal has an error and a code, one of {REFUSALS}")


@message("scribe.consumer_detach")
class ConsumerDetach(_ConsumerMessage):
    topic: str
    name: str
    member: NodeRef
    sub: int

    def __post_init__(self) -> None:
        _ConsumerMessage.__post_init__(self)
        check_sub(self.sub)


@message("scribe.consumer_ack")
class ConsumerAck(_ConsumerMessage):
    """``op`` (ack, nak: deliver again after ``delay`` s, term: never again) on events the
    member had in flight."""

    topic: str
    name: str
    member: NodeRef
    sub: int
    op: str
    msg_ids: tuple[str, ...]
    delay: float = 0.0

    def __post_init__(self) -> None:
        _ConsumerMessage.__post_init__(self)
        check_sub(self.sub)
        if self.op not in ACK_OPS:
            raise ValueError(f"op is one of {', '.join(ACK_OPS)}")
        if not 1 <= len(self.msg_ids) <= MAX_ACK_IDS:
            raise ValueError(f"1 to {MAX_ACK_IDS} msg_ids")
        for msg_id in self.msg_ids:
            check_msg_id(msg_id)
        if not 0 <= self.delay <= MAX_DELAY:
            raise ValueError("delay is within [0, 86400] seconds")


@message("scribe.consumer_fetch")
class ConsumerFetch(_ConsumerMessage):
    """A pull member asks for up to ``count`` events, waiting up to ``wait`` s."""

    topic: str
    name: str
    member: NodeRef
    sub: int
    fetch_id: int
    count: int
    wait: float

    def __post_init__(self) -> None:
        _ConsumerMessage.__post_init__(self)
        check_sub(self.sub)
        check_sub(self.fetch_id)
        if not 1 <= self.count <= MAX_FETCH:
            raise ValueError(f"count is within [1, {MAX_FETCH}]")
        if not 0 <= self.wait <= MAX_FETCH_WAIT:
            raise ValueError("wait is within [0, 3600] seconds")


@message("scribe.consumer_deliver")
class ConsumerDeliver(_ConsumerMessage):
    """Events for member ``sub``, each with its attempt; ``fetch_id``: the answer to that
    fetch (maybe empty: its wait ran out), None for pushed events."""

    topic: str
    name: str
    sub: int
    events: tuple[EventBody, ...]
    attempts: tuple[int, ...]
    fetch_id: int | None = None

    def __post_init__(self) -> None:
        _ConsumerMessage.__post_init__(self)
        check_sub(self.sub)
        if len(self.events) > MAX_BATCH or len(self.attempts) != len(self.events):
            raise ValueError(f"at most {MAX_BATCH} events, one attempt each")
        if any(e.seq is None or e.topic != self.topic for e in self.events):
            raise ValueError("delivered events are numbered and of the message's topic")
        if any(type(a) is not int or a < 1 for a in self.attempts):
            raise ValueError("attempts count from 1")
        if self.fetch_id is not None:
            check_sub(self.fetch_id)
        elif not self.events:
            raise ValueError("a push carries events")


@message("scribe.consumer_query")
class ConsumerQuery(_TopicMessage):
    """From a node whose application asks about ``topic``'s durable consumers, routed to
    the root: report them (``name`` None: all, else that one), or delete ``name`` first
    (``delete``) and report what it was."""

    topic: str
    asker: NodeRef
    query_id: int
    name: str | None = None
    delete: bool = False

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        check_sub(self.query_id)
        if self.name is not None:
            check_name(self.name)
        if self.delete and self.name is None:
            raise ValueError("a delete names its consumer")


@message("scribe.consumer_report")
class ConsumerReport(_TopicMessage):
    """The root's answer to a :class:`ConsumerQuery`: per consumer a map of its figures
    (``Consumer.stats``, its settings, its filter), by name; ``more``: some left out."""

    topic: str
    query_id: int
    consumers: tuple[Any, ...]
    more: bool = False

    def __post_init__(self) -> None:
        _TopicMessage.__post_init__(self)
        check_sub(self.query_id)
        if len(self.consumers) > MAX_REPORTED:
            raise ValueError(f"a report lists at most {MAX_REPORTED} consumers")
        for item in self.consumers:
            if not isinstance(item, dict) or set(item) != set(REPORT_FIELDS):
                raise ValueError(f"a consumer's report has the fields {REPORT_FIELDS}")
            check_name(item["durable"])


def report_cost(name: str, filter_text: str) -> int:
    """A bound on the bytes one consumer takes in a report: its name, its filter, and
    the CBOR of its other fields."""
    return len(name.encode()) + len(filter_text.encode()) + 384


#: The fields of one consumer in a :class:`ConsumerReport` (docs/API.md, ``consumers``).
REPORT_FIELDS = ("durable", "filter", "ack", "ack_wait", "max_deliver", "dead_letter",
                 "max_inflight", "pull", "pending", "inflight", "members", "redelivered",
                 "dead_lettered", "ack_floor")


@message("scribe.consumer_sync")
class ConsumerSync(_ConsumerMessage):
    """The root's copy of a consumer for a replica (``progress`` None: it was deleted)."""

    topic: str
    name: str
    root: NodeRef
    progress: tuple[Any, ...] | None
    filter: str

    def __post_init__(self) -> None:
        _ConsumerMessage.__post_init__(self)
        if self.progress is not None:
            try:
                Progress.from_wire(list(self.progress))
            except ConsumerError as exc:
                raise ValueError(str(exc)) from None
        if type(self.filter) is not str:
            raise ValueError("a filter is text")


__all__ = ["ACK_OPS", "MAX_ACK_IDS", "MAX_NAME_CHARS", "MAX_REPORTED", "REFUSALS",
           "REPORT_FIELDS", "ConsumerAck", "ConsumerAttach", "ConsumerAttached",
           "ConsumerDeliver", "ConsumerDetach", "ConsumerFetch", "ConsumerQuery",
           "ConsumerReport", "ConsumerSync", "check_name", "report_cost"]

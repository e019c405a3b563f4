"""The values a durable consumer takes and gives (scribe.consumers): its settings and
their bounds, the members it serves, the actions it decides (deliveries, fetch answers,
dead letters, records) and its progress as persisted and copied to the replicas."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scribe.wire_records import EventBody

#: Defaults and bounds of the settings (docs/API.md, subscribe).
ACK_WAIT = 30.0
MAX_DELIVER = 5
MAX_INFLIGHT = 256
#: Upper bounds, so that one consumer's state stays bounded by its settings.
MAX_INFLIGHT_LIMIT = 65_536
MAX_DELIVER_LIMIT = 1_000
MAX_FETCH = 10_000
#: Longest ``ack_wait`` and nak ``delay``, and longest fetch ``wait``, in seconds.
MAX_DELAY = 86_400.0
MAX_FETCH_WAIT = 3_600.0


class ConsumerError(ValueError):
    """An input the consumer refuses: a local misuse (a setting out of range, a member
    that is not attached, an event it does not have in flight)."""


@dataclass(frozen=True)
class ConsumerConfig:
    """How a durable consumer delivers; checked as it is made."""

    ack: bool = False
    ack_wait: float = ACK_WAIT
    max_deliver: int = MAX_DELIVER
    dead_letter: str | None = None
    max_inflight: int = MAX_INFLIGHT
    pull: bool = False

    def __post_init__(self) -> None:
        if type(self.ack) is not bool or type(self.pull) is not bool:
            raise ConsumerError("ack and pull are booleans")
        if not isinstance(self.ack_wait, int | float) or isinstance(self.ack_wait, bool) \
                or not 0 < self.ack_wait <= MAX_DELAY:
            raise ConsumerError(f"ack_wait is a number of seconds in (0, 86400], "
                                f"got {self.ack_wait!r}")
        if type(self.max_deliver) is not int or not 1 <= self.max_deliver <= MAX_DELIVER_LIMIT:
            raise ConsumerError(f"max_deliver is an int in [1, {MAX_DELIVER_LIMIT}], "
                                f"got {self.max_deliver!r}")
        if type(self.max_inflight) is not int or \
                not 1 <= self.max_inflight <= MAX_INFLIGHT_LIMIT:
            raise ConsumerError(f"max_inflight is an int in [1, {MAX_INFLIGHT_LIMIT}], "
                                f"got {self.max_inflight!r}")
        if self.dead_letter is not None and (type(self.dead_letter) is not str
                                             or not self.dead_letter):
            raise ConsumerError("dead_letter is a topic name")

    def to_wire(self) -> list[object]:
        return [self.ack, self.ack_wait, self.max_deliver, self.dead_letter,
                self.max_inflight, self.pull]

    @classmethod
    def from_wire(cls, data: object) -> ConsumerConfig:
        """Back from :meth:`to_wire`; ConsumerError when ``data`` is not one."""
        if not isinstance(data, list) or len(data) != 6:
            raise ConsumerError("a consumer's settings are a list of 6 fields")
        ack, ack_wait, max_deliver, dead_letter, max_inflight, pull = data
        return cls(ack, ack_wait, max_deliver, dead_letter, max_inflight, pull)


@dataclass(frozen=True)
class Member:
    """One attached subscription: the node it lives on and its handle there."""

    node: str
    sub: int


# -- what the consumer decides ------------------------------------------------------------------


@dataclass(frozen=True)
class Deliver:
    """Hand ``body`` to ``member`` (``attempt`` 1 the first time)."""

    member: Member
    body: EventBody
    attempt: int


@dataclass(frozen=True)
class FetchAnswer:
    """The answer to ``member``'s fetch ``fetch_id``: these events (maybe none: its wait
    ran out), each with its attempt."""

    member: Member
    fetch_id: int
    events: tuple[tuple[EventBody, int], ...]


@dataclass(frozen=True)
class DeadLetter:
    """``body`` was delivered ``attempts`` times without an acknowledgement: publish it
    to the consumer's dead-letter topic (None: drop it), and trace it."""

    body: EventBody
    attempts: int
    topic: str | None


@dataclass(frozen=True)
class Record:
    """A trace record (``ack``, ``redeliver``, ``term``, ``consumer``)."""

    ev: str
    fields: tuple[tuple[str, object], ...]


Action = Deliver | FetchAnswer | DeadLetter | Record

#: The events of the topic the consumer may read, by seq, at ``now`` (the root's log:
#: None for an event it does not hold, or whose ttl has passed).
EventLog = Callable[[int, float], EventBody | None]
#: Whether the consumer's filter wants an event.
Wants = Callable[[EventBody], bool]


@dataclass(frozen=True)
class Progress:
    """What a consumer keeps across a restart of its root (or hands to the next root):
    its settings and how far it got. What was in flight is not kept: after a failover
    it is delivered again (at-least-once; docs/API.md says so)."""

    config: ConsumerConfig
    #: Every seq up to here is done.
    ack_floor: int
    #: Seqs above the floor that are done (acknowledged out of order, ended, dead).
    done: tuple[int, ...]
    #: Deliveries so far of seqs not done: (seq, attempts), so that max_deliver holds
    #: across a failover.
    attempts: tuple[tuple[int, int], ...]
    #: The highest seq offered (events after it are offered again by the log).
    offered: int

    def to_wire(self) -> list[object]:
        """As a CBOR-ready list (the store's row, a replica's copy)."""
        return [*self.config.to_wire(), self.ack_floor, list(self.done),
                [list(a) for a in self.attempts], self.offered]

    @classmethod
    def from_wire(cls, data: object) -> Progress:
        """Back from :meth:`to_wire`; ConsumerError when ``data`` is not one."""
        if not isinstance(data, list) or len(data) != 10:
            raise ConsumerError("a consumer's progress is a list of 10 fields")
        config = ConsumerConfig.from_wire(data[:6])
        floor, done, tries, offered = data[6:]
        for name, value in (("ack_floor", floor), ("offered", offered)):
            if type(value) is not int:
                raise ConsumerError(f"{name} is an int")
        if not isinstance(done, list) or any(type(s) is not int for s in done):
            raise ConsumerError("done is a list of seqs")
        if not isinstance(tries, list) or any(
                not isinstance(a, list) or len(a) != 2 or any(type(x) is not int for x in a)
                for a in tries):
            raise ConsumerError("attempts is a list of [seq, count] pairs")
        return cls(config, floor, tuple(done), tuple((s, n) for s, n in tries), offered)

    def __post_init__(self) -> None:
        if self.ack_floor < 0 or self.offered < self.ack_floor:
            raise ConsumerError("a consumer's progress needs 0 <= ack_floor <= offered")
        if any(not self.ack_floor < seq <= self.offered for seq in self.done):
            raise ConsumerError("done seqs lie between the ack floor and the last offered")

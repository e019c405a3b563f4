"""Durable consumers: acknowledged delivery of a topic's events to a named, shared
consumer (a work queue), as its root keeps it.

A durable consumer is identified by (topic, name) in the whole overlay and lives with
the topic's log at its root. Connections on any daemon attach to it as **members**;
each event its filter wants goes to one member at a time. With ``ack`` the member must
acknowledge it: an event not acknowledged within ``ack_wait`` (or whose member detached)
is delivered again, to any member, with its ``attempt`` counted; after ``max_deliver``
attempts it is dead-lettered. ``nak`` asks for it again after a delay, ``term`` ends it.
``max_inflight`` bounds the unacknowledged events outstanding per member (prefetch).
A ``pull`` consumer's members get events only when they ``fetch``.

:class:`Consumer` is the state machine, sans-IO in h11's manner: every input takes
``now``; what it decides comes back as :class:`Action` values (deliveries, fetch
answers, dead letters, records); :meth:`Consumer.next_deadline` derives the next time
it must be woken from its state. It reads event bodies through the :class:`EventLog`
given at construction (the root's retention buffer), so an event leaves the consumer's
reach when retention drops it. Wiring it into the root (persisting its progress,
copying it to the replicas, the member messages and the API) builds on this.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

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


@dataclass
class _InFlight:
    member: Member
    deadline: float
    attempt: int
    msg_id: str


@dataclass
class _Fetch:
    member: Member
    fetch_id: int
    room: int
    until: float
    #: Event costs (``EventBody.cost``) the answer may still carry: it goes in one
    #: message, and on to the application in one frame.
    room_bytes: int


@dataclass
class _MemberState:
    inflight: int = 0


@dataclass
class Consumer:
    """One durable consumer's state at its topic's root (see the module docs).

    Invariants, kept by every input: a seq is in at most one of ``_ready`` (may be
    delivered, maybe not before a time: ``_not_before``), ``_inflight`` and done (at or
    below ``ack_floor``, or in ``_done``); every member's in-flight count is the number
    of its ``_inflight`` entries; ``_attempts`` counts deliveries of seqs not done."""

    topic: str
    name: str
    config: ConsumerConfig
    log: EventLog
    wants: Wants
    #: Every seq up to this one is done (acknowledged, ended or dead-lettered) or was not
    #: wanted: the point a consumer re-attached from scratch resumes after.
    ack_floor: int = 0
    _done: set[int] = field(default_factory=set)
    _ready: list[int] = field(default_factory=list)
    _not_before: dict[int, float] = field(default_factory=dict)
    #: In the order they were handed out, which is also their deadlines' order.
    _inflight: dict[int, _InFlight] = field(default_factory=dict)
    _attempts: dict[int, int] = field(default_factory=dict)
    _members: dict[Member, _MemberState] = field(default_factory=dict)
    _fetches: list[_Fetch] = field(default_factory=list)
    #: The highest seq offered so far.
    _offered: int = 0
    #: Round-robin position among members.
    _turn: int = 0
    redelivered: int = 0
    dead_lettered: int = 0

    # -- inputs ---------------------------------------------------------------------------------

    def offer(self, now: float, body: EventBody) -> list[Action]:
        """A new numbered event of the topic (in seq order)."""
        seq = body.seq
        assert seq is not None
        if seq <= self._offered:
            return []
        self._offered = seq
        if not self.wants(body):
            self._finish(seq)
            return []
        bisect.insort(self._ready, seq)
        return self._dispatch(now)

    def attach(self, now: float, member: Member) -> list[Action]:
        self._members.setdefault(member, _MemberState())
        return [self.trace("consumer", topic=self.topic, durable=self.name, op="attach",
                           member=member.node, sub=member.sub),
                *self._dispatch(now)]

    def detach(self, now: float, member: Member) -> list[Action]:
        """The member left (unsubscribed, or its connection closed): what it had in
        flight goes to the others at once."""
        if self._members.pop(self._known(member), None) is None:
            return []
        self._fetches = [f for f in self._fetches if f.member != member]
        for seq in [s for s, f in self._inflight.items() if f.member == member]:
            del self._inflight[seq]
            bisect.insort(self._ready, seq)
        return [self.trace("consumer", topic=self.topic, durable=self.name, op="detach",
                           member=member.node, sub=member.sub),
                *self._dispatch(now)]

    def ack(self, now: float, member: Member, seq: int) -> list[Action]:
        """``member`` is done with ``seq``."""
        flight = self._take(member, seq)
        self._finish(seq)
        return [self.trace("ack", topic=self.topic, durable=self.name, seq=seq,
                           msg_id=flight.msg_id, attempt=flight.attempt, member=member.node),
                *self._dispatch(now)]

    def nak(self, now: float, member: Member, seq: int, delay: float = 0.0) -> list[Action]:
        """``member`` asks for ``seq`` to be delivered again, not before ``delay`` s."""
        if not 0 <= delay <= MAX_DELAY:
            raise ConsumerError(f"delay is a number of seconds in [0, 86400], got {delay!r}")
        flight = self._take(member, seq)
        actions = self._again(now, seq, flight.attempt, now + delay)
        return actions + self._dispatch(now)

    def term(self, now: float, member: Member, seq: int) -> list[Action]:
        """``member`` says ``seq`` must never be delivered again."""
        flight = self._take(member, seq)
        self._finish(seq)
        return [self.trace("term", topic=self.topic, durable=self.name, seq=seq,
                           msg_id=flight.msg_id, attempt=flight.attempt, member=member.node),
                *self._dispatch(now)]

    def fetch(self, now: float, member: Member, fetch_id: int, count: int,
              wait: float, max_bytes: int | None = None) -> list[Action]:
        """A pull: up to ``count`` events for ``member``, waiting up to ``wait`` s for the
        first (``wait`` 0: answer at once, maybe with none), and events whose costs add up
        to at most ``max_bytes`` (None: no bound; the first event always goes)."""
        self._known(member)
        if type(count) is not int or not 1 <= count <= MAX_FETCH:
            raise ConsumerError(f"max is an int in [1, {MAX_FETCH}], got {count!r}")
        if not 0 <= wait <= MAX_FETCH_WAIT:
            raise ConsumerError(f"wait is a number of seconds in [0, 3600], got {wait!r}")
        request = _Fetch(member, fetch_id, count, now + wait,
                         max_bytes if max_bytes is not None else 1 << 62)
        self._fetches.append(request)
        actions = self._dispatch(now)
        if request in self._fetches and wait == 0:
            self._fetches.remove(request)
            actions.append(FetchAnswer(member, fetch_id, ()))
        return actions

    def tick(self, now: float) -> list[Action]:
        """Time passed: redeliver what waited past ``ack_wait``, answer fetches whose
        wait ran out, deliver events whose nak delay is over."""
        actions: list[Action] = []
        due = list(itertools.takewhile(lambda item: item[1].deadline <= now,
                                       self._inflight.items()))
        for seq, flight in sorted(due, key=lambda item: item[0]):
            del self._inflight[seq]
            self._members[flight.member].inflight -= 1
            actions += self._again(now, seq, flight.attempt, now)
        for request in [f for f in self._fetches if f.until <= now]:
            self._fetches.remove(request)
            actions.append(FetchAnswer(request.member, request.fetch_id, ()))
        return actions + self._dispatch(now)

    def next_deadline(self) -> float | None:
        # In-flight entries go in as ``now + ack_wait`` with ``now`` never going back: in
        # insertion order, their deadlines are too, and the first one is the soonest.
        times = [next(iter(self._inflight.values())).deadline] if self._inflight else []
        times += [f.until for f in self._fetches]
        if self._members or self._fetches:
            times += list(self._not_before.values())
        return min(times) if times else None

    # -- across restarts ------------------------------------------------------------------------

    def progress(self) -> Progress:
        return Progress(self.config, self.ack_floor, tuple(sorted(self._done)),
                        tuple(sorted(self._attempts.items())), self._offered)

    @classmethod
    def resume(cls, topic: str, name: str, progress: Progress, log: EventLog, wants: Wants,
               events: Iterable[EventBody]) -> Consumer:
        """The consumer as ``progress`` left it, with ``events`` (the topic's log, in seq
        order) offered again: every one after the floor that is not done is pending,
        whatever was in flight before, and so are the log's events past what the
        progress had seen (the former root sent them down after its last copy)."""
        consumer = cls(topic, name, progress.config, log, wants, ack_floor=progress.ack_floor)
        consumer._done = set(progress.done)
        consumer._attempts = dict(progress.attempts)
        offered = progress.offered
        for body in events:
            seq = body.seq or 0
            offered = max(offered, seq)
            if seq <= consumer.ack_floor or seq in consumer._done:
                continue
            if wants(body):
                consumer._ready.append(seq)
            else:
                consumer._finish(seq)
        consumer._offered = offered
        # Seqs the log does not hold (retention dropped them) are done: below the first
        # one it holds at once (the floor jumps), between them one by one.
        held = set(consumer._ready)
        first = min(held) if held else offered + 1
        if first - 1 > consumer.ack_floor:
            consumer._done = {s for s in consumer._done if s >= first}
            consumer._attempts = {s: n for s, n in consumer._attempts.items() if s >= first}
            consumer.ack_floor = first - 1
            consumer._raise_floor()
        for seq in range(first, offered + 1):
            if seq not in held and seq not in consumer._done:
                consumer._finish(seq)
        return consumer

    # -- what it holds --------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Pending (ready or waiting for a nak delay), in flight, members, redeliveries,
        dead letters, and the acknowledgement floor."""
        return {"pending": len(self._ready), "inflight": len(self._inflight),
                "members": len(self._members), "redelivered": self.redelivered,
                "dead_lettered": self.dead_lettered, "ack_floor": self.ack_floor}

    def inflight_of(self, member: Member) -> list[int]:
        return sorted(s for s, f in self._inflight.items() if f.member == member)

    # -- steps ----------------------------------------------------------------------------------

    def _known(self, member: Member) -> Member:
        if member not in self._members:
            raise ConsumerError(f"{member} is not attached to {self.topic}/{self.name}")
        return member

    def _take(self, member: Member, seq: int) -> _InFlight:
        """The in-flight entry of ``seq`` held by ``member``, removed."""
        self._known(member)
        flight = self._inflight.get(seq)
        if flight is None or flight.member != member:
            raise ConsumerError(f"event {seq} is not in flight to this member")
        del self._inflight[seq]
        self._members[member].inflight -= 1
        return flight

    def _again(self, now: float, seq: int, attempt: int, not_before: float) -> list[Action]:
        """``seq`` goes back to be delivered again, or to the dead letters."""
        body = self.log(seq, now)
        if body is None:  # retention dropped it meanwhile
            self._finish(seq)
            return []
        if attempt >= self.config.max_deliver:
            self._finish(seq)
            self.dead_lettered += 1
            return [DeadLetter(body, attempt, self.config.dead_letter),
                    self.trace("dead_letter", topic=self.topic, durable=self.name, seq=seq,
                               msg_id=body.msg_id, attempts=attempt,
                               to=self.config.dead_letter)]
        bisect.insort(self._ready, seq)
        if not_before > now:
            self._not_before[seq] = not_before
        self.redelivered += 1
        return [self.trace("redeliver", topic=self.topic, durable=self.name, seq=seq,
                           msg_id=body.msg_id, attempt=attempt + 1)]

    def _finish(self, seq: int) -> None:
        self._attempts.pop(seq, None)
        self._not_before.pop(seq, None)
        self._done.add(seq)
        self._raise_floor()

    def _raise_floor(self) -> None:
        """Move the floor over the done seqs right above it."""
        while self.ack_floor + 1 in self._done:
            self.ack_floor += 1
            self._done.discard(self.ack_floor)

    def _dispatch(self, now: float) -> list[Action]:
        """Hand ready events out: to waiting fetches (pull), or round robin to members
        with room (push), oldest first."""
        actions: list[Action] = []
        answers: dict[int, list[tuple[EventBody, int]]] = {}
        skipped: list[int] = []
        while self._ready:
            seq = self._ready[0]
            not_before = self._not_before.get(seq)
            if not_before is not None and not_before > now:
                skipped.append(self._ready.pop(0))
                continue
            member, request = self._next_taker()
            if member is None:
                break
            body = self.log(seq, now)
            if body is None:  # retention (or its ttl) dropped it before it was delivered
                self._ready.pop(0)
                self._not_before.pop(seq, None)
                self._finish(seq)
                continue
            if request is not None and id(request) in answers \
                    and body.cost() > request.room_bytes:
                # The answer is full by bytes: it goes now, the event to the next taker.
                self._fetches.remove(request)
                actions.append(FetchAnswer(member, request.fetch_id,
                                           tuple(answers.pop(id(request)))))
                continue
            self._ready.pop(0)
            self._not_before.pop(seq, None)
            attempt = self._attempts.get(seq, 0) + 1
            if self.config.ack:
                self._attempts[seq] = attempt
                self._inflight[seq] = _InFlight(member, now + self.config.ack_wait, attempt,
                                                body.msg_id)
                self._members[member].inflight += 1
            else:
                self._finish(seq)
            if request is None:
                actions.append(Deliver(member, body, attempt))
            else:
                answers.setdefault(id(request), []).append((body, attempt))
                request.room -= 1
                request.room_bytes -= body.cost()
                if request.room == 0:
                    self._fetches.remove(request)
                    actions.append(FetchAnswer(member, request.fetch_id,
                                               tuple(answers.pop(id(request)))))
        for seq in skipped:
            bisect.insort(self._ready, seq)
        # Fetches that got some events are answered now, not at the end of their wait.
        for request in [f for f in self._fetches if id(f) in answers]:
            self._fetches.remove(request)
            actions.append(FetchAnswer(request.member, request.fetch_id,
                                       tuple(answers.pop(id(request)))))
        return actions

    def _next_taker(self) -> tuple[Member | None, _Fetch | None]:
        """Who takes the next event: the oldest waiting fetch whose member has room
        (pull), or the next member in turn with room (push)."""
        limit = self.config.max_inflight
        if self.config.pull:
            for request in self._fetches:
                if self._members[request.member].inflight < limit or not self.config.ack:
                    return request.member, request
            return None, None
        members = list(self._members)
        for k in range(len(members)):
            member = members[(self._turn + k) % len(members)]
            if self._members[member].inflight < limit or not self.config.ack:
                self._turn = (self._turn + k + 1) % len(members)
                return member, None
        return None, None

    def trace(self, ev: str, **fields: object) -> Record:
        """A trace record to write (docs/TRACES.md)."""
        return Record(ev, tuple(fields.items()))


__all__ = ["Action", "Consumer", "ConsumerConfig", "ConsumerError", "DeadLetter", "Deliver",
           "EventLog", "FetchAnswer", "Member", "Progress", "Record", "Wants"]

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
from collections.abc import Iterable
from dataclasses import dataclass, field

from scribe.consumer_values import (
    MAX_DELAY,
    MAX_FETCH,
    MAX_FETCH_WAIT,
    Action,
    ConsumerConfig,
    ConsumerError,
    DeadLetter,
    Deliver,
    EventLog,
    FetchAnswer,
    Member,
    Progress,
    Record,
    Wants,
)
from scribe.wire_records import EventBody


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


__all__ = ["Consumer"]

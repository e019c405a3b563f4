"""What Scribe keeps on disk, and what waits until it is there.

A node persists the events it retains for a topic, as its root or as a replica of the
root, in one log per topic (the union of both roles: a restarted node loads every log as
replica copies, and adopts them when it owns the topic's key again, as a replica does):
:class:`AppendEvents` when events join the log, :class:`TrimLog` when retention dropped
the oldest, :class:`DropLog` when the node holds nothing of the topic any more, and
:class:`NoteCounter` when it learns the root's counter went past its last event (so a
restarted node never numbers below it).

:class:`Durability` counts the persists as the driver does (see
:mod:`overlay.core.storage`) and holds what must wait for them: the root's own copy of
a reliable event (the publisher is answered only when the root *and* its replicas hold
it on disk) and a replica's confirmation to the root.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from chord.kbr import KbrHost, NodeRef
from overlay.core.storage import StorageOp
from scribe.messages import EventBody, ReplicateAck


@dataclass(slots=True)  # not frozen: one per event retained, and frozen costs on the way
class AppendEvents(StorageOp):
    """``events`` (numbered) join ``topic``'s log; one already there is kept as it is."""

    topic: str
    events: tuple[EventBody, ...]


@dataclass(frozen=True, slots=True)
class TrimLog(StorageOp):
    """``topic``'s log holds no event below ``complete_from`` any more."""

    topic: str
    complete_from: int


@dataclass(frozen=True, slots=True)
class DropLog(StorageOp):
    """This node keeps nothing of ``topic`` any more."""

    topic: str


@dataclass(frozen=True, slots=True)
class NoteCounter(StorageOp):
    """The root of ``topic`` has numbered up to ``seq`` (maybe past the log's events)."""

    topic: str
    seq: int


@dataclass(frozen=True)
class RestoredLog:
    """One topic's log as a store loaded it at start."""

    topic: str
    #: The highest seq the node knew numbered (its last event's, or a NoteCounter's).
    counter: int
    #: Every event from this seq on that the node held is in ``events``.
    complete_from: int
    #: Oldest first, contiguous or not.
    events: tuple[EventBody, ...]

    @property
    def payload_bytes(self) -> int:
        return sum(len(e.payload) for e in self.events)


@dataclass(frozen=True, slots=True)
class RootCopy:
    """The root's own copy of a reliable event: one of the holders its publisher waits
    for."""

    topic: str
    msg_id: str


@dataclass(frozen=True, slots=True)
class ReplicaCopy:
    """A replica's copy: its confirmation goes to the root once it is on disk."""

    root: NodeRef
    ack: ReplicateAck


SyncWaiter = RootCopy | ReplicaCopy


@dataclass
class _MemoryLog:
    counter: int = 0
    complete_from: int = 1
    events: dict[int, EventBody] = field(default_factory=dict)


class MemoryLogs:
    """The topic logs as plain Python data: what applying operations means, for stores
    that keep them in memory (the simulator's) and as the reference the SQLite store is
    tested against (tests/scribe/test_log_stores.py runs both through the same cases)."""

    def __init__(self) -> None:
        self._logs: dict[str, _MemoryLog] = {}

    def apply(self, ops: Sequence[StorageOp]) -> None:
        for op in ops:
            self.apply_one(op)

    def apply_one(self, op: StorageOp) -> None:
        logs = self._logs
        if isinstance(op, AppendEvents):
            log = logs.get(op.topic)
            if log is None:
                first = min(body.seq or 0 for body in op.events)
                log = logs[op.topic] = _MemoryLog(complete_from=first)
            for body in op.events:
                assert body.seq is not None
                log.events.setdefault(body.seq, body)
                log.counter = max(log.counter, body.seq)
        elif isinstance(op, NoteCounter):
            log = logs.setdefault(op.topic, _MemoryLog(complete_from=op.seq + 1))
            log.counter = max(log.counter, op.seq)
        elif isinstance(op, TrimLog):
            log = logs.get(op.topic)
            if log is not None:
                for seq in [s for s in log.events if s < op.complete_from]:
                    del log.events[seq]
                log.complete_from = max(log.complete_from, op.complete_from)
        elif isinstance(op, DropLog):
            logs.pop(op.topic, None)
        else:
            raise TypeError(f"not a topic-log operation: {type(op).__name__}")

    def load(self) -> list[RestoredLog]:
        return [RestoredLog(topic, log.counter, log.complete_from,
                            tuple(log.events[s] for s in sorted(log.events)))
                for topic, log in sorted(self._logs.items())]


class Durability:
    """The persists this node emitted, how far they are synced, and who waits."""

    def __init__(self, host: KbrHost, enabled: bool) -> None:
        self._host = host
        #: Whether the node persists at all (a node without a store acknowledges from
        #: memory, as before durable logs).
        self.enabled = enabled
        self.written = 0
        self.synced = 0
        self._waiting: deque[tuple[int, SyncWaiter]] = deque()

    def write(self, op: StorageOp) -> int:
        """Persist ``op``; its number (0 when the node persists nothing)."""
        if not self.enabled:
            return 0
        self._host.persist(op)
        self.written += 1
        return self.written

    def after(self, write: int, waiter: SyncWaiter) -> bool:
        """Hold ``waiter`` until persist ``write`` is synced; False when it is already
        (the caller goes on at once)."""
        if write <= self.synced:
            return False
        self._waiting.append((write, waiter))
        return True

    def synced_through(self, through: int) -> list[SyncWaiter]:
        """The driver synced persists up to ``through``: the waiters now free, in order."""
        if through > self.written:
            raise ValueError(f"synced through {through}, but only {self.written} persists "
                             "were emitted")
        self.synced = max(self.synced, through)
        freed: list[SyncWaiter] = []
        waiting = self._waiting
        while waiting and waiting[0][0] <= self.synced:
            freed.append(waiting.popleft()[1])
        return freed


__all__ = ["AppendEvents", "DropLog", "Durability", "MemoryLogs", "NoteCounter", "ReplicaCopy",
           "RestoredLog", "RootCopy", "SyncWaiter", "TrimLog"]

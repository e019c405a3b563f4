"""What Scribe keeps on disk, and what waits until it is there.

A node persists the events it retains for a topic, as its root or as a replica of the
root, in one log per topic (the union of both roles: a restarted node loads every log as
replica copies, and adopts them when it owns the topic's key again, as a replica does):
:class:`AppendEvents` when events join the log, :class:`MoveEvents` when a partition
merge renumbered some (``Retention.merge``), :class:`TrimLog` when retention dropped
the oldest, :class:`DropLog` when the node holds nothing of the topic any more, and
:class:`NoteCounter` when it learns the root's counter went past its last event (so a
restarted node never numbers below it).

:class:`Durability` counts the persists as the driver does (see
:mod:`overlay.core.storage`) and holds what must wait for them: the root's own copy of
a reliable event (the publisher is answered only when the root *and* its replicas hold
it on disk) and a replica's confirmation to the root.

A store whose write fails (a full disk, a quota) keeps what :func:`salvage` says of it,
the counters and trims without the events, and the driver calls ``on_storage_failed``:
what waited for those events learns they are not stored. Until a write succeeds again
(or :data:`REFUSE_SECONDS` have passed, when one is tried again) the node is
:meth:`Durability.refusing`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from chord.kbr import KbrHost, NodeRef
from overlay.core.storage import StorageOp
from scribe.consumer_values import Progress
from scribe.publish_messages import ReplicateAck
from scribe.wire_records import EventBody


@dataclass(slots=True)  # not frozen: one per event retained, and frozen costs on the way
class AppendEvents(StorageOp):
    """``events`` (numbered) join ``topic``'s log; one already there is kept as it is."""

    topic: str
    events: tuple[EventBody, ...]


@dataclass(frozen=True, slots=True)
class MoveEvents(StorageOp):
    """Events of ``topic``'s log were renumbered at a partition merge: the rows at the
    seqs ``moved_from`` are gone, ``events`` (their new numbers, and the other side's
    events numbered after them) join the log."""

    topic: str
    moved_from: tuple[int, ...]
    events: tuple[EventBody, ...]

    def __post_init__(self) -> None:
        if not self.events:
            raise ValueError("a move carries the renumbered events")


@dataclass(frozen=True, slots=True)
class SaveConsumer(StorageOp):
    """Durable consumer ``name`` of ``topic`` is as ``progress`` says (replaces what was
    kept of it)."""

    topic: str
    name: str
    progress: Progress
    #: The consumer's filter (FILTERS.md; "" for every event).
    filter: str = ""


@dataclass(frozen=True, slots=True)
class DeleteConsumer(StorageOp):
    """Durable consumer ``name`` of ``topic`` was deleted."""

    topic: str
    name: str


@dataclass(frozen=True)
class RestoredConsumer:
    """One durable consumer as a store loaded it at start."""

    topic: str
    name: str
    progress: Progress
    filter: str = ""


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


@dataclass(frozen=True, slots=True)
class NoteRange(StorageOp):
    """This node owns the keys after ``start`` (its predecessor's id) up to its own id: a
    restarted node learns which keys were its own (scribe.standin)."""

    start: int

    def __post_init__(self) -> None:
        if type(self.start) is not int or self.start < 0:
            raise ValueError(f"a range start is a node id, got {self.start!r}")


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
    #: Wall-clock time of the load, on the clock of the events' ``ts`` (the publisher
    #: daemon's ``time.time()``; the simulator's clock in the simulator). None: unknown,
    #: the events' ages start at the restore.
    loaded_at: float | None = field(default=None, compare=False)

    @property
    def payload_bytes(self) -> int:
        return sum(len(e.payload) for e in self.events)

    def age(self, body: EventBody) -> float:
        """How old ``body`` was at the load: since its publish (``ts``), so the time the
        node was down counts. A ``ts`` ahead of the clock (skew) counts as new."""
        if self.loaded_at is None:
            return 0.0
        return max(0.0, self.loaded_at - body.ts)


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

#: Seconds after a failed write during which reliable publishes are refused before they
#: are numbered, unless a write succeeds meanwhile. Then one is tried again: a node whose
#: store nothing else writes to would otherwise never learn that it has room again.
REFUSE_SECONDS = 1.0


def salvage(ops: Sequence[StorageOp]) -> list[StorageOp]:
    """What a store applies of ``ops`` after it failed to apply them together: every
    operation but the events, whose counters it notes instead (a node restarted from it
    never numbers below a seq it gave, stored or not). Trims and drops free space."""
    kept: list[StorageOp] = []
    for op in ops:
        if isinstance(op, AppendEvents | MoveEvents):
            # (A move not stored leaves its events at their old numbers on disk.)
            if op.events:
                kept.append(NoteCounter(op.topic, max(body.seq or 0 for body in op.events)))
        else:
            kept.append(op)
    return kept


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
        self._consumers: dict[tuple[str, str], tuple[Progress, str]] = {}
        #: Topic -> the first of its stored events damaged (:meth:`damage`).
        self._damaged: dict[str, int] = {}
        #: What the last :meth:`load` refused: (topic, what was wrong), as LogStore says.
        self.dropped: list[tuple[str | None, str]] = []
        #: The last :class:`NoteRange`'s start (None: none).
        self.range_start: int | None = None

    def apply(self, ops: Sequence[StorageOp]) -> None:
        for op in ops:
            self.apply_one(op)

    def salvage(self, ops: Sequence[StorageOp]) -> list[StorageOp]:
        return salvage(ops)

    def apply_one(self, op: StorageOp) -> None:
        logs = self._logs
        if isinstance(op, MoveEvents):
            log = logs.get(op.topic)
            if log is not None:
                for seq in op.moved_from:
                    log.events.pop(seq, None)
            self.apply_one(AppendEvents(op.topic, op.events))
        elif isinstance(op, AppendEvents):
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
        elif isinstance(op, SaveConsumer):
            self._consumers[(op.topic, op.name)] = (op.progress, op.filter)
        elif isinstance(op, DeleteConsumer):
            self._consumers.pop((op.topic, op.name), None)
        elif isinstance(op, NoteRange):
            self.range_start = op.start
        else:
            raise TypeError(f"not a topic-log operation: {type(op).__name__}")

    def consumers(self) -> list[RestoredConsumer]:
        """The durable consumers kept (their logs are :meth:`load`'s)."""
        return [RestoredConsumer(topic, name, progress, filter_text)
                for (topic, name), (progress, filter_text) in sorted(self._consumers.items())]

    def damage(self, topic: str, seq: int) -> None:
        """Corrupt ``topic``'s stored event ``seq`` (a flipped bit, a torn page), for the
        simulator: the next load drops it and what follows in the topic's log and says
        so in :attr:`dropped`, as LogStore's load does with a row whose CRC fails."""
        self._damaged[topic] = min(seq, self._damaged.get(topic, seq))

    def load(self, loaded_at: float | None = None) -> list[RestoredLog]:
        """The logs, as of ``loaded_at`` (:attr:`RestoredLog.loaded_at`)."""
        self.dropped = []
        for topic, seq in sorted(self._damaged.items()):
            log = self._logs.get(topic)
            if log is not None and any(s >= seq for s in log.events):
                log.events = {s: b for s, b in log.events.items() if s < seq}
                self.dropped.append((topic, f"event {seq}: checksum mismatch"))
        self._damaged.clear()
        return [RestoredLog(topic, log.counter, log.complete_from,
                            tuple(log.events[s] for s in sorted(log.events)), loaded_at)
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
        #: The highest persist something waits for (the driver was told: ``want_sync``).
        self.wanted = 0
        self._waiting: deque[tuple[int, SyncWaiter]] = deque()
        #: Writes reported failed, and when the last was while none succeeded since
        #: (None: the store writes).
        self.failures = 0
        self.failed_at: float | None = None

    def refusing(self, now: float) -> bool:
        """Whether a reliable publish is refused before it is numbered (see the module
        docs): the store failed, has written nothing since, and not long ago."""
        return self.failed_at is not None and now < self.failed_at + REFUSE_SECONDS

    def write(self, op: StorageOp) -> int:
        """Persist ``op``; its number (0 when the node persists nothing)."""
        if not self.enabled:
            return 0
        self._host.persist(op)
        self.written += 1
        return self.written

    def after(self, write: int, waiter: SyncWaiter) -> bool:
        """Hold ``waiter`` until persist ``write`` is synced; False when it is already
        (the caller goes on at once). The driver is told that ``write`` is waited for:
        persists nobody waits for may be applied a little later (``SyncWanted``)."""
        if write <= self.synced:
            return False
        self._waiting.append((write, waiter))
        if write > self.wanted:  # once per persist, however many wait for it
            self.wanted = write
            self._host.want_sync(write)
        return True

    def synced_through(self, through: int) -> list[SyncWaiter]:
        """The driver synced persists up to ``through``: the waiters now free, in order."""
        self._check(through, "synced")
        self.synced = max(self.synced, through)
        self.failed_at = None
        return self._through(self.synced)

    def failed_through(self, now: float, through: int) -> list[SyncWaiter]:
        """The driver could not store persists up to ``through`` (those not synced
        yet): the waiters that will never be freed, in order."""
        self._check(through, "failed")
        self.failures += 1
        self.failed_at = now
        return self._through(through)

    def _check(self, through: int, what: str) -> None:
        if through > self.written:
            raise ValueError(f"{what} through {through}, but only {self.written} persists "
                             "were emitted")

    def _through(self, through: int) -> list[SyncWaiter]:
        found: list[SyncWaiter] = []
        waiting = self._waiting
        while waiting and waiting[0][0] <= through:
            found.append(waiting.popleft()[1])
        return found


__all__ = ["REFUSE_SECONDS", "AppendEvents", "DeleteConsumer", "DropLog", "Durability",
           "MemoryLogs", "MoveEvents", "NoteCounter", "NoteRange", "ReplicaCopy",
           "RestoredConsumer", "RestoredLog", "RootCopy", "SaveConsumer", "SyncWaiter",
           "TrimLog", "salvage"]

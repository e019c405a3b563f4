"""Durable topic logs in SQLite (WAL mode), applied by a worker thread with group commit.

:class:`LogStore` is the file: one row per retained event (topic, seq, msg_id, the
event's CBOR and a CRC-32 of it), one per topic (the counter and where its log is
complete from), one per durable consumer (its progress as CBOR, with a CRC-32), one for
the node that wrote the file. It is used from one thread at a
time (the worker's), never from the event loop.

:class:`StorageWorker` is the daemon's side of :mod:`overlay.core.storage`: the driver
hands it each ``Persist`` effect's operation in order (:meth:`StorageWorker.submit`);
its task takes everything submitted so far, applies it in one transaction on a worker
thread (``trio.to_thread``), and tells the core how far it is synced. Operations that
arrive while a transaction is being written go in the next one: one sync for all of
them (group commit), so the rate does not fall to one event per sync.

Damaged files are detected, not served: a file that is not a log of ours, a log another
node wrote, or a row whose CRC does not match raises :class:`StorageError` at load
(rows are checked one by one: a damaged event is reported and dropped with the rest of
its topic's log from it on, the replicas have it).

A write that fails (a full disk, the ``max_bytes`` quota, an I/O error) is not retried
as it was: the worker applies what it can keep of the failed transaction without the
events (:func:`scribe.durability.salvage`: trims and drops, which free space, and every
counter, so that no seq is numbered twice after a restart) and tells the core that the
events up to there are not stored (``on_storage_failed``), so that it refuses what it
waited to acknowledge. Later operations go on as usual: one failed batch never blocks
the ones after it, and the first commit that succeeds ends the failure.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import cbor2
import trio

from overlay.core.framing import CborEncoder
from overlay.core.storage import StorageOp, SyncPolicy
from scribe.consumer_values import Progress
from scribe.durability import (
    AppendEvents,
    DeleteConsumer,
    DropLog,
    MoveEvents,
    NoteCounter,
    NoteRange,
    RestoredConsumer,
    RestoredLog,
    SaveConsumer,
    TrimLog,
    salvage,
)
from scribe.wire_records import EventBody

log = logging.getLogger("overlay.storage")

T = TypeVar("T")

#: Bumped when the schema changes; a file of another version is refused.
SCHEMA_VERSION = 1
LOG_FILE = "topics.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS topics (
    topic TEXT PRIMARY KEY,
    counter INTEGER NOT NULL,
    complete_from INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    topic TEXT NOT NULL,
    seq INTEGER NOT NULL,
    msg_id TEXT NOT NULL,
    body BLOB NOT NULL,
    crc INTEGER NOT NULL,
    PRIMARY KEY (topic, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS consumers (
    topic TEXT NOT NULL,
    name TEXT NOT NULL,
    body BLOB NOT NULL,
    crc INTEGER NOT NULL,
    PRIMARY KEY (topic, name)
) WITHOUT ROWID;
"""


#: A topic's row with its counter raised to the given seq (created with its log complete
#: from the given seq; an existing row keeps where its log is complete from).
_RAISE_COUNTER = ("INSERT INTO topics VALUES (?, ?, ?) ON CONFLICT(topic) DO UPDATE "
                  "SET counter = max(counter, excluded.counter)")


class StorageError(Exception):
    """The store cannot be used as it is: damaged, another node's, or not writable."""


@dataclass
class LoadReport:
    """What :meth:`LogStore.load` found: the logs, and what it refused to serve."""

    logs: list[RestoredLog] = field(default_factory=list)
    #: The durable consumers kept.
    consumers: list[RestoredConsumer] = field(default_factory=list)
    #: (topic, what was wrong): data dropped, to be recovered from replicas (topic None:
    #: the whole file).
    dropped: list[tuple[str | None, str]] = field(default_factory=list)
    ms: float = 0.0
    #: The whole file was refused (moved aside): the node may have held any topic.
    refused: bool = False
    #: Where the keys the node owned began (its predecessor's id; None: not kept).
    range_start: int | None = None


class LogStore:
    """The node's topic logs in one SQLite file (see the module docs)."""

    def __init__(self, path: Path, node: str, policy: SyncPolicy,
                 max_bytes: int | None = None) -> None:
        self.path = path
        self.policy = policy
        #: The quota on the file (None: none), as configured (``[storage] max_bytes``).
        self.max_bytes = max_bytes
        #: Encodes the rows' events (one per event; the store is used by one thread).
        self._encode = CborEncoder()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            # always: the WAL is synced at every commit; interval: by the worker every
            # interval (sync_wal) and at checkpoints; never: by the OS when it chooses.
            synchronous = {"always": "FULL", "interval": "NORMAL", "never": "OFF"}
            self._db.execute(f"PRAGMA synchronous={synchronous[policy.mode]}")
            self._db.executescript(_SCHEMA)
            self._claim(node)
            if max_bytes is not None:
                self._limit(max_bytes)
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"{path}: not a usable topic log ({exc})") from None

    def _claim(self, node: str) -> None:
        rows = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if not rows:
            self._db.executemany("INSERT INTO meta VALUES (?, ?)",
                                 [("schema", str(SCHEMA_VERSION)), ("node", node)])
            return
        if rows.get("schema") != str(SCHEMA_VERSION):
            raise StorageError(f"{self.path}: schema {rows.get('schema')!r}, this daemon "
                               f"reads {SCHEMA_VERSION}")
        if rows.get("node") != node:
            raise StorageError(f"{self.path}: the log of node {rows.get('node')}, not of "
                               f"this node ({node}): a state directory copied from "
                               "another node? Move it away to start empty")

    def _limit(self, max_bytes: int) -> None:
        """SQLite refuses a write that needs a page past ``max_bytes`` with SQLITE_FULL,
        as a full disk (the quota counts whole pages; pages freed by trims and drops are
        used again first). A file already larger keeps its size and does not grow."""
        (page_size,) = self._db.execute("PRAGMA page_size").fetchone()
        self._db.execute(f"PRAGMA max_page_count = {max_bytes // page_size}")

    def close(self) -> None:
        self._db.close()

    # -- writing (the worker thread) ---------------------------------------------------------

    def apply(self, ops: Sequence[StorageOp]) -> None:
        """Apply ``ops`` in one transaction (synced on commit under ``always``)."""
        db = self._db
        # Runs of appends (the common operation, one per event) go in as one statement,
        # with one counter update per topic: half the statements of one op at a time.
        rows: list[tuple[str, int, str, bytearray, int]] = []
        #: topic -> (the first append's lowest seq, the highest seq appended)
        spans: dict[str, tuple[int, int]] = {}

        def flush() -> None:
            if rows:
                db.executemany("INSERT OR IGNORE INTO events VALUES (?, ?, ?, ?, ?)", rows)
                rows.clear()
            for topic, (first, last) in spans.items():
                # complete_from is set by the append that creates the topic's row only.
                db.execute(_RAISE_COUNTER,
                           (topic, last, first))
            spans.clear()

        try:
            db.execute("BEGIN")
            for op in ops:
                if isinstance(op, MoveEvents):
                    flush()  # the rows leave before their new numbers come
                    db.executemany("DELETE FROM events WHERE topic = ? AND seq = ?",
                                   [(op.topic, seq) for seq in op.moved_from])
                if isinstance(op, AppendEvents | MoveEvents):
                    seqs = []
                    for body in op.events:
                        data = _encode_body(body, self._encode)
                        seq = body.seq or 0
                        seqs.append(seq)
                        # A bytearray is bound as a BLOB at once; bytes first go through
                        # sqlite3's adapter look-ups (a sixth of a row's insert, measured).
                        rows.append((op.topic, seq, body.msg_id, bytearray(data),
                                     zlib.crc32(data)))
                    span = spans.get(op.topic)
                    spans[op.topic] = (min(seqs), max(seqs)) if span is None \
                        else (span[0], max(span[1], *seqs))
                else:
                    flush()  # in order: a trim or drop sees the appends before it
                    self._apply_other(op)
            flush()
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def salvage(self, ops: Sequence[StorageOp]) -> list[StorageOp]:
        """What to apply of ``ops`` after they failed together (see the module docs)."""
        return salvage(ops)

    def _apply_other(self, op: StorageOp) -> None:
        db = self._db
        if isinstance(op, NoteCounter):
            db.execute(_RAISE_COUNTER,
                       (op.topic, op.seq, op.seq + 1))
        elif isinstance(op, TrimLog):
            db.execute("DELETE FROM events WHERE topic = ? AND seq < ?",
                       (op.topic, op.complete_from))
            db.execute("UPDATE topics SET complete_from = max(complete_from, ?) "
                       "WHERE topic = ?", (op.complete_from, op.topic))
        elif isinstance(op, DropLog):
            db.execute("DELETE FROM events WHERE topic = ?", (op.topic,))
            db.execute("DELETE FROM topics WHERE topic = ?", (op.topic,))
        elif isinstance(op, SaveConsumer):
            data = cbor2.dumps([op.progress.to_wire(), op.filter])
            db.execute("INSERT OR REPLACE INTO consumers VALUES (?, ?, ?, ?)",
                       (op.topic, op.name, data, zlib.crc32(data)))
        elif isinstance(op, DeleteConsumer):
            db.execute("DELETE FROM consumers WHERE topic = ? AND name = ?",
                       (op.topic, op.name))
        elif isinstance(op, NoteRange):
            db.execute("INSERT OR REPLACE INTO meta VALUES ('range_start', ?)",
                       (str(op.start),))
        else:
            raise TypeError(f"not a topic-log operation: {type(op).__name__}")

    def sync_wal(self) -> None:
        """fsync the write-ahead log (``interval``: what was acknowledged before is on disk
        now). Through a descriptor of its own: it syncs the file whatever connection
        wrote it, and needs no lock against a commit under way (a checkpoint would copy
        pages and wait for it)."""
        wal = self.path.with_name(self.path.name + "-wal")
        try:
            fd = os.open(wal, os.O_RDONLY)
        except FileNotFoundError:
            return  # nothing written since the last checkpoint (which synced)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- reading -------------------------------------------------------------------------------

    def load(self) -> LoadReport:
        """Every topic's log, checked row by row (see the module docs)."""
        started = time.perf_counter()
        loaded_at = time.time()  # the clock of the events' ts: their ages (RestoredLog.age)
        report = LoadReport()
        try:
            topics = self._db.execute(
                "SELECT topic, counter, complete_from FROM topics ORDER BY topic").fetchall()
            for topic, counter, complete_from in topics:
                restored, problem = self._load_topic(topic, counter, complete_from,
                                                     loaded_at)
                report.logs.append(restored)
                if problem is not None:
                    report.dropped.append((topic, problem))
            self._load_consumers(report)
            self._load_range(report)
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"{self.path}: damaged ({exc})") from None
        report.ms = (time.perf_counter() - started) * 1000
        return report

    def _load_range(self, report: LoadReport) -> None:
        """The key range's start, if one was kept. A damaged one is dropped and reported:
        the node then waits for nobody (as a node that never kept one)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'range_start'").fetchone()
        if row is None:
            return
        text = row[0]
        if isinstance(text, str) and text.isdigit():
            report.range_start = int(text)
        else:
            report.dropped.append((None, f"range start: undecodable ({str(text)[:40]!r})"))
            self._db.execute("DELETE FROM meta WHERE key = 'range_start'")

    def _load_consumers(self, report: LoadReport) -> None:
        """Every durable consumer's progress, checked like the events: a damaged row is
        dropped (the topic's replicas hold the consumer too) and reported."""
        rows = self._db.execute("SELECT topic, name, body, crc FROM consumers "
                                "ORDER BY topic, name").fetchall()
        for topic, name, data, crc in rows:
            found = _checked_row(data, crc, f"consumer {name}", _decode_consumer)
            if isinstance(found, str):
                report.dropped.append((topic, found))
                self._db.execute("DELETE FROM consumers WHERE topic = ? AND name = ?",
                                 (topic, name))
                continue
            progress, filter_text = found
            report.consumers.append(RestoredConsumer(topic, name, progress, filter_text))

    def _load_topic(self, topic: str, counter: int, complete_from: int, loaded_at: float
                    ) -> tuple[RestoredLog, str | None]:
        events: list[EventBody] = []
        problem = None
        rows = self._db.execute("SELECT seq, msg_id, body, crc FROM events WHERE topic = ? "
                                "ORDER BY seq", (topic,))
        for seq, msg_id, data, crc in rows:
            body = _checked_body(topic, seq, msg_id, data, crc)
            if isinstance(body, str):
                # Keep what comes before the damage; the rest comes back from replicas
                # (the node holds them as copies complete only up to there).
                problem = body
                self._db.execute("DELETE FROM events WHERE topic = ? AND seq >= ?",
                                 (topic, seq))
                break
            events.append(body)
        if problem is not None:
            # The log is complete up to the damage only: what follows is not served.
            counter = max(counter, events[-1].seq or 0) if events else counter
        return RestoredLog(topic, counter, complete_from, tuple(events), loaded_at), problem


def _encode_body(body: EventBody, encode: CborEncoder) -> bytes:
    """What a row stores of an event beyond its topic and seq (in their own columns): a
    CBOR array, cheaper to make than the event's wire map (one per event, on the worker
    thread that shares the interpreter with the event loop)."""
    row: tuple[Any, ...] = (body.msg_id, body.attrs, body.payload, body.publisher, body.ts)
    if body.prev is not None:
        return encode((*row, body.ttl, body.prev))
    return encode(row if body.ttl is None else (*row, body.ttl))


def _checked_row(data: object, crc: int, what: str, decode: Callable[[Any], T]) -> T | str:
    """A stored row's CBOR decoded and checked by ``decode``, or what is wrong with it
    (``what``: the row, for the report). Any decoding or checking failure is damage."""
    if not isinstance(data, bytes) or zlib.crc32(data) != crc:
        return f"{what}: checksum mismatch"
    try:
        return decode(cbor2.loads(data))
    except Exception as exc:  # any decoding or checking failure is damage
        return f"{what}: undecodable ({type(exc).__name__})"


def _decode_consumer(row: Any) -> tuple[Progress, str]:
    wire, filter_text = row
    if type(filter_text) is not str:
        raise TypeError("the filter is text")
    return Progress.from_wire(wire), filter_text


def _checked_body(topic: str, seq: int, msg_id: str, data: bytes, crc: int
                  ) -> EventBody | str:
    """The stored event, or what is wrong with it."""
    def decode(row: Any) -> EventBody:
        # Five fields, the ttl sixth when the event has one or a prev, the prev seventh
        # when it has one (rows written before events had a prev have five or six).
        stored_id, attrs, payload, publisher, ts, *rest = row
        if len(rest) > 2:
            raise ValueError("an event row has 5 to 7 fields")
        # EventBody checks every field as it does a peer's (a ValueError if one is bad).
        return EventBody(topic, stored_id, seq, attrs, payload, publisher, ts, *rest)

    body = _checked_row(data, crc, f"event {seq}", decode)
    if isinstance(body, EventBody) and body.msg_id != msg_id:
        return f"event {seq}: does not match its row"
    return body


#: The core's ``on_synced``: every operation up to this number is on disk.
Synced = Callable[[int], None]
#: The core's ``on_storage_failed``: the events of operations up to this number that
#: were not reported synced are not stored (why: the error's text).
Failed = Callable[[int, str], None]


class StorageWorker:
    """Applies a core's storage operations in order, in group commits, on a thread."""

    def __init__(self, store: LogStore) -> None:
        self.store = store
        self._queued: list[StorageOp] = []
        #: Operations submitted so far (the core's persist count).
        self.submitted = 0
        self.synced = 0
        self.commits = 0
        #: Transactions that failed, and the last one's error while no commit has
        #: succeeded since (None: the store is writing).
        self.failures = 0
        self.failing: str | None = None
        self._wake = trio.Event()

    def submit(self, op: StorageOp) -> None:
        self._queued.append(op)
        self.submitted += 1
        self._wake.set()

    async def run(self, on_synced: Synced, on_failed: Failed) -> None:
        """Until cancelled: apply what was submitted, one transaction at a time."""
        policy = self.store.policy
        async with trio.open_nursery() as nursery:
            if policy.mode == "interval":
                nursery.start_soon(self._sync_every, policy.interval_ms / 1000)
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                ops, self._queued = self._queued, []
                through = self.submitted
                try:
                    await trio.to_thread.run_sync(self.store.apply, ops)
                except (sqlite3.Error, OSError) as exc:
                    await self._salvage(ops, str(exc))
                    on_failed(through, str(exc))
                    continue
                self.commits += 1
                self.synced = through
                if self.failing is not None:
                    log.warning("storage: writing again after %d failed transactions",
                                self.failures)
                    self.failing = None
                on_synced(through)

    async def _salvage(self, ops: list[StorageOp], error: str) -> None:
        """``ops`` failed together: apply what can be kept of them. If even that fails,
        it goes first in the next transaction, after a pause (a full disk is not
        retried at the rate operations come)."""
        self.failures += 1
        if self.failing != error:  # once per failure, not per transaction
            log.error("storage: a write failed (%s); its events are not stored, reliable "
                      "publishes are refused (storage_error) until a write succeeds", error)
        self.failing = error
        kept = self.store.salvage(ops)
        try:
            await trio.to_thread.run_sync(self.store.apply, kept)
        except (sqlite3.Error, OSError) as exc:
            self.failures += 1
            log.error("storage: keeping the counters and trims failed too (%s); "
                      "retried", exc)
            self._queued = kept + self._queued
            await trio.sleep(0.1)
            self._wake.set()
        else:
            self.commits += 1

    async def _sync_every(self, seconds: float) -> None:
        while True:
            await trio.sleep(seconds)
            try:
                await trio.to_thread.run_sync(self.store.sync_wal)
            except OSError as exc:
                log.error("storage: syncing the log failed (%s)", exc)

    def stats(self) -> dict[str, int | str | None]:
        """``failing``: the last error while no commit has succeeded since (None: the
        store is writing)."""
        return {"submitted": self.submitted, "synced": self.synced, "commits": self.commits,
                "failures": self.failures, "failing": self.failing,
                "max_bytes": self.store.max_bytes}


__all__ = ["LOG_FILE", "LoadReport", "LogStore", "StorageError", "StorageWorker"]

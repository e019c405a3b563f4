"""Durable topic logs in SQLite (WAL mode), applied by a worker thread with group commit.

:class:`LogStore` is the file: one row per run of a topic's events appended in one
transaction (its first and last seq, the events' CBOR and a CRC-32 of it, up to
``RUN_BYTES`` of events a row: SQLite's cost is per row, and one row per event was most
of the storage thread's work per event), one per topic (the counter and where its log
is complete from), one per durable consumer (its progress as CBOR, with a CRC-32), one
for the node that wrote the file. It is used from one thread at a time (the worker's),
never from the event loop. A file of schema 1 (one row per event) is converted when it
is opened.

Its writer, :class:`overlay.runtime.storage_worker.StorageWorker`, applies a core's
operations in group commits on a worker thread.

Damaged files are detected, not served: a file that is not a log of ours, a log another
node wrote, or a row whose CRC does not match raises :class:`StorageError` at load
(rows are checked one by one: a damaged run is reported and dropped with the rest of
its topic's log from its first event on, the replicas have it).

"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import cbor2

from overlay.core.framing import CborEncoder
from overlay.core.storage import StorageOp, SyncPolicy
from overlay.runtime.log_rows import (
    checked_body_v1,
    checked_row,
    checked_run,
    decode_consumer,
    event_row,
)
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

#: Bumped when the schema changes; a file of another version is refused (schema 1 is
#: converted).
SCHEMA_VERSION = 2
LOG_FILE = "topics.sqlite3"
#: A run's row is closed once its events reach this many bytes (``EventBody.cost``, the
#: size model's weight: payload, attributes and what is around them; an event larger
#: than that is a run of its own): a trim frees a run once all of its events are
#: trimmed, so this bounds what a topic keeps on disk beyond its retention.
RUN_BYTES = 64 * 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS topics (
    topic TEXT PRIMARY KEY,
    counter INTEGER NOT NULL,
    complete_from INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS consumers (
    topic TEXT NOT NULL,
    name TEXT NOT NULL,
    body BLOB NOT NULL,
    crc INTEGER NOT NULL,
    PRIMARY KEY (topic, name)
) WITHOUT ROWID;
"""

#: Events in runs (schema 2): each row holds events of one topic appended together, in
#: the order they were appended; its rowid orders the rows as written. An event at a
#: seq another row written before holds is ignored (the first kept stands, as a log
#: keeps it), and a trim deletes the rows all of whose events it dropped.
_RUNS = """
CREATE TABLE IF NOT EXISTS runs (
    topic TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    crc INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_of_topic ON runs (topic, last_seq);
"""

_INSERT_RUN = "INSERT INTO runs VALUES (?, ?, ?, ?, ?)"


def _runs(events: Iterable[EventBody]) -> Iterator[list[EventBody]]:
    """``events``, in their order, cut into runs each closed once its events weigh
    ``RUN_BYTES`` (``EventBody.cost``, the size model's weight: attributes too)."""
    run: list[EventBody] = []
    size = 0
    for body in events:
        run.append(body)
        size += body.cost()
        if size >= RUN_BYTES:
            yield run
            run, size = [], 0
    if run:
        yield run

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
        #: Encodes the rows' runs of events (the store is used by one thread).
        self._encode = CborEncoder()
        #: What converting a schema-1 file dropped as damaged: the next load reports it.
        self._upgrade_dropped: list[tuple[str, str]] = []
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
            self._create_runs()
            self._db.executemany("INSERT INTO meta VALUES (?, ?)",
                                 [("schema", str(SCHEMA_VERSION)), ("node", node)])
            return
        if rows.get("node") != node:
            raise StorageError(f"{self.path}: the log of node {rows.get('node')}, not of "
                               f"this node ({node}): a state directory copied from "
                               "another node? Move it away to start empty")
        if rows.get("schema") == "1":
            self._upgrade_from_1()
        elif rows.get("schema") != str(SCHEMA_VERSION):
            raise StorageError(f"{self.path}: schema {rows.get('schema')!r}, this daemon "
                               f"reads {SCHEMA_VERSION}")

    def _create_runs(self) -> None:
        """The runs table and its index (statement by statement: ``executescript``
        would commit a transaction under way)."""
        for statement in filter(str.strip, _RUNS.split(";")):
            self._db.execute(statement)

    def _upgrade_from_1(self) -> None:
        """Convert a schema-1 file (one row per event) to runs, in one transaction. Its
        rows are checked as its load did: a damaged one is dropped with what follows in
        its topic's log, and reported by the next :meth:`load`."""
        db = self._db
        db.execute("BEGIN")
        try:
            self._create_runs()
            topics = [t for (t,) in db.execute("SELECT DISTINCT topic FROM events "
                                               "ORDER BY topic").fetchall()]
            for topic in topics:
                # A run written at a time, from the rows as the cursor gives them: a log
                # may be larger than memory allows twice.
                for run in _runs(self._events_v1(topic)):
                    db.execute(_INSERT_RUN, self._run_row(topic, run))
            db.execute("DROP TABLE events")
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema'",
                       (str(SCHEMA_VERSION),))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        log.warning("storage: %s converted from schema 1 to %d", self.path, SCHEMA_VERSION)

    def _events_v1(self, topic: str) -> Iterator[EventBody]:
        """``topic``'s events in a schema-1 file, in seq order, up to a damaged row (noted
        for the next :meth:`load`'s report)."""
        for seq, msg_id, data, crc in self._db.execute(
                "SELECT seq, msg_id, body, crc FROM events WHERE topic = ? ORDER BY seq",
                (topic,)):
            body = checked_body_v1(topic, seq, msg_id, data, crc)
            if isinstance(body, str):
                self._upgrade_dropped.append((topic, body))
                return
            yield body

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
        # A topic's appends (the common operation) go in as runs, one row each, with one
        # counter update per topic.
        appended: dict[str, list[EventBody]] = {}
        #: topic -> the lowest seq of its first append since the last flush
        first_of: dict[str, int] = {}

        def flush() -> None:
            if not appended:
                return
            for topic, events in appended.items():
                db.executemany(_INSERT_RUN, self._run_rows(topic, events))
                # complete_from is set by the append that creates the topic's row only.
                db.execute(_RAISE_COUNTER,
                           (topic, max(b.seq or 0 for b in events), first_of[topic]))
            appended.clear()
            first_of.clear()

        try:
            db.execute("BEGIN")
            for op in ops:
                if isinstance(op, MoveEvents):
                    flush()  # the events leave before their new numbers come
                    self._remove(op.topic, set(op.moved_from))
                if isinstance(op, AppendEvents | MoveEvents):
                    if op.events:
                        if op.topic not in appended:
                            appended[op.topic] = []
                            first_of[op.topic] = min(b.seq or 0 for b in op.events)
                        appended[op.topic].extend(op.events)
                else:
                    flush()  # in order: a trim or drop sees the appends before it
                    self._apply_other(op)
            flush()
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _run_rows(self, topic: str, events: Sequence[EventBody]
                  ) -> list[tuple[str, int, int, bytearray, int]]:
        """``events`` (in the order appended) as rows of runs (:func:`_runs`)."""
        return [self._run_row(topic, run) for run in _runs(events)]

    def _run_row(self, topic: str, events: Sequence[EventBody]
                 ) -> tuple[str, int, int, bytearray, int]:
        data = self._encode([event_row(body) for body in events])
        seqs = [body.seq or 0 for body in events]
        # A bytearray is bound as a BLOB at once; bytes first go through sqlite3's
        # adapter look-ups.
        return topic, min(seqs), max(seqs), bytearray(data), zlib.crc32(data)

    def _remove(self, topic: str, seqs: set[int]) -> None:
        """Take the events at ``seqs`` out of ``topic``'s runs (a merge moved them): each
        run holding one is written again without it, keeping its place in write order.
        A damaged run is left as it is (its load reports it)."""
        if not seqs:
            return
        db = self._db
        found = db.execute("SELECT rowid, body, crc FROM runs WHERE topic = ? AND "
                           "last_seq >= ? AND first_seq <= ?",
                           (topic, min(seqs), max(seqs))).fetchall()
        for rowid, data, crc in found:
            if zlib.crc32(data) != crc:
                continue
            rows = cbor2.loads(data)
            kept = [row for row in rows if row[0] not in seqs]
            if len(kept) == len(rows):
                continue
            if not kept:
                db.execute("DELETE FROM runs WHERE rowid = ?", (rowid,))
                continue
            kept_data = self._encode(kept)
            db.execute("UPDATE runs SET first_seq = ?, last_seq = ?, body = ?, crc = ? "
                       "WHERE rowid = ?", (min(r[0] for r in kept), max(r[0] for r in kept),
                                           bytearray(kept_data), zlib.crc32(kept_data),
                                           rowid))

    def salvage(self, ops: Sequence[StorageOp]) -> list[StorageOp]:
        """What to apply of ``ops`` after they failed together (see the module docs)."""
        return salvage(ops)

    def _apply_other(self, op: StorageOp) -> None:
        db = self._db
        if isinstance(op, NoteCounter):
            db.execute(_RAISE_COUNTER,
                       (op.topic, op.seq, op.seq + 1))
        elif isinstance(op, TrimLog):
            # A run part of which is kept stays whole; the load skips its trimmed events.
            db.execute("DELETE FROM runs WHERE topic = ? AND last_seq < ?",
                       (op.topic, op.complete_from))
            db.execute("UPDATE topics SET complete_from = max(complete_from, ?) "
                       "WHERE topic = ?", (op.complete_from, op.topic))
        elif isinstance(op, DropLog):
            db.execute("DELETE FROM runs WHERE topic = ?", (op.topic,))
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
        report.dropped.extend(self._upgrade_dropped)
        self._upgrade_dropped = []
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
            found = checked_row(data, crc, f"consumer {name}", decode_consumer)
            if isinstance(found, str):
                report.dropped.append((topic, found))
                self._db.execute("DELETE FROM consumers WHERE topic = ? AND name = ?",
                                 (topic, name))
                continue
            progress, filter_text = found
            report.consumers.append(RestoredConsumer(topic, name, progress, filter_text))

    def _load_topic(self, topic: str, counter: int, complete_from: int, loaded_at: float
                    ) -> tuple[RestoredLog, str | None]:
        held: dict[int, EventBody] = {}
        #: The first seq of the lowest damaged run, and what was wrong with it.
        damage: tuple[int, str] | None = None
        db = self._db
        # Row by row from the cursor, not fetched at once: a topic's runs may be most of
        # the file, and only one run's blob need be in memory beside the events.
        rows = db.execute("SELECT first_seq, last_seq, body, crc FROM runs WHERE topic = ? "
                          "ORDER BY rowid", (topic,))
        for first, last, data, crc in rows:
            found = checked_run(topic, first, last, data, crc)
            if isinstance(found, str):
                if damage is None or first < damage[0]:
                    damage = (first, found)
                continue
            for body in found:
                seq = body.seq or 0
                if seq >= complete_from:
                    held.setdefault(seq, body)  # the first written stands
        problem = None
        if damage is not None:
            # Keep what comes before the damage, written again as runs; the rest comes
            # back from replicas (the node holds them as copies complete only up to
            # there). The log is complete up to the damage only: what follows is not
            # served.
            problem = damage[1]
            held = {seq: body for seq, body in held.items() if seq < damage[0]}
            kept = [held[seq] for seq in sorted(held)]
            with db:  # one transaction: a crash here leaves the log as it was
                db.execute("BEGIN")
                db.execute("DELETE FROM runs WHERE topic = ?", (topic,))
                db.executemany(_INSERT_RUN, self._run_rows(topic, kept))
            counter = max(counter, kept[-1].seq or 0) if kept else counter
        events = tuple(held[seq] for seq in sorted(held))
        return RestoredLog(topic, counter, complete_from, events, loaded_at), problem


__all__ = ["LOG_FILE", "RUN_BYTES", "LoadReport", "LogStore", "StorageError"]

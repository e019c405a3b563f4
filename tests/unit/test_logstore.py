"""The topic-log stores: SQLite (the daemon's) and MemoryLogs (the simulator's, and the
reference) give the same logs for the same operations; damaged files are detected and
never served."""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import cbor2
import pytest

from overlay.core.storage import StorageOp, SyncPolicy
from overlay.runtime.config import ConfigError, build_config
from overlay.runtime.logstore import LOG_FILE, RUN_BYTES, LogStore, StorageError
from scribe.consumer_values import ConsumerConfig, Progress
from scribe.durability import (
    AppendEvents,
    DeleteConsumer,
    DropLog,
    MemoryLogs,
    MoveEvents,
    NoteCounter,
    NoteRange,
    RestoredConsumer,
    RestoredLog,
    SaveConsumer,
    TrimLog,
)
from scribe.wire_records import EventBody

NODE = "ab" * 16


def body(topic: str, seq: int, payload: bytes = b"p") -> EventBody:
    return EventBody(topic, f"{seq:032x}", seq, {"n": seq, "s": "x"}, payload, "cd" * 16,
                     1700000000.0 + seq)


def linked(seq: int, ttl: float | None = None) -> EventBody:
    """``seq``'s event naming the one before it (``prev``), with a ttl or none."""
    return replace(body("t", seq), prev=f"{seq - 1:032x}", ttl=ttl)


def renumbered(seq: int, to: int) -> EventBody:
    """``seq``'s event moved to ``to`` (a partition merge)."""
    return replace(body("t", seq), seq=to)


#: Operation sequences every store must give the same logs for.
CASES: dict[str, list[StorageOp]] = {
    "appends out of order, repeated": [
        AppendEvents("t", (body("t", 3), body("t", 4))),
        AppendEvents("t", (body("t", 5),)),
        AppendEvents("t", (body("t", 4),)),
    ],
    "a later event at a held seq is ignored": [
        AppendEvents("t", (body("t", 3), body("t", 4))),
        AppendEvents("t", (body("t", 5),)),
        AppendEvents("t", (replace(body("t", 6), seq=4),)),
    ],
    "trim then append": [
        AppendEvents("t", tuple(body("t", s) for s in range(1, 11))),
        TrimLog("t", 6),
        AppendEvents("t", (body("t", 11),)),
        TrimLog("t", 3),  # never backwards
    ],
    "counter beyond the events": [
        AppendEvents("a", (body("a", 1),)),
        NoteCounter("a", 40),
        NoteCounter("b", 7),
        NoteCounter("a", 12),
    ],
    "drop": [
        AppendEvents("a", (body("a", 1),)),
        AppendEvents("b", (body("b", 1),)),
        DropLog("a"),
    ],
    "large payload": [AppendEvents("big", (body("big", 1, b"\x00" * 1_000_000),))],
    # A partition merge moved 2 and 3 (and the other side's event) after the counter 4.
    "move": [
        AppendEvents("t", tuple(body("t", s) for s in range(1, 5))),
        MoveEvents("t", (2, 3), (renumbered(2, 5), renumbered(3, 6), body("t", 7))),
    ],
    # Every event of the second append moves (its run goes), then one of the first's.
    "moves that empty a run": [
        AppendEvents("t", (body("t", 1), body("t", 2))),
        AppendEvents("t", (body("t", 3), body("t", 4))),
        MoveEvents("t", (3, 4), (renumbered(3, 5), renumbered(4, 6))),
        MoveEvents("t", (1,), (renumbered(1, 7),)),
    ],
    # Rows of five fields (no ttl, no prev), six (a ttl), seven (a prev, with or without
    # a ttl): an event keeps the link to the one before it across a restart.
    "links and ttls": [
        AppendEvents("t", (body("t", 1), linked(2), linked(3, 60.0),
                           replace(body("t", 4), ttl=5.0))),
    ],
}



def memory_logs(ops: list[StorageOp], tmp_path: Path) -> list[RestoredLog]:
    logs = MemoryLogs()
    logs.apply(ops)
    return logs.load()


def sqlite_logs(ops: list[StorageOp], tmp_path: Path) -> list[RestoredLog]:
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    store.apply(ops[: len(ops) // 2])
    store.apply(ops[len(ops) // 2:])  # across two transactions
    store.close()
    reopened = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())  # as after a restart
    report = reopened.load()
    reopened.close()
    assert report.dropped == []
    return report.logs


Store = Callable[[list[StorageOp], Path], list[RestoredLog]]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("store", [memory_logs, sqlite_logs], ids=["memory", "sqlite"])
def test_stores_agree_on_every_case(store: Store, case: str, tmp_path: Path) -> None:
    expected = {
        "appends out of order, repeated": [RestoredLog("t", 5, 3, tuple(
            body("t", s) for s in (3, 4, 5)))],
        "a later event at a held seq is ignored": [RestoredLog("t", 5, 3, tuple(
            body("t", s) for s in (3, 4, 5)))],
        "trim then append": [RestoredLog("t", 11, 6, tuple(body("t", s) for s in range(6, 12)))],
        "counter beyond the events": [RestoredLog("a", 40, 1, (body("a", 1),)),
                                      RestoredLog("b", 7, 8, ())],
        "drop": [RestoredLog("b", 1, 1, (body("b", 1),))],
        "large payload": [RestoredLog("big", 1, 1, (body("big", 1, b"\x00" * 1_000_000),))],
        "move": [RestoredLog("t", 7, 1, (body("t", 1), body("t", 4), renumbered(2, 5),
                                         renumbered(3, 6), body("t", 7)))],
        "moves that empty a run": [RestoredLog("t", 7, 1, (
            body("t", 2), renumbered(3, 5), renumbered(4, 6), renumbered(1, 7)))],
        "links and ttls": [RestoredLog("t", 4, 1, (body("t", 1), linked(2), linked(3, 60.0),
                                                   replace(body("t", 4), ttl=5.0)))],
    }[case]
    assert store(CASES[case], tmp_path) == expected


def filled_store(tmp_path: Path, count: int = 20) -> Path:
    """Topic t's events 1..count in runs of seven (one transaction each), u's one."""
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    for first in range(1, count + 1, 7):
        store.apply([AppendEvents("t", tuple(body("t", s) for s in
                                             range(first, min(first + 7, count + 1))))])
    store.apply([AppendEvents("u", (body("u", 1),))])
    store.close()
    return tmp_path / LOG_FILE


def runs_of(path: Path, topic: str) -> list[tuple[int, int]]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT first_seq, last_seq FROM runs WHERE topic = ? "
                          "ORDER BY rowid", (topic,)).fetchall()
    finally:
        db.close()


def rewrite_run(path: Path, first: int, data: bytes, crc: int | None = None) -> None:
    """Put ``data`` (with its CRC, or ``crc``) in topic t's run that starts at ``first``."""
    db = sqlite3.connect(path)
    db.execute("UPDATE runs SET body = ?, crc = ? WHERE topic = 't' AND first_seq = ?",
               (data, zlib.crc32(data) if crc is None else crc, first))
    db.commit()
    db.close()


def test_a_flipped_bit_in_a_run_drops_it_and_what_follows_in_its_topic(
        tmp_path: Path) -> None:
    path = filled_store(tmp_path)
    assert runs_of(path, "t") == [(1, 7), (8, 14), (15, 20)]
    db = sqlite3.connect(path)
    data, crc = db.execute("SELECT body, crc FROM runs WHERE topic = 't' AND first_seq = 8"
                           ).fetchone()
    db.close()
    rewrite_run(path, 8, bytes([data[0]]) + bytes([data[1] ^ 0x01]) + data[2:], crc)
    store = LogStore(path, NODE, SyncPolicy())
    report = store.load()
    assert report.dropped == [("t", "events 8-14: checksum mismatch")]
    logs = {log.topic: log for log in report.logs}
    assert [e.seq for e in logs["t"].events] == list(range(1, 8))
    assert logs["t"].counter == 20  # never numbered below what it knew
    assert [e.seq for e in logs["u"].events] == [1]  # other topics untouched
    # The damaged runs are gone: the next start serves no damage, and reports none.
    store.close()
    assert runs_of(path, "t") == [(1, 7)]
    again = LogStore(path, NODE, SyncPolicy())
    assert [e.seq for e in again.load().logs[0].events] == list(range(1, 8))
    assert again.load().dropped == []


def run_data(rows: list[list[object]]) -> bytes:
    return cbor2.dumps(rows)


def event_row(seq: int, extra: int = 0) -> list[object]:
    """Seq ``seq``'s event as a run stores it, with ``extra`` of ttl, prev, one more."""
    return [seq, f"{seq:032x}", {}, b"p", "cd" * 16, 1700000000.0 + seq, None,
            f"{seq - 1:032x}", None][:6 + extra]


@pytest.mark.parametrize(("rows", "wrong"), [
    ([event_row(s, 2) for s in range(8, 15)], None),  # a ttl (none) and a prev: fine
    ([event_row(s, 1) for s in range(8, 15)], None),  # a ttl only: fine
    ([event_row(8, 3)] + [event_row(s) for s in range(9, 15)], "ValueError"),  # 9 fields
    ([[*event_row(8, 1), "not hex"]] + [event_row(s) for s in range(9, 15)], "ValueError"),
    ([event_row(s) for s in range(8, 16)], "ValueError"),  # 15: past the run's last seq
    ([event_row(s) for s in range(7, 15)], "ValueError"),  # 7: before its first
    ([], "ValueError"),  # no event
    ({"8": event_row(8)}, "ValueError"),  # not an array
    ([[8.0, *event_row(8)[1:]]], "ValueError"),  # a seq that is no integer
], ids=["prev", "ttl", "nine fields", "bad prev", "past last", "before first", "empty",
        "map", "float seq"])
def test_a_run_that_is_not_events_within_its_seqs_is_damage(
        tmp_path: Path, rows: list[list[object]], wrong: str | None) -> None:
    # Checksummed right but not a run of events: each six fields and at most a ttl and
    # a prev, its seq within the run's. (A prev that is no msg_id is refused as a
    # peer's would be.)
    path = filled_store(tmp_path)
    rewrite_run(path, 8, run_data(rows))
    report = LogStore(path, NODE, SyncPolicy()).load()
    dropped = [] if wrong is None else [("t", f"events 8-14: undecodable ({wrong})")]
    assert report.dropped == dropped
    served = [e.seq for e in report.logs[0].events]
    assert served == (list(range(1, 21)) if wrong is None else list(range(1, 8)))


@pytest.mark.parametrize(("short", "runs"), [
    (1, [(1, 3)]),  # the first two weigh one byte less than RUN_BYTES: one run
    (0, [(1, 2), (3, 3)]),  # exactly RUN_BYTES: the run is closed
], ids=["under", "at"])
def test_a_run_is_closed_when_its_events_weigh_run_bytes(
        tmp_path: Path, short: int, runs: list[tuple[int, int]]) -> None:
    # Weighed as the size model weighs them (EventBody.cost): the second event's payload
    # is chosen so that the first two weigh RUN_BYTES - short (payloads of one CBOR
    # length class, so the overhead found with a probe holds).
    first = body("t", 1, b"x" * (RUN_BYTES // 2))
    overhead = body("t", 2, b"x" * (RUN_BYTES // 2)).cost() - RUN_BYTES // 2
    second = body("t", 2, b"x" * (RUN_BYTES - short - first.cost() - overhead))
    assert first.cost() + second.cost() == RUN_BYTES - short
    events = (first, second, body("t", 3))
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    store.apply([AppendEvents("t", events)])
    assert runs_of(tmp_path / LOG_FILE, "t") == runs
    assert store.load().logs[0].events == events
    store.close()


def test_a_run_is_bounded_by_its_events_bytes_not_their_payloads_alone(
        tmp_path: Path) -> None:
    # Events with large attributes and no payload: about 20 kB each, so the fourth
    # passes RUN_BYTES and closes the run; one event past the bound is a run of its own.
    events = tuple(EventBody("t", f"{seq:032x}", seq, {"s": "y" * 20_000}, b"", "cd" * 16,
                             1700000000.0) for seq in range(1, 6))
    assert sum(e.cost() for e in events[:3]) < RUN_BYTES <= sum(e.cost() for e in events[:4])
    big = (body("u", 1, b"x" * (RUN_BYTES + 1)), body("u", 2), body("u", 3))
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    store.apply([AppendEvents("t", events), AppendEvents("u", big)])
    assert runs_of(tmp_path / LOG_FILE, "t") == [(1, 4), (5, 5)]
    assert runs_of(tmp_path / LOG_FILE, "u") == [(1, 1), (2, 3)]
    assert [log.events for log in store.load().logs] == [events, big]
    store.close()


def v1_file(path: Path, rows: list[tuple[str, int, bytes]]) -> None:
    """A schema-1 file (one row per event, its CBOR without the seq) of node NODE."""
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE topics (topic TEXT PRIMARY KEY, counter INTEGER NOT NULL,
                             complete_from INTEGER NOT NULL);
        CREATE TABLE events (topic TEXT NOT NULL, seq INTEGER NOT NULL,
                             msg_id TEXT NOT NULL, body BLOB NOT NULL, crc INTEGER NOT NULL,
                             PRIMARY KEY (topic, seq)) WITHOUT ROWID;
        CREATE TABLE consumers (topic TEXT NOT NULL, name TEXT NOT NULL, body BLOB NOT NULL,
                                crc INTEGER NOT NULL, PRIMARY KEY (topic, name)) WITHOUT ROWID;
    """)
    db.executemany("INSERT INTO meta VALUES (?, ?)", [("schema", "1"), ("node", NODE)])
    db.executemany("INSERT INTO topics VALUES (?, ?, ?)", [("t", 9, 2), ("u", 1, 1)])
    db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                   [(topic, seq, f"{seq:032x}", data, zlib.crc32(data))
                    for topic, seq, data in rows])
    db.commit()
    db.close()


def v1_row(seq: int, prev: bool = False, payload: bytes = b"p") -> bytes:
    row: list[object] = [f"{seq:032x}", {"n": seq, "s": "x"}, payload, "cd" * 16,
                         1700000000.0 + seq]
    return cbor2.dumps([*row, None, f"{seq - 1:032x}"] if prev else row)


def test_a_schema_1_file_is_converted_to_runs_and_served(tmp_path: Path) -> None:
    path = tmp_path / LOG_FILE
    v1_file(path, [("t", 2, v1_row(2)), ("t", 3, v1_row(3, prev=True)), ("u", 1, v1_row(1))])
    store = LogStore(path, NODE, SyncPolicy())
    report = store.load()
    assert report.dropped == []
    assert report.logs == [
        RestoredLog("t", 9, 2, (body("t", 2), replace(linked(3), ttl=None)),
                    report.logs[0].loaded_at),
        RestoredLog("u", 1, 1, (body("u", 1),), report.logs[1].loaded_at)]
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("2",)
    assert db.execute("SELECT name FROM sqlite_master WHERE name = 'events'").fetchall() == []
    db.close()
    again = LogStore(path, NODE, SyncPolicy())  # converted once: served as it is now
    assert [log.events for log in again.load().logs] == [log.events for log in report.logs]
    again.close()


def test_a_schema_1_log_is_converted_into_runs_bounded_by_run_bytes(tmp_path: Path) -> None:
    path = tmp_path / LOG_FILE
    half = b"x" * (RUN_BYTES // 2)
    v1_file(path, [("t", seq, v1_row(seq, payload=half)) for seq in (2, 3, 4, 5, 6)])
    store = LogStore(path, NODE, SyncPolicy())
    assert [(e.seq, e.payload) for e in store.load().logs[0].events] == [
        (seq, half) for seq in (2, 3, 4, 5, 6)]
    store.close()
    assert runs_of(path, "t") == [(2, 3), (4, 5), (6, 6)]


def test_a_damaged_schema_1_row_is_dropped_with_what_follows_and_reported(
        tmp_path: Path) -> None:
    path = tmp_path / LOG_FILE
    v1_file(path, [("t", 2, v1_row(2)), ("t", 3, b"\xff" + v1_row(3)[1:]),
                   ("t", 4, v1_row(4))])
    db = sqlite3.connect(path)
    db.execute("UPDATE events SET crc = 0 WHERE seq = 3")
    db.commit()
    db.close()
    store = LogStore(path, NODE, SyncPolicy())
    report = store.load()
    assert report.dropped == [("t", "event 3: checksum mismatch")]
    assert [e.seq for e in report.logs[0].events] == [2]
    assert store.load().dropped == []  # reported once
    store.close()


def test_another_nodes_log_is_refused(tmp_path: Path) -> None:
    path = filled_store(tmp_path)
    with pytest.raises(StorageError, match="the log of node"):
        LogStore(path, "ef" * 16, SyncPolicy())


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_file_is_refused_not_served(tmp_path: Path, damage: str) -> None:
    path = filled_store(tmp_path, count=2000)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"x" * len(data))
    with pytest.raises(StorageError):
        store = LogStore(path, NODE, SyncPolicy())
        store.load()


def test_storage_config(tmp_path: Path) -> None:
    path = tmp_path / "o.toml"
    path.write_text('[storage]\nsync = "interval:10"\nenabled = true\n')
    config = build_config(path, {}, {})
    assert config.storage.sync == SyncPolicy("interval", 10)
    for bad, message in [('sync = "interval:0"', "positive number"),
                         ('sync = "sometimes"', "always, interval"),
                         ('sync = 5', "must be text"),
                         ('enabled = "yes"', "expected bool"),
                         ('fsync = true', "unknown setting")]:
        path.write_text(f"[storage]\n{bad}\n")
        with pytest.raises(ConfigError, match=message):
            build_config(path, {}, {})


CONSUMER_OPS: list[StorageOp] = [
    SaveConsumer("t", "workers", Progress(ConsumerConfig(ack=True), 3, (5,), ((4, 2),), 6)),
    SaveConsumer("t", "audit", Progress(ConsumerConfig(), 0, (), (), 0), "kind = 'a'"),
    SaveConsumer("t", "workers", Progress(ConsumerConfig(ack=True), 5, (), ((6, 1),), 7)),
    SaveConsumer("u", "gone", Progress(ConsumerConfig(pull=True), 1, (), (), 1)),
    DeleteConsumer("u", "gone"),
]
CONSUMERS_KEPT = [
    RestoredConsumer("t", "audit", Progress(ConsumerConfig(), 0, (), (), 0), "kind = 'a'"),
    RestoredConsumer("t", "workers", Progress(ConsumerConfig(ack=True), 5, (), ((6, 1),), 7)),
]


def test_both_stores_keep_the_last_progress_of_each_consumer(tmp_path: Path) -> None:
    memory = MemoryLogs()
    memory.apply(CONSUMER_OPS)
    assert memory.consumers() == CONSUMERS_KEPT
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    store.apply(CONSUMER_OPS)
    store.close()
    reopened = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    report = reopened.load()
    reopened.close()
    assert report.consumers == CONSUMERS_KEPT and report.dropped == []


def test_a_damaged_consumer_row_is_dropped_and_reported_not_served(tmp_path: Path) -> None:
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    store.apply(CONSUMER_OPS)
    store.close()
    db = sqlite3.connect(tmp_path / LOG_FILE)
    (data,) = db.execute("SELECT body FROM consumers WHERE name = 'audit'").fetchone()
    flipped = bytes([data[0] ^ 0x01]) + data[1:]  # one bit of the stored progress
    db.execute("UPDATE consumers SET body = ? WHERE name = 'audit'", (flipped,))
    db.commit()
    db.close()
    reopened = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    report = reopened.load()
    assert report.consumers == CONSUMERS_KEPT[1:]
    assert report.dropped == [("t", "consumer audit: checksum mismatch")]
    assert reopened.load().dropped == []  # dropped from the file too
    reopened.close()


def test_both_stores_keep_the_last_key_range_start(tmp_path: Path) -> None:
    ops: list[StorageOp] = [NoteRange(7), AppendEvents("t", (body("t", 1),)), NoteRange(0),
                            NoteRange(2**160 - 1)]  # the largest id of a 160-bit ring
    memory = MemoryLogs()
    assert memory.range_start is None
    memory.apply(ops)
    assert memory.range_start == 2**160 - 1
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    assert store.load().range_start is None  # a new file: none kept
    store.apply(ops)
    store.close()
    reopened = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    report = reopened.load()
    reopened.close()
    assert report.range_start == 2**160 - 1 and report.dropped == []
    # A range start is not an event: a failed write keeps it.
    assert NoteRange(5) in reopened.salvage([NoteRange(5), AppendEvents("t", (body("t", 2),))])


@pytest.mark.parametrize("stored", ["-1", "12ab", "", "1.5"])
def test_a_damaged_key_range_is_dropped_and_reported_not_served(
        tmp_path: Path, stored: str) -> None:
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    store.apply([NoteRange(42)])
    store.close()
    db = sqlite3.connect(tmp_path / LOG_FILE)
    db.execute("UPDATE meta SET value = ? WHERE key = 'range_start'", (stored,))
    db.commit()
    db.close()
    reopened = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    report = reopened.load()
    assert report.range_start is None
    assert report.dropped == [(None, f"range start: undecodable ({stored!r})")]
    assert reopened.load().dropped == []  # dropped from the file too
    reopened.close()


@pytest.mark.parametrize("start", [-1, True, 1.0])
def test_a_range_start_is_a_node_id(start: object) -> None:
    with pytest.raises(ValueError, match="a range start is a node id"):
        NoteRange(start)  # type: ignore[arg-type]

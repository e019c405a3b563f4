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
import trio

from overlay.core.storage import StorageOp, SyncPolicy
from overlay.runtime.config import ConfigError, build_config
from overlay.runtime.logstore import LOG_FILE, LogStore, StorageError, StorageWorker
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
        "trim then append": [RestoredLog("t", 11, 6, tuple(body("t", s) for s in range(6, 12)))],
        "counter beyond the events": [RestoredLog("a", 40, 1, (body("a", 1),)),
                                      RestoredLog("b", 7, 8, ())],
        "drop": [RestoredLog("b", 1, 1, (body("b", 1),))],
        "large payload": [RestoredLog("big", 1, 1, (body("big", 1, b"\x00" * 1_000_000),))],
        "move": [RestoredLog("t", 7, 1, (body("t", 1), body("t", 4), renumbered(2, 5),
                                         renumbered(3, 6), body("t", 7)))],
        "links and ttls": [RestoredLog("t", 4, 1, (body("t", 1), linked(2), linked(3, 60.0),
                                                   replace(body("t", 4), ttl=5.0)))],
    }[case]
    assert store(CASES[case], tmp_path) == expected


def filled_store(tmp_path: Path, count: int = 20) -> Path:
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    store.apply([AppendEvents("t", tuple(body("t", s) for s in range(1, count + 1))),
                 AppendEvents("u", (body("u", 1),))])
    store.close()
    return tmp_path / LOG_FILE


def test_a_flipped_bit_in_an_event_drops_it_and_what_follows_in_its_topic(
        tmp_path: Path) -> None:
    path = filled_store(tmp_path)
    db = sqlite3.connect(path)
    data = db.execute("SELECT body FROM events WHERE topic = 't' AND seq = 8").fetchone()[0]
    flipped = bytes([data[0]]) + bytes([data[1] ^ 0x01]) + data[2:]
    db.execute("UPDATE events SET body = ? WHERE topic = 't' AND seq = 8", (flipped,))
    db.commit()
    db.close()
    store = LogStore(path, NODE, SyncPolicy())
    report = store.load()
    assert report.dropped == [("t", "event 8: checksum mismatch")]
    logs = {log.topic: log for log in report.logs}
    assert [e.seq for e in logs["t"].events] == list(range(1, 8))
    assert logs["t"].counter == 20  # never numbered below what it knew
    assert [e.seq for e in logs["u"].events] == [1]  # other topics untouched
    # The damaged rows are gone: the next start serves no damage, and reports none.
    store.close()
    again = LogStore(path, NODE, SyncPolicy())
    assert again.load().dropped == []


@pytest.mark.parametrize("extra", [1, 2, 3])
def test_an_event_row_of_eight_fields_or_a_bad_prev_is_damage(tmp_path: Path,
                                                              extra: int) -> None:
    # A row checksummed right but not an event: five fields and at most a ttl and a
    # prev. (A prev that is no msg_id is refused as a peer's would be.)
    path = filled_store(tmp_path)
    row = [f"{8:032x}", {}, b"p", "cd" * 16, 1700000008.0, None, f"{7:032x}", None][:5 + extra]
    if extra == 2:
        row[6] = "not hex"
    data = cbor2.dumps(row)
    db = sqlite3.connect(path)
    db.execute("UPDATE events SET body = ?, crc = ? WHERE topic = 't' AND seq = 8",
               (data, zlib.crc32(data)))
    db.commit()
    db.close()
    report = LogStore(path, NODE, SyncPolicy()).load()
    dropped = [] if extra == 1 else [("t", "event 8: undecodable (ValueError)")]
    assert report.dropped == dropped


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


async def test_the_worker_groups_what_arrives_during_a_commit(tmp_path: Path) -> None:
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    worker = StorageWorker(store)
    synced: list[int] = []

    def failed_at_all(through: int, reason: str) -> None:
        raise AssertionError(f"a write failed: {reason}")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run, synced.append, failed_at_all)
        for seq in range(1, 201):
            worker.submit(AppendEvents("t", (body("t", seq),)))
            if seq % 50 == 0:
                await trio.sleep(0)  # let a commit start while more arrive
        with trio.fail_after(10):
            while not synced or synced[-1] < 200:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert synced == sorted(synced) and synced[-1] == 200
    assert worker.commits < 200  # group commit: fewer transactions than operations
    assert [e.seq for e in store.load().logs[0].events] == list(range(1, 201))
    store.close()


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

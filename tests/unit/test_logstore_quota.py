"""``[storage] max_bytes``: the log file never grows past its quota (a write that would
fails with SQLITE_FULL, as on a full disk), and the worker goes on after a failed
write: it keeps the counters and trims of the failed batch, tells the core, and later
operations (a trim that frees room, then appends) are written."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from overlay.core.storage import SyncPolicy
from overlay.runtime.config import MIN_STORAGE_BYTES, ConfigError, Storage, build_config
from overlay.runtime.logstore import LOG_FILE, LogStore
from overlay.runtime.storage_worker import StorageWorker
from scribe.durability import AppendEvents, NoteCounter, TrimLog
from scribe.wire_records import EventBody

NODE = "ab" * 16
PAGE = 4096
#: Each event about a page: one more event needs one more page.
PAYLOAD = b"\x00" * 3000


def event(topic: str, seq: int) -> EventBody:
    return EventBody(topic, f"{seq:032x}", seq, {}, PAYLOAD, "cd" * 16, 1700000000.0)


def pages(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return int(db.execute("PRAGMA page_count").fetchone()[0])
    finally:
        db.close()


def fill(store: LogStore, topic: str, first: int) -> int:
    """Append one event at a time until the store is full; the first seq refused."""
    seq = first
    while True:
        try:
            store.apply([AppendEvents(topic, (event(topic, seq),))])
        except sqlite3.OperationalError as exc:
            assert "full" in str(exc)
            return seq
        seq += 1


@pytest.mark.parametrize("spare", [0, PAGE - 1])  # the quota counts whole pages
def test_the_file_stops_at_its_quota_and_one_page_more_takes_one_event_more(
        tmp_path: Path, spare: int) -> None:
    path = tmp_path / LOG_FILE
    quota = 20 * PAGE
    store = LogStore(path, NODE, SyncPolicy(), max_bytes=quota + spare)
    refused = fill(store, "t", 1)
    store.close()
    assert pages(path) == 20  # at the quota, not one page past it
    # The same quota again: still full. One page more: the refused event fits.
    store = LogStore(path, NODE, SyncPolicy(), max_bytes=quota)
    with pytest.raises(sqlite3.OperationalError, match="full"):
        store.apply([AppendEvents("t", (event("t", refused),))])
    store.close()
    store = LogStore(path, NODE, SyncPolicy(), max_bytes=quota + PAGE)
    store.apply([AppendEvents("t", (event("t", refused),))])
    assert [e.seq for e in store.load().logs[0].events][-1] == refused
    store.close()
    assert pages(path) == 21


def test_a_file_larger_than_a_lowered_quota_is_served_and_does_not_grow(
        tmp_path: Path) -> None:
    path = tmp_path / LOG_FILE
    store = LogStore(path, NODE, SyncPolicy(), max_bytes=40 * PAGE)
    fill(store, "t", 1)
    store.close()
    store = LogStore(path, NODE, SyncPolicy(), max_bytes=MIN_STORAGE_BYTES)
    assert store.load().logs[0].events
    with pytest.raises(sqlite3.OperationalError, match="full"):
        store.apply([AppendEvents("u", (event("u", 1),))])
    store.close()
    assert pages(path) == 40


async def test_the_worker_keeps_counters_and_trims_of_a_failed_write_and_goes_on(
        tmp_path: Path) -> None:
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy(), max_bytes=20 * PAGE)
    worker = StorageWorker(store)
    synced: list[int] = []
    failed: list[tuple[int, str]] = []

    async def until(check: Callable[[], object]) -> None:
        with trio.fail_after(10):
            while not check():
                await trio.sleep(0.005)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run, synced.append,
                           lambda through, reason: failed.append((through, reason)))
        seq = 0
        while not failed:  # one event per transaction until one fails
            seq += 1
            worker.submit(AppendEvents("t", (event("t", seq),)))
            await until(lambda: synced[-1:] == [worker.submitted] or failed)
        assert failed == [(seq, "database or disk is full")]
        assert worker.stats()["failing"] == "database or disk is full"
        # A trim and an append in one batch: the append does not fit before the trim
        # ran, so the batch fails; the trim gets through all the same (salvaged).
        worker.submit(AppendEvents("t", (event("t", seq + 1),)))
        worker.submit(TrimLog("t", seq - 5))
        await until(lambda: len(failed) == 2)
        assert failed[-1][0] == worker.submitted
        # The room it freed takes the next events.
        worker.submit(AppendEvents("t", (event("t", seq + 2),)))
        worker.submit(NoteCounter("u", 3))
        await until(lambda: synced[-1:] == [worker.submitted])
        assert worker.stats()["failing"] is None
        nursery.cancel_scope.cancel()
    (log, u) = store.load().logs
    assert [e.seq for e in log.events] == [seq - 5, seq - 4, seq - 3, seq - 2, seq - 1, seq + 2]
    assert log.counter == seq + 2 and u.counter == 3
    assert worker.stats()["failures"] == 2
    store.close()


def test_max_bytes_config(tmp_path: Path) -> None:
    path = tmp_path / "o.toml"
    path.write_text("[storage]\nmax_bytes = 65536\n")
    assert build_config(path, {}, {}).storage.max_bytes == MIN_STORAGE_BYTES
    assert Storage().max_bytes is None
    for bad in ("65535", "0", "-1", "true", '"1GB"', "1.5e6"):
        path.write_text(f"[storage]\nmax_bytes = {bad}\n")
        with pytest.raises(ConfigError, match="max_bytes must be an integer of at least"):
            build_config(path, {}, {})

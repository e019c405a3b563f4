"""The storage worker (overlay/runtime/storage_worker.py): group commits, the linger of
operations nobody waits for, what is written when the daemon stops."""

from __future__ import annotations

import threading
from pathlib import Path

import trio
import trio.testing

from overlay.core.storage import StorageOp, SyncPolicy
from overlay.runtime.logstore import LOG_FILE, LogStore
from overlay.runtime.storage_worker import StorageWorker
from scribe.durability import AppendEvents, NoteCounter
from tests.unit.test_logstore import NODE, body


def never_fails(through: int, reason: str) -> None:
    raise AssertionError(f"a write failed: {reason}")


async def until_synced(synced: list[int], through: int) -> None:
    with trio.fail_after(10):
        while synced[-1:] != [through]:
            await trio.sleep(0.005)


def lingering_worker(tmp_path: Path, linger: float
                     ) -> tuple[LogStore, StorageWorker, list[int]]:
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    return store, StorageWorker(store, linger=linger), []


async def test_the_worker_groups_what_arrives_during_a_commit(tmp_path: Path) -> None:
    store = LogStore(tmp_path / LOG_FILE, NODE, SyncPolicy())
    worker = StorageWorker(store)
    synced: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run, synced.append, never_fails)
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


async def test_what_nobody_waits_for_lingers_before_its_transaction(tmp_path: Path) -> None:
    store, worker, synced = lingering_worker(tmp_path, 0.2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run, synced.append, never_fails)
        submitted_at = trio.current_time()
        worker.submit(AppendEvents("t", (body("t", 1),)))
        await until_synced(synced, 1)
        assert trio.current_time() - submitted_at >= 0.2
        nursery.cancel_scope.cancel()
    store.close()


async def test_an_operation_waited_for_ends_the_linger(tmp_path: Path) -> None:
    store, worker, synced = lingering_worker(tmp_path, 3600.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run, synced.append, never_fails)
        worker.submit(AppendEvents("t", (body("t", 1),)))
        await trio.testing.wait_all_tasks_blocked()
        worker.submit(AppendEvents("t", (body("t", 2),)))
        worker.want(2)  # within fail_after's 10 s, not the hour
        await until_synced(synced, 2)
        assert worker.commits == 1  # the lingering one went with it
        worker.submit(NoteCounter("t", 5))
        worker.want(1)  # synced already: this one lingers
        await trio.testing.wait_all_tasks_blocked()
        assert worker.commits == 1 and worker.synced == 2
        nursery.cancel_scope.cancel()
    # The daemon stops: what still lingers is written.
    worker.write_queued()
    assert worker.synced == worker.submitted == 3
    (log,) = store.load().logs
    assert [e.seq for e in log.events] == [1, 2] and log.counter == 5
    store.close()


async def test_a_want_met_by_the_transaction_under_way_does_not_end_the_next_linger(
        tmp_path: Path) -> None:
    store, worker, synced = lingering_worker(tmp_path, 3600.0)
    gate = threading.Event()
    apply = store.apply

    def held_apply(ops: list[StorageOp]) -> None:
        gate.wait(10)
        apply(ops)

    store.apply = held_apply  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run, synced.append, never_fails)
        worker.submit(AppendEvents("t", (body("t", 1),)))
        worker.submit(AppendEvents("t", (body("t", 2),)))
        worker.want(1)  # the transaction of both begins at once
        await trio.testing.wait_all_tasks_blocked()
        worker.want(2)  # comes while that transaction is being written
        gate.set()
        await until_synced(synced, 2)
        worker.submit(AppendEvents("t", (body("t", 3),)))  # nobody waits for it
        # A negative: had the earlier want ended the linger, the commit takes a few ms.
        await trio.sleep(0.3)
        assert worker.commits == 1 and synced == [2]
        nursery.cancel_scope.cancel()
    worker.write_queued()
    assert [e.seq for e in store.load().logs[0].events] == [1, 2, 3]
    store.close()

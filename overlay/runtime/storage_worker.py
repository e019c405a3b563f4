"""The daemon's side of :mod:`overlay.core.storage`: a core's topic-log operations
applied to a :class:`overlay.runtime.logstore.LogStore` in group commits.

The driver hands :class:`StorageWorker` each ``Persist`` effect's operation in order
(:meth:`StorageWorker.submit`); its task takes everything submitted so far, applies it
in one transaction on a worker thread (``trio.to_thread``), and tells the core how far
it is synced. Operations that arrive while a transaction is being written go in the
next one: one sync for all of them (group commit), so the rate does not fall to one
event per sync.

Operations nobody waits for (the appends of unreliable events, trims, counters) wait up
to :data:`~overlay.core.storage.LINGER_SECONDS` for more to join them; an operation
something waits for (the driver passes on the core's ``SyncWanted``:
:meth:`StorageWorker.want`) ends the wait at once. Events published one at a time
otherwise paid a transaction each: about 40% of a lone unreliable event's CPU
(``bench/daemon_path.py --lone``). What lingers is written when the daemon stops
(:meth:`StorageWorker.write_queued`); a killed process loses it, as it loses a
transaction under way (nothing acknowledged: see docs/DESIGN.md).

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
import sqlite3
from collections.abc import Callable

import trio

from overlay.core.storage import LINGER_SECONDS, StorageOp
from overlay.runtime.logstore import LogStore

log = logging.getLogger("overlay.storage")


#: The core's ``on_synced``: every operation up to this number is on disk.
Synced = Callable[[int], None]
#: The core's ``on_storage_failed``: the events of operations up to this number that
#: were not reported synced are not stored (why: the error's text).
Failed = Callable[[int, str], None]


class StorageWorker:
    """Applies a core's storage operations in order, in group commits, on a thread."""

    def __init__(self, store: LogStore, linger: float = LINGER_SECONDS) -> None:
        self.store = store
        self.linger = linger
        self._queued: list[StorageOp] = []
        #: When the first of ``_queued`` came (trio's clock).
        self._first_at = 0.0
        #: Operations submitted so far (the core's persist count).
        self.submitted = 0
        self.synced = 0
        #: The highest operation something waits for (:meth:`want`).
        self.wanted = 0
        self._wanted_now = trio.Event()
        self.commits = 0
        #: Transactions that failed, and the last one's error while no commit has
        #: succeeded since (None: the store is writing).
        self.failures = 0
        self.failing: str | None = None
        self._wake = trio.Event()

    def submit(self, op: StorageOp) -> None:
        if not self._queued:
            self._first_at = trio.current_time()
        self._queued.append(op)
        self.submitted += 1
        self._wake.set()

    def want(self, through: int) -> None:
        """Something waits for the operations up to the ``through``-th: no lingering."""
        if through > self.wanted:
            self.wanted = through
            self._wanted_now.set()

    async def run(self, on_synced: Synced, on_failed: Failed) -> None:
        """Until cancelled: apply what was submitted, one transaction at a time."""
        policy = self.store.policy
        async with trio.open_nursery() as nursery:
            if policy.mode == "interval":
                nursery.start_soon(self._sync_every, policy.interval_ms / 1000)
            while True:
                await self._wake.wait()
                if self.linger > 0 and self.wanted <= self.synced:
                    # Nobody waits for what is queued: let more join its transaction. A
                    # want already signalled was for operations synced since (it may have
                    # come while their transaction ran), so it does not end this wait.
                    if self._wanted_now.is_set():
                        self._wanted_now = trio.Event()
                    with trio.move_on_at(self._first_at + self.linger):
                        await self._wanted_now.wait()
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

    def write_queued(self) -> None:
        """Apply what is still queued, here and now (the daemon stops: :meth:`run` was
        cancelled, no transaction is under way). A failure is logged: the core that
        asked for them is gone."""
        ops, self._queued = self._queued, []
        if not ops:
            return
        try:
            self.store.apply(ops)
        except (sqlite3.Error, OSError) as exc:
            log.error("storage: the last %d operations could not be written at stop (%s)",
                      len(ops), exc)
        else:
            self.commits += 1
            self.synced = self.submitted

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


__all__ = ["Failed", "StorageWorker", "Synced"]

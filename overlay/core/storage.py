"""Storage as a sans-IO core sees it: operations it asks for, syncs it is told of.

A core that keeps data across restarts emits :class:`~overlay.core.effects.Persist`
effects, each carrying one :class:`StorageOp`, in the order they must be applied. The
driver numbers them as they come (1, 2, ... from the core's start) and applies them to
its store; when every operation up to number ``n`` is on stable storage it calls the
core's ``on_synced(now, n)``. The core counts what it emitted the same way, so "synced
through n" needs no other identifier. A core waits for that input before it tells
anyone that data is safe (the acknowledgement of a reliable publish).

A write can fail (a full disk, a quota). The driver then applies what the mode says can
be kept of the failed operations (Scribe's logs keep everything but the events, see
``scribe.durability.salvage``) and calls ``on_storage_failed(now, n, reason)``: the data
of the operations up to ``n`` not reported synced is not stored, and never will be. The
store goes on with the operations after ``n``; ``on_synced`` follows as before.

A core that waits for persist ``n`` to be synced (to acknowledge what it holds) emits
:class:`~overlay.core.effects.SyncWanted` with ``n``. Operations nobody waits for may
wait up to :data:`LINGER_SECONDS` before their transaction begins, for others to share
it and its sync; ``SyncWanted`` ends that wait at once.

The trio runtime applies operations to SQLite on a worker thread, one transaction for
everything that arrived while the previous one was being written (group commit); the
simulator keeps them in memory and models what a crash loses (what was not synced).
"""

from __future__ import annotations

from dataclasses import dataclass

#: How long operations nobody waits for may wait before their transaction begins (the
#: runtime's and the simulator's), so that events published one at a time share
#: transactions (a transaction cost a lone unreliable event about 40% of its CPU).
LINGER_SECONDS = 0.005


class StorageOp:
    """Base of the operations a core asks its store to apply (the modes define theirs)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class SyncPolicy:
    """When the store makes writes durable, and what a core may acknowledge before.

    ``always``: every transaction is synced before ``on_synced`` (an acknowledged event
    survives a crash of the process, of the machine and a power cut). ``interval``: a
    transaction is acknowledged once the OS has it and synced every ``interval_ms``
    (a process crash loses nothing; a machine crash or power cut loses what was
    acknowledged in the last interval). ``never``: the store never syncs by itself (the
    OS writes back when it chooses; a machine crash may lose anything not yet written
    back, whatever was acknowledged).
    """

    mode: str = "always"
    interval_ms: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("always", "interval", "never"):
            raise ValueError(f"sync must be always, interval:<ms> or never, not {self.mode!r}")
        if (self.mode == "interval") != (self.interval_ms > 0):
            raise ValueError("sync = interval:<ms> takes a positive number of milliseconds")

    @staticmethod
    def parse(text: str) -> SyncPolicy:
        """``always``, ``never`` or ``interval:<ms>`` (ValueError otherwise)."""
        if not isinstance(text, str):
            raise ValueError("sync must be text: always, interval:<ms> or never")
        mode, _, ms = text.partition(":")
        if mode == "interval":
            if not ms.isdigit() or int(ms) <= 0:
                raise ValueError(f"sync = {text!r}: interval takes a positive number of "
                                 "milliseconds, as in interval:10")
            return SyncPolicy("interval", int(ms))
        if ms:
            raise ValueError(f"sync must be always, interval:<ms> or never, not {text!r}")
        return SyncPolicy(mode)

    def __str__(self) -> str:
        return f"interval:{self.interval_ms}" if self.mode == "interval" else self.mode


__all__ = ["LINGER_SECONDS", "StorageOp", "SyncPolicy"]

"""The shape every sans-IO protocol core has, and a small base class that implements it.

Inputs: ``on_message(now, src, msg)``, ``on_timer(now)``, ``on_unreachable(now, dest,
msg)`` and application calls of each core. Outputs: effects pulled with
``drain_effects()`` and the next timer with ``next_deadline()``. ``now`` is seconds on a
clock the driver chooses (monotonic in daemons, simulated time in the simulator); a
core never reads a clock itself and takes randomness from the ``random.Random`` it is
given, so the same inputs always give the same effects.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from overlay.core.effects import Deliver, Effect, Notice, Persist, Send, SyncWanted, Trace
from overlay.core.messages import Message
from overlay.core.pubsub import DeliveredEvent
from overlay.core.storage import StorageOp


@runtime_checkable
class ProtocolCore(Protocol):
    """What a driver needs from a core."""

    address: str
    #: The node's id in hex (traces, ``status``).
    node_hex: str

    def on_message(self, now: float, src: str, msg: Message) -> None: ...

    def on_timer(self, now: float) -> None: ...

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None: ...

    def next_deadline(self) -> float | None: ...

    def drain_effects(self) -> list[Effect]: ...

    def on_synced(self, now: float, through: int) -> None:
        """Every ``Persist`` effect up to the ``through``-th this core emitted is on
        stable storage (as the store's sync policy defines it)."""
        ...

    def on_storage_failed(self, now: float, through: int, reason: str) -> None:
        """The store could not apply the ``Persist`` effects up to the ``through``-th that
        were not reported synced; it kept what ``salvage`` keeps of them (for Scribe's
        logs: everything but the events), and goes on with the next ones."""
        ...


class CoreBase:
    """Effect queue plumbing shared by the cores."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._effects: list[Effect] = []
        #: This step's ``Deliver`` effect per subscription, to add its later events to.
        self._deliveries: dict[int, Deliver] = {}

    def drain_effects(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        self._deliveries = {}
        return effects

    def send(self, dest: str, msg: Message) -> None:
        self._effects.append(Send(dest, msg))

    def deliver(self, sub: int, event: DeliveredEvent) -> None:
        """Hand ``event`` to ``sub``: with the step's earlier events for it, in one
        ``Deliver`` effect."""
        effect = self._deliveries.get(sub)
        if effect is None:
            effect = self._deliveries[sub] = Deliver(sub, [event])
            self._effects.append(effect)
        else:
            effect.events.append(event)

    def trace(self, ev: str, **fields: Any) -> None:
        self._effects.append(Trace(ev, fields))

    def notice(self, kind: str, **data: Any) -> None:
        self._effects.append(Notice(kind, data))

    def persist(self, op: StorageOp) -> None:
        self._effects.append(Persist(op))

    def want_sync(self, through: int) -> None:
        self._effects.append(SyncWanted(through))

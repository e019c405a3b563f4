"""Effects: what a sans-IO core asks its driver to do, pulled with ``drain_effects()``.

The driver (trio daemon runtime or the simulator) carries them out in order:
``Send`` goes over the network, ``Deliver`` to a local subscription, ``Trace`` to
the node's trace file (the driver stamps ``ts``, ``node`` and ``run``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from overlay.core.messages import Message
from overlay.core.pubsub import DeliveredEvent
from overlay.core.storage import StorageOp


class Effect:
    """Base class of effects."""

    __slots__ = ()


@dataclass(slots=True)  # not frozen: one per message sent, and frozen costs on the way
class Send(Effect):
    """Send ``msg`` to the peer at address ``dest`` (``host:port``)."""

    dest: str
    msg: Message

    def __post_init__(self) -> None:
        if not isinstance(self.msg, Message):
            raise TypeError(f"Send needs a Message, got {type(self.msg).__name__}")


@dataclass(slots=True)  # not frozen: the core appends to it during its step
class Deliver(Effect):
    """Hand ``events``, in order, to the local subscription ``sub``.

    A core step's deliveries to one subscription come in one effect, at the place of
    the first (:meth:`overlay.core.protocol.CoreBase.deliver`): a run of events costs the
    driver and the API one hand-over per subscription, not one per event. Each
    subscription's events keep their order; only the order of deliveries to different
    subscriptions, and of deliveries against other effects, may differ from the order
    they were decided in (nothing depends on it: a delivery is local, and the API
    orders a subscription's pushes after its subscribe reply by itself)."""

    sub: int
    events: list[DeliveredEvent]


@dataclass(slots=True)  # not frozen: several per event, and frozen costs on the way
class Trace(Effect):
    """Append a trace record of type ``ev`` (TRACES.md) with ``fields``."""

    ev: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)  # not frozen: several per event, and frozen costs on the way
class Notice(Effect):
    """An outcome for the local application layer (e.g. a publish was acknowledged).

    ``kind`` names it; ``data`` carries what the layer needs. Cores use this for
    replies to application calls that complete asynchronously.
    """

    kind: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SyncWanted(Effect):
    """Something waits until the ``Persist`` effects up to the ``through``-th are synced
    (a publisher's acknowledgement, a replica's confirmation): the driver applies them
    without delay. Persists nobody waits for may wait a little, to share a transaction
    and its sync with the next ones (:mod:`overlay.core.storage`)."""

    through: int


@dataclass(slots=True)  # not frozen: one per event retained, and frozen costs on the way
class Persist(Effect):
    """Apply ``op`` to the node's store, after every ``Persist`` before it; the driver
    reports, through the core's ``on_synced``, how far they are durable, and through its
    ``on_storage_failed`` what could not be written (:mod:`overlay.core.storage`)."""

    op: StorageOp

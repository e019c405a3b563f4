"""Stand-ins for the Chord KBR host, for testing Scribe on its own.

- :class:`RecordingHost`: one node; records every down-call so a test feeds inputs and
  asserts the exact effects. Keys it is responsible for are given by the test.
- :class:`OracleRing` and :class:`OracleHost`: many nodes in the simulator, routing
  hop by hop over perfect finger tables computed from a global sorted ring (as Chord's
  would be once stable). Routed messages travel in an envelope; the app sees
  ``forward`` at every hop and ``deliver`` at the responsible node, as with Chord.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chord.kbr import NodeRef
from overlay.core.ids import format_id, hash_id
from overlay.core.messages import Message, message
from overlay.core.protocol import CoreBase
from overlay.core.storage import StorageOp
from overlay.sim.engine import Simulator
from scribe.messages import Event, Events


@dataclass
class RecordingHost:
    """A KBR host that records what its application asks of it."""

    local: NodeRef
    bits: int = 16
    rng: random.Random = field(default_factory=lambda: random.Random(1))
    responsible_for: set[int] = field(default_factory=set)
    app: Any = None
    routed: list[tuple[int, Message]] = field(default_factory=list)
    sent: list[tuple[str, Message]] = field(default_factory=list)
    traces: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    delivered: list[tuple[int, Any]] = field(default_factory=list)
    notices: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: What ``replica_set`` answers (the successors that would take our keys over).
    replicas: list[NodeRef] = field(default_factory=list)
    #: What ``predecessor`` answers.
    pred: NodeRef | None = None
    #: Storage operations the app persisted (a durable config), in order.
    persisted: list[StorageOp] = field(default_factory=list)
    #: The ``through`` of each ``want_sync``, in order.
    sync_wanted: list[int] = field(default_factory=list)

    def route(self, now: float, key: int, msg: Message, *, ack: bool | None = None) -> None:
        if self.is_responsible(key):
            self.app.deliver(now, key, msg, 0)
        else:
            self.routed.append((key, msg))

    def send_direct(self, dest: str, msg: Message) -> None:
        self.sent.append((dest, msg))

    def is_responsible(self, key: int) -> bool:
        return key in self.responsible_for

    def replica_set(self, key: int, max_rank: int) -> list[NodeRef]:
        return self.replicas[:max_rank]

    def predecessor(self) -> NodeRef | None:
        return self.pred

    def successor(self) -> NodeRef:
        return self.local

    def trace(self, ev: str, **fields: Any) -> None:
        self.traces.append((ev, fields))

    def persist(self, op: StorageOp) -> None:
        self.persisted.append(op)

    def want_sync(self, through: int) -> None:
        self.sync_wanted.append(through)

    def deliver_local(self, sub: int, event: Any) -> None:
        self.delivered.append((sub, event))

    def notice(self, kind: str, **data: Any) -> None:
        self.notices.append((kind, data))

    def clear(self) -> None:
        """Forget the effects so far, but the persists: they are numbered from the start
        (``on_synced(n)`` counts them), so a test reads new ones past a mark."""
        for effects in (self.routed, self.sent, self.traces, self.delivered, self.notices):
            effects.clear()

    def sent_of(self, kind: type[Message]) -> list[tuple[str, Any]]:
        return [(dest, msg) for dest, msg in self.sent if isinstance(msg, kind)]

    def sent_copies(self) -> list[tuple[str, Event]]:
        """The event copies sent down trees, in order, each as a single copy: a run
        (``Events``) as the copies it stands for."""
        return [(dest, copy) for dest, msg in self.sent if isinstance(msg, Event | Events)
                for copy in (msg.copies() if isinstance(msg, Events) else [msg])]

    def trace_kinds(self) -> list[str]:
        return [ev for ev, _ in self.traces]


@message("fakekbr.routed")
class Routed(Message):
    """A message on its way to the node responsible for ``key``."""

    key: int
    hops: int
    payload: Message


class OracleRing:
    """Who is alive, as every node's routing tables would eventually say."""

    def __init__(self, sim: Simulator, bits: int = 32) -> None:
        self.sim = sim
        self.bits = bits
        self.ids: list[int] = []
        self.hosts: dict[int, OracleHost] = {}

    def succ(self, key: int) -> int:
        i = bisect.bisect_left(self.ids, key % (1 << self.bits))
        return self.ids[i % len(self.ids)]

    def pred(self, node_id: int) -> int:
        return self.ids[bisect.bisect_left(self.ids, node_id) - 1]

    def next_hop(self, node_id: int, key: int) -> int:
        """Chord's step: the successor when it owns ``key``, else the closest preceding
        finger (fingers are the successors of ``node_id + 2**i``)."""
        size = 1 << self.bits
        succ = self.succ(node_id + 1)
        if (key - node_id) % size <= (succ - node_id) % size:
            return succ
        distance = (key - node_id) % size
        for i in reversed(range(self.bits)):
            finger = self.succ(node_id + (1 << i))
            if 0 < (finger - node_id) % size < distance:
                return finger
        return succ

    def add(self, addr: str, app_factory: Callable[[OracleHost], Any]) -> OracleHost:
        node_id = hash_id(addr, self.bits)
        host = OracleHost(self, addr, node_id, self.sim.node_rng(addr))
        host.app = app_factory(host)
        self.sim.add_node(host, format_id(node_id, self.bits))
        bisect.insort(self.ids, node_id)
        self.hosts[node_id] = host
        self._tell_neighbours(node_id, host.local, joined=True)
        return host

    def remove(self, node_id: int) -> None:
        """The ring learned that ``node_id`` is gone: its neighbours get ``update``."""
        self.ids.remove(node_id)
        self._tell_neighbours(node_id, self.hosts[node_id].local, joined=False)

    def _tell_neighbours(self, node_id: int, node: NodeRef, joined: bool) -> None:
        for neighbour in {self.succ(node_id + 1), self.pred(node_id)} - {node_id}:
            host = self.hosts[neighbour]
            if self.sim.alive(host.address):
                self.sim.invoke(host.address,
                                lambda core, now: core.app.update(now, node, joined))


class OracleHost(CoreBase):
    """A node of the oracle ring: a KBR host (for the app) and a core (for the simulator)."""

    def __init__(self, ring: OracleRing, addr: str, node_id: int, rng: random.Random) -> None:
        super().__init__(addr)
        self.ring = ring
        self.local = NodeRef(node_id, addr)
        self.bits = ring.bits
        self.rng = rng
        self.app: Any = None

    # -- KbrHost ---------------------------------------------------------------------------

    def route(self, now: float, key: int, msg: Message, *, ack: bool | None = None) -> None:
        if self.is_responsible(key):
            self.app.deliver(now, key, msg, 0)
        else:
            self._pass_on(Routed(key, 0, msg))

    def send_direct(self, dest: str, msg: Message) -> None:
        self.send(dest, msg)

    def is_responsible(self, key: int) -> bool:
        return self.ring.succ(key) == self.local.id

    def replica_set(self, key: int, max_rank: int) -> list[NodeRef]:
        found: list[NodeRef] = []
        current = self.local.id
        while len(found) < min(max_rank, len(self.ring.ids) - 1):
            current = self.ring.succ(current + 1)
            found.append(self.ring.hosts[current].local)
        return found

    def predecessor(self) -> NodeRef | None:
        return self.ring.hosts[self.ring.pred(self.local.id)].local

    def successor(self) -> NodeRef:
        return self.ring.hosts[self.ring.succ(self.local.id + 1)].local

    def deliver_local(self, sub: int, event: Any) -> None:
        self.deliver(sub, event)

    # -- ProtocolCore ----------------------------------------------------------------------

    def on_message(self, now: float, src: str, msg: Message) -> None:
        if not isinstance(msg, Routed):
            self.app.on_direct(now, src, msg)
        elif self.is_responsible(msg.key):
            self.app.deliver(now, msg.key, msg.payload, msg.hops)
        else:
            hop = self.ring.hosts[self.ring.next_hop(self.local.id, msg.key)].local
            payload = self.app.forward(now, msg.key, msg.payload, hop)
            if payload is not None:
                self.send(hop.addr, Routed(msg.key, msg.hops + 1, payload))

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        if isinstance(msg, Routed):
            self._pass_on(msg)  # the ring will route around the dead node once it knows
        else:
            self.app.on_unreachable(now, dest, msg)

    def on_timer(self, now: float) -> None:
        self.app.on_timer(now)

    def next_deadline(self) -> float | None:
        return self.app.next_deadline()

    def _pass_on(self, msg: Routed) -> None:
        hop = self.ring.hosts[self.ring.next_hop(self.local.id, msg.key)].local
        self.send(hop.addr, Routed(msg.key, msg.hops + 1, msg.payload))


@dataclass
class OracleRingBuilder:
    """Builds an :class:`OracleRing` for ``overlay.sim.scenarios.scribe`` (its ``Ring``)."""

    bits: int = 32
    ready_at: float = 0.0
    #: Time between a crash and the ring routing around the crashed node.
    detect_after: float = 2.0
    ring: OracleRing | None = None

    def build(self, sim: Simulator, count: int,
              app_factory: Callable[[Any], Any]) -> list[OracleHost]:
        self.ring = OracleRing(sim, self.bits)
        hosts = [self.ring.add(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}:7400", app_factory)
                 for i in range(count)]
        for host in hosts:
            sim.invoke(host.address, lambda core, now: core.trace(
                "node_up", addr=core.address, mode="structured", version=1))
        return hosts

    def crash(self, sim: Simulator, node: OracleHost) -> None:
        ring = self.ring
        assert ring is not None
        sim.crash(node.address)
        sim.at(sim.now + self.detect_after, lambda: ring.remove(node.local.id))

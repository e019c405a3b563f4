"""Deterministic discrete-event driver for the sans-IO cores.

A heap of timestamped events (message arrivals, timers, unreachable reports and
scheduled scenario actions) ordered by ``(time, sequence)``. All randomness comes from
one seeded ``random.Random``: the same seed gives byte-identical traces, and every
failure it shows can be replayed.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from overlay.core.effects import Deliver, Notice, Persist, Send, SyncWanted, Trace
from overlay.core.errors import LocalProtocolError
from overlay.core.framing import decode_map, encode_map
from overlay.core.limits import DEFAULT_MAX_FRAME
from overlay.core.messages import Message, decode_message, encode_message
from overlay.core.protocol import ProtocolCore
from overlay.core.pubsub import DeliveredEvent
from overlay.core.storage import LINGER_SECONDS, StorageOp, SyncPolicy
from overlay.core.tracing import NodeTracer
from overlay.sim.network import Network, NetworkConfig

C = TypeVar("C", bound=ProtocolCore)

_ARRIVE, _TIMER, _UNREACHABLE, _ACTION, _SYNCED, _FLUSHED, _COMMIT = range(7)


class DurableState(Protocol):
    """What survives a node's crash: operations applied to it (scribe.MemoryLogs)."""

    def apply(self, ops: list[StorageOp]) -> None: ...

    def salvage(self, ops: list[StorageOp]) -> list[StorageOp]:
        """What is kept of ``ops`` when writing them failed (``overlay.core.storage``)."""
        ...


@dataclass
class SimStorage:
    """A node's disk: ``durable`` survives crashes; ``unsynced`` operations (written, not
    yet on stable storage) are lost with the node, as a power cut loses a page cache."""

    durable: DurableState
    unsynced: list[StorageOp] = field(default_factory=list)
    #: Persists the node's current incarnation emitted, and how far they are synced.
    written: int = 0
    synced: int = 0
    #: A sync under way or lingering (always), or a flush scheduled (interval, never).
    busy: bool = False
    #: The highest persist the core waits for (``SyncWanted``).
    wanted: int = 0
    #: (always) The next group's sync waits for ``LINGER_SECONDS`` or a ``SyncWanted``.
    lingering: bool = False
    #: Bumped whenever a lingering group is scheduled: an earlier schedule is void.
    linger_token: int = 0
    #: Bumped at a crash: a sync or flush begun before it completes nothing.
    generation: int = 0
    #: While set, every commit fails with this error, as on a full disk
    #: (:meth:`Simulator.fail_storage`).
    failing: str | None = None


@dataclass
class SimNode:
    """A core placed in the simulation, with its liveness and pending timer."""

    core: ProtocolCore
    node_hex: str
    alive: bool = True
    timer_at: float | None = None
    timer_generation: int = 0
    tracer: NodeTracer | None = None
    storage: SimStorage | None = None


@dataclass
class SimStats:
    events: int = 0
    messages_sent: int = 0
    messages_lost: int = 0
    unreachable: int = 0
    by_type: dict[str, int] = field(default_factory=dict)


#: Called with (node address, subscription, event, now) for each event a core delivers.
DeliverHook = Callable[[str, int, DeliveredEvent, float], None]
NoticeHook = Callable[[str, Notice, float], None]


class Simulator:
    """Runs cores against simulated time and a simulated network."""

    def __init__(
        self,
        seed: int,
        network: NetworkConfig | None = None,
        trace_dir: Path | str | None = None,
        run_id: str | None = None,
        check_wire: bool = True,
        max_frame: int = DEFAULT_MAX_FRAME,
        sync: SyncPolicy | None = None,
        sync_seconds: float = 0.002,
        linger_seconds: float = LINGER_SECONDS,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.network = Network(network or NetworkConfig(), random.Random(f"{seed}:network"))
        self.now = 0.0
        self.nodes: dict[str, SimNode] = {}
        self.stats = SimStats()
        self.trace_dir = Path(trace_dir) if trace_dir is not None else None
        self.run_id = run_id
        #: Round-trip every message through the CBOR codec, as a daemon's transport
        #: would (proves wire-safety: every message of the cores crosses the codec).
        self.check_wire = check_wire
        #: With ``check_wire``: a message over this many bytes is a bug of ours (the
        #: daemon's transport would refuse it), raised at its sender.
        self.max_frame = max_frame
        #: How the nodes' disks sync (scribe.durability): ``always`` reports a persist
        #: synced once a sync of ``sync_seconds`` that began after it ended (group
        #: commit); ``interval`` and ``never`` report it at once and make it durable at
        #: the next flush (every interval; every 30 s for ``never``, as an OS writes back).
        #: Under ``always`` a group nobody waits for begins ``linger_seconds`` after it
        #: could (``LINGER_SECONDS``, as the daemon's store), or at a ``SyncWanted``.
        self.sync = sync or SyncPolicy()
        self.linger_seconds = linger_seconds
        self.sync_seconds = sync_seconds
        self.on_deliver: list[DeliverHook] = []
        self.on_notice: list[NoticeHook] = []
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0

    # -- building the world ----------------------------------------------------------

    def node_rng(self, addr: str) -> random.Random:
        """The seeded RNG a core at ``addr`` should be given."""
        return random.Random(f"{self.seed}:{addr}")

    def add_node(
        self, core: C, node_hex: str, coords: tuple[float, float] | None = None,
        storage: DurableState | None = None,
    ) -> C:
        """Place ``core``; ``storage``: its disk, for a core that persists. A node
        restarted at a crashed node's address (a new core) keeps that node's disk and
        tracer."""
        addr = core.address
        old = self.nodes.get(addr)
        if old is not None and old.alive:
            raise ValueError(f"a live node already has address {addr}")
        if old is not None:
            tracer, disk = old.tracer, old.storage
            if disk is not None:
                disk.written = disk.synced = disk.wanted = 0
                disk.busy = disk.lingering = False
        else:
            tracer = None
            if self.trace_dir is not None:
                tracer = NodeTracer(self.trace_dir, node_hex, run=self.run_id)
            disk = None if storage is None else SimStorage(storage)
            self.network.place(addr, coords)
        self.nodes[addr] = SimNode(core, node_hex, tracer=tracer, storage=disk)
        return core

    def storage(self, addr: str) -> DurableState | None:
        """What a node's disk holds durably (survives its crashes)."""
        disk = self.nodes[addr].storage
        return None if disk is None else disk.durable

    def fail_storage(self, addr: str, error: str | None = "disk full (simulated)") -> None:
        """From now on every commit of ``addr``'s disk fails with ``error`` (None: they
        succeed again): what the store salvages of it is kept, and the core is told
        (``on_storage_failed``). Only with ``sync = always``, where a commit is the
        sync the core waits for."""
        if self.sync.mode != "always":
            raise ValueError("storage failures are simulated with sync = always only")
        disk = self.nodes[addr].storage
        if disk is None:
            raise ValueError(f"node {addr} has no storage")
        disk.failing = error

    def core(self, addr: str) -> ProtocolCore:
        return self.nodes[addr].core

    def alive(self, addr: str) -> bool:
        node = self.nodes.get(addr)
        return node is not None and node.alive

    def live_addresses(self) -> list[str]:
        return [addr for addr, node in self.nodes.items() if node.alive]

    # -- scheduling --------------------------------------------------------------------

    def _push(self, at: float, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, kind, payload))

    def at(self, when: float, action: Callable[[], Any]) -> None:
        """Run ``action()`` at simulated time ``when`` (scenario scripting)."""
        self._push(max(when, self.now), _ACTION, action)

    def invoke(self, addr: str, call: Callable[[Any, float], Any]) -> Any:
        """Call ``call(core, now)`` on a live node now and carry out its effects."""
        node = self.nodes[addr]
        if not node.alive:
            # A scenario that calls a crashed node has a bug (it should ask ``alive``):
            # not a ValueError, which the command line reports as a usage error.
            raise LookupError(f"node {addr} is not alive: a scenario must not call it")
        result = call(node.core, self.now)
        self._after_input(addr, node)
        return result

    def crash(self, addr: str) -> None:
        """Stop a node at once: no leave, no flush of anything it had not sent."""
        node = self.nodes[addr]
        if not node.alive:
            return
        node.alive = False
        node.timer_generation += 1
        node.timer_at = None
        disk = node.storage
        if disk is not None:  # what was not on stable storage is gone
            disk.unsynced.clear()
            disk.generation += 1
            disk.busy = disk.lingering = False
        self._trace(node, "node_down", {"reason": "crash"})

    def partition(self, groups: list[list[str]]) -> None:
        self.network.partition(groups)

    def heal(self) -> None:
        self.network.heal()

    # -- running -------------------------------------------------------------------------

    def run(self, until: float | None = None, max_events: int | None = None) -> None:
        """Process events in time order up to ``until`` (inclusive) or until none is left."""
        heap = self._heap
        processed = 0
        while heap:
            at = heap[0][0]
            if until is not None and at > until:
                break
            _, _, kind, payload = heapq.heappop(heap)
            self.now = at
            self.stats.events += 1
            processed += 1
            if kind == _ARRIVE:
                self._arrive(*payload)
            elif kind == _TIMER:
                self._timer(*payload)
            elif kind == _UNREACHABLE:
                self._unreachable(*payload)
            elif kind == _SYNCED:
                self._synced(*payload)
            elif kind == _FLUSHED:
                self._flushed(*payload)
            elif kind == _COMMIT:
                self._lingered(*payload)
            else:
                payload()
            if max_events is not None and processed >= max_events:
                return
        if until is not None:
            self.now = max(self.now, until)

    def close(self) -> None:
        """Flush every node's trace file."""
        for node in self.nodes.values():
            if node.tracer is not None:
                node.tracer.close()

    # -- event handlers ------------------------------------------------------------------

    def _arrive(self, src: str, dest: str, msg: Message) -> None:
        node = self.nodes.get(dest)
        if node is None or not node.alive:
            return
        node.core.on_message(self.now, src, msg)
        self._after_input(dest, node)

    def _timer(self, addr: str, generation: int) -> None:
        node = self.nodes[addr]
        if not node.alive or generation != node.timer_generation:
            return
        node.timer_at = None
        node.core.on_timer(self.now)
        self._after_input(addr, node)

    def _unreachable(self, src: str, dest: str, msg: Message) -> None:
        node = self.nodes[src]
        if not node.alive:
            return
        self.stats.unreachable += 1
        node.core.on_unreachable(self.now, dest, msg)
        self._after_input(src, node)

    def _after_input(self, addr: str, node: SimNode) -> None:
        for effect in node.core.drain_effects():
            if isinstance(effect, Send):
                self._send(addr, effect.dest, effect.msg)
            elif isinstance(effect, Trace):
                self._trace(node, effect.ev, effect.fields)
            elif isinstance(effect, Deliver):
                for event in effect.events:
                    for deliver_hook in self.on_deliver:
                        deliver_hook(addr, effect.sub, event, self.now)
            elif isinstance(effect, Notice):
                for notice_hook in self.on_notice:
                    notice_hook(addr, effect, self.now)
            elif isinstance(effect, Persist):
                self._persist(addr, node, effect.op)
            elif isinstance(effect, SyncWanted):
                self._want(addr, node, effect.through)
        if not node.alive:
            return
        deadline = node.core.next_deadline()
        if deadline != node.timer_at:
            node.timer_generation += 1
            node.timer_at = deadline
            if deadline is not None:
                self._push(max(deadline, self.now), _TIMER, (addr, node.timer_generation))

    # -- storage ----------------------------------------------------------------------------

    def _persist(self, addr: str, node: SimNode, op: StorageOp) -> None:
        disk = node.storage
        if disk is None:
            raise LocalProtocolError(f"node {addr} persisted, but was given no storage")
        disk.unsynced.append(op)
        disk.written += 1
        if self.sync.mode != "always":
            # Acknowledged once written: durable at the next flush.
            self._push(self.now, _SYNCED, (addr, disk.generation, disk.written, False))
        if not disk.busy:
            disk.busy = True
            if self.sync.mode == "always":
                self._next_group(addr, disk)
            else:
                every = self.sync.interval_ms / 1000 if self.sync.mode == "interval" else 30.0
                self._push(self.now + every, _FLUSHED, (addr, disk.generation))

    def _synced(self, addr: str, generation: int, through: int, durable: bool) -> None:
        node = self.nodes[addr]
        disk = node.storage
        if disk is None or generation != disk.generation or not node.alive:
            return  # the node crashed meanwhile: this sync never completed
        failed = durable and disk.failing is not None
        advanced = through > disk.synced
        disk.synced = max(disk.synced, through)
        if durable:  # a group commit: everything written before it began
            count = through - (disk.written - len(disk.unsynced))
            ops = disk.unsynced[:count]
            disk.durable.apply(disk.durable.salvage(ops) if failed else ops)
            del disk.unsynced[:count]
            disk.busy = False
            if disk.unsynced:  # written while it ran: the next group
                disk.busy = True
                self._next_group(addr, disk)
        if advanced:
            if failed:
                assert disk.failing is not None
                node.core.on_storage_failed(self.now, through, disk.failing)
            else:
                node.core.on_synced(self.now, through)
            self._after_input(addr, node)

    def _next_group(self, addr: str, disk: SimStorage) -> None:
        """(always) The unsynced persists' group: its sync begins now if the core waits
        for one of them, else after ``linger_seconds`` or at the first ``SyncWanted``."""
        if disk.wanted > disk.synced or self.linger_seconds <= 0:
            self._begin_sync(addr, disk)
            return
        disk.lingering = True
        disk.linger_token += 1
        self._push(self.now + self.linger_seconds, _COMMIT,
                   (addr, disk.generation, disk.linger_token))

    def _begin_sync(self, addr: str, disk: SimStorage) -> None:
        disk.lingering = False
        self._push(self.now + self.sync_seconds, _SYNCED,
                   (addr, disk.generation, disk.written, True))

    def _lingered(self, addr: str, generation: int, token: int) -> None:
        disk = self.nodes[addr].storage
        if disk is not None and generation == disk.generation and disk.lingering and \
                token == disk.linger_token:
            self._begin_sync(addr, disk)

    def _want(self, addr: str, node: SimNode, through: int) -> None:
        disk = node.storage
        if disk is None:
            return
        disk.wanted = max(disk.wanted, through)
        if disk.lingering:
            self._begin_sync(addr, disk)

    def _flushed(self, addr: str, generation: int) -> None:
        disk = self.nodes[addr].storage
        if disk is None or generation != disk.generation:
            return
        disk.durable.apply(disk.unsynced)
        disk.unsynced.clear()
        disk.busy = False

    def _send(self, src: str, dest: str, msg: Message) -> None:
        stats = self.stats
        stats.messages_sent += 1
        type_name = msg.type_name
        stats.by_type[type_name] = stats.by_type.get(type_name, 0) + 1
        if self.check_wire:
            body = encode_map(encode_message(msg))
            if len(body) > self.max_frame:
                raise LocalProtocolError(f"{type_name} of {len(body)} bytes from {src} is over "
                                         f"max_frame {self.max_frame}")
            msg = decode_message(decode_map(body))
        target = self.nodes.get(dest)
        if target is None or not target.alive or not self.network.connected(src, dest):
            self._push(self.now + self.network.config.unreachable_after, _UNREACHABLE,
                       (src, dest, msg))
            return
        if self.network.lost(src, dest):
            stats.messages_lost += 1
            return
        self._push(self.network.arrival(self.now, src, dest), _ARRIVE, (src, dest, msg))

    def _trace(self, node: SimNode, ev: str, fields: dict[str, Any]) -> None:
        if node.tracer is not None:
            node.tracer.write(self.now, ev, fields)

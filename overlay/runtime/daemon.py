"""The daemon: one node's Chord core (and the application plugged into it) on TCP.

One trio nursery owns everything: the :class:`Transport`, the :class:`CoreDriver` feeding
the core, the trace flusher (every second) and whatever services an extension adds. Start:
bind, then join through the seeds (or create a ring when there are none). Stop
(:meth:`Daemon.stop`, or SIGTERM/SIGINT through :func:`run_until_signalled`): graceful
leave, which hands our keys over to the neighbours and writes ``node_down``; then the
traces are flushed and :meth:`Daemon.run` returns.

Extending it (the local API server of a later issue, an application core):

- ``app_factory`` builds the :class:`~chord.kbr.KbrApplication` around the node
  (``lambda node: ScribeApp(node)``); the driver then carries out its effects too;
- ``services``: ``async def service(daemon)`` tasks started in the nursery once the
  node serves, cancelled when it stops;
- ``deliver_handlers`` / ``notice_handlers``: called with each ``Deliver`` / ``Notice``;
- ``request_handlers``: transport-level requests by message type, answered at once
  without the core (``chord.state_query`` is one);
- :meth:`Daemon.call` runs ``fn(core, now)`` on the trio thread and carries out its
  effects (what an API request does).
"""

from __future__ import annotations

import contextlib
import logging
import random
import signal
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import trio

from chord.config import ChordConfig
from chord.kbr import KbrApplication
from chord.messages import RingState, StateQuery
from chord.node import ChordNode
from overlay.core.effects import Deliver, Notice
from overlay.core.messages import Message
from overlay.core.protocol import ProtocolCore
from overlay.core.tracing import NodeTracer
from overlay.runtime.config import ConfigError, DaemonConfig
from overlay.runtime.crypto import load_key
from overlay.runtime.driver import CoreDriver
from overlay.runtime.logstore import LOG_FILE, LoadReport, LogStore, StorageError
from overlay.runtime.storage_worker import StorageWorker
from overlay.runtime.transport import Inbound, Transport, TransportConfig, Unreachable
from overlay.runtime.turn_writes import TurnWrites
from scribe.durability import RestoredConsumer, RestoredLog

T = TypeVar("T")
log = logging.getLogger("overlay.daemon")
AppFactory = Callable[[ChordNode], KbrApplication]
RequestHandler = Callable[[str, Message], Message | None]

#: Inputs queued for the core before the transport stops reading (TCP then pushes back).
INBOX_SIZE = 4096
TRACE_FLUSH_INTERVAL = 1.0


def transport_config(config: DaemonConfig) -> TransportConfig:
    host, _, port = config.bind.rpartition(":")
    key = None if config.cluster_key_file is None else load_key(config.cluster_key_file)
    return TransportConfig(bind_host=host.strip("[]"), bind_port=int(port),
                           advertised=config.advertise, cluster_key=key,
                           max_frame=config.limits.max_frame,
                           send_queue_frames=config.limits.peer_queue_frames,
                           delay=config.peer_delay_ms / 1000.0)


C = TypeVar("C", bound=ProtocolCore)


class CoreKind(Protocol[C]):
    """What kind of protocol core a daemon runs (:class:`ChordKind` in structured mode,
    ``GossipKind`` in unstructured mode): how it is built, started and stopped."""

    def build(self, address: str, rng: random.Random) -> C: ...

    def start(self, core: C, now: float, seeds: tuple[str, ...]) -> None: ...

    def stop(self, core: C, now: float) -> bool:
        """Begin a graceful stop; True when a ``left`` notice will say it is done."""
        ...

    def leave_timeout(self) -> float:
        """Seconds a graceful stop may wait for its ``left`` notice."""
        ...

    @property
    def durable(self) -> bool:
        """Whether the core persists (then the daemon gives it a store, and restores
        what the store kept before it starts)."""
        ...

    def restore(self, core: C, now: float, report: LoadReport) -> None:
        """Hand the core what its store kept from the last run (before ``start``): the
        topic logs, the durable consumers, and whether the store was refused whole (its
        topics are unknown)."""
        ...


@dataclass(frozen=True)
class ChordKind:
    """A Chord node, with the application ``app_factory`` builds around it (Scribe)."""

    config: ChordConfig = field(default_factory=ChordConfig)
    app_factory: AppFactory | None = None
    #: The application persists (scribe's durable logs): see :meth:`restore`.
    durable: bool = False

    @staticmethod
    def of(config: DaemonConfig, app_factory: AppFactory | None = None,
           durable: bool = False) -> ChordKind:
        """The Chord settings of a daemon config's ``[protocol]`` table (ConfigError)."""
        try:
            return ChordKind(ChordConfig.from_mapping(config.protocol), app_factory, durable)
        except ValueError as exc:
            raise ConfigError(f"[protocol]: {exc}") from None

    def build(self, address: str, rng: random.Random) -> ChordNode:
        node = ChordNode(address, rng, self.config)
        if self.app_factory is not None:
            node.app = self.app_factory(node)
        return node

    def start(self, core: ChordNode, now: float, seeds: tuple[str, ...]) -> None:
        core.join(now, seeds)

    def stop(self, core: ChordNode, now: float) -> bool:
        core.leave(now)  # hands our keys over; a ``left`` notice follows
        return True

    def leave_timeout(self) -> float:
        # The core gives up on silent neighbours after its own RPC time-outs.
        return self.config.rpc_timeout * self.config.rpc_attempts + 1.0

    def restore(self, core: ChordNode, now: float, report: LoadReport) -> None:
        app = core.app
        if not isinstance(app, Restorable):
            raise TypeError("a durable ChordKind needs an application that restores logs")
        app.restore(now, report.logs, report.ms, report.refused, report.consumers,
                    report.range_start)


@runtime_checkable
class Restorable(Protocol):
    """An application with durable state (ScribeApp)."""

    def restore(self, now: float, logs: list[RestoredLog], load_ms: float,
                lost: bool, consumers: list[RestoredConsumer] | None,
                range_start: int | None) -> None: ...


class Daemon(Generic[C]):
    def __init__(self, config: DaemonConfig, kind: CoreKind[C],
                 rng: random.Random | None = None) -> None:
        self.config = config
        self.kind = kind
        self.rng = rng or random.Random()
        self.services: list[Callable[[Daemon[C]], Awaitable[None]]] = []
        self.deliver_handlers: list[Callable[[Deliver], None]] = []
        self.notice_handlers: list[Callable[[Notice], None]] = []
        self.request_handlers: dict[type[Message], RequestHandler] = {
            StateQuery: self._answer_state_query}
        #: The protocol core ``kind`` builds, once the daemon runs.
        self.node: C | None = None
        self.driver: CoreDriver[C] | None = None
        self.tracer: NodeTracer | None = None
        #: The topic logs, while the daemon runs a durable kind.
        self.storage: StorageWorker | None = None
        #: The API connections' frames a step causes are written when it ends (the API
        #: server and the driver share it: docs/DESIGN.md, "The daemon").
        self.turn_writes = TurnWrites()
        self.address: str | None = None
        self._stop_requested = trio.Event()
        self._left = trio.Event()
        #: Set once :meth:`run` has returned (or failed).
        self.stopped = trio.Event()

    # -- running -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until :meth:`stop`; ``task_status.started`` gets our advertised address."""
        send_channel, receive_channel = trio.open_memory_channel[Inbound | Unreachable](
            INBOX_SIZE)
        transport = Transport(transport_config(self.config), send_channel)
        try:
            async with trio.open_nursery() as nursery:
                self.address = await nursery.start(transport.run)
                node = self.node = self.kind.build(self.address, self.rng)
                if self.config.trace_dir is not None:
                    self.tracer = NodeTracer(self.config.trace_dir, node.node_hex,
                                             keep_open=True)
                kind = self.kind
                report: LoadReport | None = None
                if kind.durable:
                    store, report = await self._open_store(node.node_hex)
                    self.storage = StorageWorker(store)
                self.driver = CoreDriver(node, transport, self.tracer,
                                         on_deliver=self._on_deliver,
                                         on_notice=self._on_notice,
                                         on_request=self._on_request,
                                         storage=self.storage,
                                         turn_writes=self.turn_writes)
                nursery.start_soon(self.driver.run, receive_channel)
                nursery.start_soon(self._flush_traces)
                if self.storage is not None:
                    nursery.start_soon(self.storage.run, self._synced, self._storage_failed)
                for service in self.services:
                    nursery.start_soon(service, self)
                if report is not None:
                    loaded = report
                    self.call(lambda core, now: kind.restore(core, now, loaded))
                    for topic, problem in report.dropped:
                        self.driver.trace("storage_dropped", topic=topic, reason=problem)
                self.call(lambda core, now: kind.start(core, now, self.config.seeds))
                task_status.started(self.address)
                await self._stop_requested.wait()
                await self._leave()
                nursery.cancel_scope.cancel()
        finally:
            if self.storage is not None:
                self.storage.write_queued()
                self.storage.store.close()
            if self.tracer is not None:
                self.tracer.close()
            self.stopped.set()

    async def _open_store(self, node_hex: str) -> tuple[LogStore, LoadReport]:
        """Open and load the topic logs; a file that cannot be served (damaged, another
        node's) is moved aside, said so in the log and a trace record, and the node starts
        with an empty one: its topics come back from their replicas."""
        path = self.config.state_dir / LOG_FILE
        policy, max_bytes = self.config.storage.sync, self.config.storage.max_bytes

        def open_and_load() -> tuple[LogStore, LoadReport]:
            store = LogStore(path, node_hex, policy, max_bytes)
            try:
                return store, store.load()
            except StorageError:
                store.close()
                raise

        try:
            return await trio.to_thread.run_sync(open_and_load)
        except StorageError as exc:
            aside = path.with_name(f"{path.name}.refused-{int(time.time())}")
            log.error("storage: %s; moved to %s, starting with empty logs", exc, aside)
            for suffix in ("", "-wal", "-shm"):
                source = path.with_name(path.name + suffix)
                if source.exists():
                    source.replace(aside.with_name(aside.name + suffix))
            store = await trio.to_thread.run_sync(LogStore, path, node_hex, policy, max_bytes)
            return store, LoadReport(dropped=[(None, str(exc))], refused=True)

    def _synced(self, through: int) -> None:
        self.call(lambda core, now: core.on_synced(now, through))

    def _storage_failed(self, through: int, reason: str) -> None:
        self.call(lambda core, now: core.on_storage_failed(now, through, reason))

    def stop(self) -> None:
        """Leave gracefully and return from :meth:`run` (safe to call more than once)."""
        self._stop_requested.set()

    def call(self, fn: Callable[[C, float], T]) -> T:
        """Run ``fn(node, now)`` on the core and carry out its effects."""
        if self.driver is None:
            raise RuntimeError("the daemon is not running")
        return self.driver.call(fn)

    def batch(self) -> AbstractContextManager[None]:
        """Calls inside carry out their effects together at the end
        (:meth:`CoreDriver.batch`); nothing inside may await."""
        if self.driver is None:
            return contextlib.nullcontext()
        return self.driver.batch()

    async def _leave(self) -> None:
        kind = self.kind
        if not self.call(lambda core, now: kind.stop(core, now)):
            return
        with trio.move_on_after(kind.leave_timeout()):
            await self._left.wait()

    async def _flush_traces(self) -> None:
        while True:
            await trio.sleep(TRACE_FLUSH_INTERVAL)
            if self.tracer is not None:
                self.tracer.flush()

    # -- effects and requests ------------------------------------------------------------------

    def _on_deliver(self, effect: Deliver) -> None:
        for handler in self.deliver_handlers:
            handler(effect)

    def _on_notice(self, notice: Notice) -> None:
        if notice.kind == "left":
            self._left.set()
        for handler in self.notice_handlers:
            handler(notice)

    def _on_request(self, src: str, msg: Message) -> Message | None:
        handler = self.request_handlers.get(type(msg))
        return None if handler is None else handler(src, msg)

    def _answer_state_query(self, src: str, msg: Message) -> RingState | None:
        return self.node.state() if isinstance(self.node, ChordNode) else None


async def run_until_signalled(daemon: Daemon[C], on_ready: Callable[[str], Any]) -> None:
    """Run ``daemon`` until SIGTERM or SIGINT, then let it leave gracefully."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for _ in signals:
                    daemon.stop()
                    return

            nursery.start_soon(stop_on_signal)
            on_ready(await nursery.start(daemon.run))
            await daemon.stopped.wait()
            nursery.cancel_scope.cancel()


async def query_state(transport: Transport, address: str, timeout: float = 5.0) -> RingState:
    """Ask the daemon at ``address`` for its ring state (tests, ring checks)."""
    answer = await transport.request(address, StateQuery(), timeout=timeout)
    if not isinstance(answer, RingState):
        raise TypeError(f"{address} answered a state query with {type(answer).__name__}")
    return answer


__all__ = ["ChordKind", "CoreKind", "Daemon", "query_state", "run_until_signalled",
           "transport_config"]

"""Drives one sans-IO core with trio: transport input, timers, application calls, effects.

All calls into the core happen on the trio thread between awaits, so the core needs no
locks. Application code (the API server) calls :meth:`CoreDriver.call`, which runs the
core method and carries out its effects at once, or, inside :meth:`CoreDriver.batch`,
together with those of the batch's other calls when the batch ends; the main loop's wait
is re-armed when a call moves the core's next deadline earlier.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

import trio

from overlay.core.effects import Deliver, Effect, Notice, Persist, Send, SyncWanted, Trace
from overlay.core.errors import LocalProtocolError, OverlayError
from overlay.core.messages import Message
from overlay.core.protocol import ProtocolCore
from overlay.core.storage import StorageOp
from overlay.core.tracing import NodeTracer
from overlay.runtime.transport import Inbound, Transport, Unreachable
from overlay.runtime.turn_writes import TurnWrites

log = logging.getLogger("overlay.driver")

T = TypeVar("T")
C = TypeVar("C", bound=ProtocolCore)
RequestHandler = Callable[[str, Message], Message | None]


class StorageQueue(Protocol):
    """Where a core's storage operations go (:class:`~overlay.runtime.storage_worker.
    StorageWorker`)."""

    def submit(self, op: StorageOp) -> None:
        """Apply ``op`` after those submitted before it."""

    def want(self, through: int) -> None:
        """Something waits for the operations up to the ``through``-th: no delay."""


class CoreDriver(Generic[C]):
    def __init__(
        self,
        core: C,
        transport: Transport,
        tracer: NodeTracer | None = None,
        on_deliver: Callable[[Deliver], None] | None = None,
        on_notice: Callable[[Notice], None] | None = None,
        on_request: RequestHandler | None = None,
        wallclock: Callable[[], float] = time.time,
        storage: StorageQueue | None = None,
        turn_writes: TurnWrites | None = None,
    ) -> None:
        self.core = core
        #: The frames the effects of a step cause (notifies, replies) are written when
        #: they are all carried out (none: by the writers' own tasks).
        self.turn_writes = TurnWrites() if turn_writes is None else turn_writes
        #: Where ``Persist`` effects go, in order, and ``SyncWanted`` (a StorageWorker);
        #: a core that persists runs only with one.
        self.storage = storage
        self.transport = transport
        self.tracer = tracer
        self.on_deliver = on_deliver
        self.on_notice = on_notice
        self.on_request = on_request
        self.wallclock = wallclock
        self._wait_scope: trio.CancelScope | None = None
        #: Exceptions raised inside the core by one input (a peer message, a timer, an
        #: application call that was not refused as bad input): bugs of ours, each
        #: logged with its traceback; the node goes on with the core as that step left it.
        self.internal_errors = 0
        #: Inside :meth:`batch`: each call's effects with the wall-clock time they came at.
        self._held: list[tuple[float, list[Effect]]] | None = None

    def now(self) -> float:
        return trio.current_time()

    def call(self, fn: Callable[[C, float], T]) -> T:
        """Run ``fn(core, now)`` and carry out what it asked for (inside :meth:`batch`:
        when the batch ends)."""
        try:
            result = fn(self.core, self.now())
        except (OverlayError, ValueError, LookupError):
            raise  # the caller's input refused (the API answers with its error code)
        except Exception:
            self.internal_errors += 1
            log.exception("internal error in an application call into the core")
            raise
        held = self._held
        if held is None:
            self.apply_effects()
        else:
            effects = self.core.drain_effects()
            if effects:
                held.append((self.wallclock(), effects))
        return result

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Calls made inside carry out their effects together when it ends, in call
        order, each call's trace records stamped with the time of that call: the
        per-step costs (trace writing, re-arming the wait) are paid once for a burst of
        requests (a client's pipelined publishes). Inside, nothing may await: other
        tasks' effects would wait behind the batch. Nested batches join the outer one."""
        if self._held is not None:
            yield
            return
        held: list[tuple[float, list[Effect]]] = []
        self._held = held
        try:
            yield
        finally:
            self._held = None
            self._carry_out(held)
            self._rearm()

    def trace(self, ev: str, **fields: Any) -> None:
        """A trace record from the runtime itself (node_up, node_down)."""
        if self.tracer is not None:
            self.tracer.write(self.wallclock(), ev, fields)

    async def run(self, inbox: trio.MemoryReceiveChannel[Inbound | Unreachable],
                  batch: int = 512) -> None:
        """Feed the core until cancelled.

        After each wait, up to ``batch`` queued inputs are handled before effects are
        carried out, so that a burst costs one pass through the scheduler, and the sends
        it causes leave in one batch per peer.
        """
        core = self.core
        while True:
            deadline = core.next_deadline()
            item: Inbound | Unreachable | None = None
            with trio.CancelScope(deadline=math.inf if deadline is None else deadline) as scope:
                self._wait_scope = scope
                item = await inbox.receive()
            self._wait_scope = None
            now = self.now()
            handled = 0
            while item is not None:
                try:
                    if isinstance(item, Inbound):
                        self._on_inbound(now, item)
                    else:
                        core.on_unreachable(now, item.dest, item.msg)
                except Exception:
                    self._step_failed(item)
                handled += 1
                item = None
                if handled < batch:
                    with contextlib.suppress(trio.WouldBlock):
                        item = inbox.receive_nowait()
            deadline = core.next_deadline()
            if deadline is not None and deadline <= now:
                try:
                    core.on_timer(now)
                except Exception:
                    self._step_failed("timer")
            self.apply_effects()

    def _step_failed(self, what: Inbound | Unreachable | str) -> None:
        """A core step raised: a bug of ours, not the peer's (its message decoded and
        validated). The step's effects made before it raised are carried out, the rest
        of it is lost, as if a message had been; the protocols' repair (heartbeats,
        pulls, re-joins, retries) treats the topic as after a lost message. The node
        keeps serving everyone else."""
        self.internal_errors += 1
        if isinstance(what, Inbound):
            where = f"handling {what.msg.type_name} from {what.src}"
        elif isinstance(what, Unreachable):
            where = f"handling unreachable {what.dest}"
        else:
            where = f"handling a {what}"
        log.exception("internal error %s", where)

    def _on_inbound(self, now: float, item: Inbound) -> None:
        if item.rid is not None and self.on_request is not None:
            answer = self.on_request(item.src, item.msg)
            if answer is not None:
                self.transport.reply(item.src, item.rid, answer)
                return
        self.core.on_message(now, item.src, item.msg)

    def apply_effects(self) -> None:
        effects = self.core.drain_effects()
        if effects:
            # One time stamp for the records of one core step: they happened at one ``now``.
            self._carry_out([(self.wallclock(), effects)])
        self._rearm()

    def _carry_out(self, steps: list[tuple[float, list[Effect]]]) -> None:
        """Each step's effects in order; the trace records of all steps in one write.

        A handler that fails is a bug of ours: it is logged and the other effects are
        still carried out (a batch holds many clients' events). The frames they cause on
        API connections are written when all are carried out (``turn_writes``).
        """
        turn_writes = self.turn_writes
        if turn_writes.under_way:  # a reader's turn: it writes when it ends
            self._carry_out_steps(steps)
            return
        with turn_writes.turn():
            self._carry_out_steps(steps)

    def _carry_out_steps(self, steps: list[tuple[float, list[Effect]]]) -> None:
        records: list[tuple[float, str, dict[str, Any]]] = []
        for ts, effects in steps:
            for effect in effects:
                try:
                    if isinstance(effect, Trace):  # the most frequent: several per event
                        records.append((ts, effect.ev, effect.fields))
                    elif isinstance(effect, Send):
                        self.transport.send(effect.dest, effect.msg)
                    elif isinstance(effect, Deliver):
                        if self.on_deliver is not None:
                            self.on_deliver(effect)
                    elif isinstance(effect, Notice):
                        if self.on_notice is not None:
                            self.on_notice(effect)
                    elif isinstance(effect, Persist):
                        if self.storage is None:
                            raise RuntimeError("a core persisted with no store to persist to")
                        self.storage.submit(effect.op)
                    elif isinstance(effect, SyncWanted) and self.storage is not None:
                        self.storage.want(effect.through)
                except LocalProtocolError:
                    log.exception("core asked to send an unsendable message")
                except Exception:
                    log.exception("internal error carrying out %s", type(effect).__name__)
        if records and self.tracer is not None:
            self.tracer.write_all(records)

    def _rearm(self) -> None:
        scope = self._wait_scope
        if scope is not None:
            deadline = self.core.next_deadline()
            deadline = math.inf if deadline is None else deadline
            if deadline != scope.deadline:  # setting it costs, even to the same value
                scope.deadline = deadline

"""``ChordNode``: the Chord core (a sans-IO :class:`~overlay.core.protocol.ProtocolCore`)
and the KBR host its application is plugged into (:class:`~chord.kbr.KbrHost`).

The node owns the ring state (predecessor, successor list, finger table) and dispatches
inputs to the parts that act on it: :mod:`chord.maintenance` (join, stabilize/notify,
fix_fingers, check_predecessor, merge probes), :mod:`chord.lookup` (iterative lookups)
and :mod:`chord.routing` (KBR route). After every input it compares its neighbours with
what it last reported: a ``ring`` trace record when the successor or predecessor moved,
``app.update`` for every node that entered or left the neighbour set.

Notices (``Notice`` effects): ``lookup`` (``key``, ``owner`` NodeRef or None, ``hops``,
``ok``, ``tag``) when a :meth:`ChordNode.lookup` ends; ``left`` when a graceful
:meth:`ChordNode.leave` has handed over (or timed out trying).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable
from typing import Any

from chord.config import ChordConfig
from chord.fingers import FingerTable, RoutingIndex
from chord.kbr import KbrApplication, NodeRef
from chord.lookup import Lookups
from chord.maintenance import Maintenance
from chord.messages import (
    FindSuccessor,
    Found,
    GetNeighbours,
    Leave,
    LeaveAck,
    Neighbours,
    Notify,
    Ping,
    Pong,
    RingState,
    Route,
    RouteAck,
    SuccessorHint,
)
from chord.ring import hex_id, in_half_open, node_id
from chord.routing import Router
from chord.rpc import Calls
from chord.successors import SuccessorList
from overlay.core.errors import LocalProtocolError
from overlay.core.messages import Message
from overlay.core.protocol import CoreBase
from overlay.core.records import TRACE_VERSION
from overlay.core.timers import Timers

#: Requests whose failure the RPC layer handles (their answer carries the same rid).
_REQUESTS = (FindSuccessor, GetNeighbours, Ping, Leave)
_ANSWERS = (Found, Neighbours, Pong, LeaveAck)


class ChordNode(CoreBase):
    """One Chord node. ``app`` (a :class:`KbrApplication`) may be set after construction,
    as applications are usually built around their host: ``node.app = ScribeApp(node)``."""

    def __init__(self, address: str, rng: random.Random, config: ChordConfig | None = None,
                 app: KbrApplication | None = None) -> None:
        super().__init__(address)
        self.config = config = config or ChordConfig()
        self.bits = config.bits
        self.ring_size = 1 << config.bits
        self.local = NodeRef(node_id(address, config.bits), address)
        self.node_hex = hex_id(self.local.id, config.bits)
        self.rng = rng
        self.app = app
        self.timers = Timers()
        self.calls = Calls(self.timers, config.rpc_timeout, config.rpc_attempts, self.send,
                           self.peer_failed)
        self.successors = SuccessorList(self.local, config.successors, self.ring_size)
        self.fingers = FingerTable(self.local, config.bits)
        self.pred: NodeRef | None = None
        #: When the predecessor last sent us anything (check_predecessor spares it a
        #: ping while it keeps talking).
        self.pred_heard = 0.0
        #: Start of the key range we own, kept when the predecessor fails (until a new
        #: one notifies us we still own at least what we owned).
        self._range_start: int | None = None
        self.joined = False
        self.leaving = False
        self.left = False
        self.seeds: list[str] = []
        self.maintenance = Maintenance(self)
        self.lookups = Lookups(self)
        self.router = Router(self)
        self._index: RoutingIndex | None = None
        #: The tables' versions the routing index was built from.
        self._index_versions = (-1, -1)
        #: The tables' versions and predecessor that ``_settle`` last reported on.
        self._settled: tuple[int, int, NodeRef | None] = (0, 0, None)
        self._last_successor: NodeRef | None = None
        self._traced_ring: tuple[str | None, str | None] = (None, None)
        self._neighbours: list[NodeRef] = []
        self._leave_pending = 0
        m, lk, r = self.maintenance, self.lookups, self.router
        self._handlers: dict[type[Message], Callable[[float, str, Any], None]] = {
            FindSuccessor: lk.on_find_successor,
            GetNeighbours: m.on_get_neighbours,
            Notify: m.on_notify,
            SuccessorHint: m.on_successor_hint,
            Ping: m.on_ping,
            Leave: self._on_leave,
            Route: r.on_route,
            RouteAck: r.on_route_ack,
        }
        for answer in _ANSWERS:
            self._handlers[answer] = self._on_answer

    # -- application calls ---------------------------------------------------------------

    def create(self, now: float) -> None:
        """Start a new ring with this node alone in it."""
        self._check_fresh()
        self.became_member(now)
        self._settle(now)

    def join(self, now: float, seeds: Iterable[str]) -> None:
        """Join the ring through any of ``seeds`` (tried in turn until one answers);
        with no seed other than ourselves, create a ring."""
        self._check_fresh()
        self.seeds = [s for s in dict.fromkeys(seeds) if s != self.address]
        if not self.seeds:
            self.became_member(now)
        else:
            self.maintenance.try_join(now)
        self._settle(now)

    def leave(self, now: float) -> None:
        """Leave gracefully: hand the predecessor to the successor and the successor list
        to the predecessor, wait for both acks (or time-outs), then stop; a ``left``
        notice and a ``node_down`` record say when."""
        if self.leaving or self.left:
            return
        self.leaving = True
        self.maintenance.stop()
        targets = [n for n in (self.successors.first(), self.pred) if n is not None]
        targets = list({n.addr: n for n in targets}.values()) if self.joined else []
        self._leave_pending = len(targets)
        for target in targets:
            self.calls.call(now, target.addr, lambda rid: Leave(
                rid, self.local, self.pred, tuple(self.successors)), LeaveAck,
                lambda t, _ack: self._leave_step(t), lambda t: self._leave_step(t))
        if not targets:
            self._finish_leave(now)
        self._settle(now)

    def lookup(self, now: float, key: int, tag: Any = None) -> None:
        """Find ``succ(key)`` iteratively; a ``lookup`` notice and trace record follow."""
        if not 0 <= key < self.ring_size:
            raise LocalProtocolError(f"key {key} is outside the ring of {self.bits} bits")

        def done(end: float, owner: NodeRef | None, hops: int) -> None:
            ok = owner is not None
            self.trace_lookup(key, hops, ok, (end - now) * 1000.0, "lookup")
            self.notice("lookup", key=key, owner=owner, hops=hops, ok=ok, tag=tag)

        self.lookups.start(now, key, done, verify=True)

    # -- KbrHost down-calls ----------------------------------------------------------------

    def route(self, now: float, key: int, msg: Message, *, ack: bool | None = None) -> None:
        """KBR route (see :mod:`chord.kbr`). ``ack``: ask the owner to acknowledge, which
        ends in a ``lookup`` trace record here (default: ``config.route_ack``)."""
        self.router.route(now, key, msg, ack)

    def send_direct(self, dest: str, msg: Message) -> None:
        self.send(dest, msg)

    def is_responsible(self, key: int) -> bool:
        if not self.successors.nodes:  # the list itself: asked once per event at a root
            return self.joined  # alone in the ring: every key is ours
        start = self.pred.id if self.pred is not None else self._range_start
        return start is not None and in_half_open(key, start, self.local.id, self.ring_size)

    def replica_set(self, key: int, max_rank: int) -> list[NodeRef]:
        """Up to ``max_rank`` nodes that take over our keys next, nearest first."""
        return self.successors.nodes[:max(max_rank, 0)]

    def predecessor(self) -> NodeRef | None:
        return self.pred

    def successor(self) -> NodeRef:
        return self.successors.first() or self.local

    #: The KBR host's hand-over to a local subscription: a ``Deliver`` effect (an alias,
    #: one call less per delivered event).
    deliver_local = CoreBase.deliver

    # -- ProtocolCore inputs ---------------------------------------------------------------

    def on_message(self, now: float, src: str, msg: Message) -> None:
        if self.left:
            return
        if self.pred is not None and src == self.pred.addr:
            self.pred_heard = now
        handler = self._handlers.get(type(msg))
        if handler is not None:
            handler(now, src, msg)
        elif self.app is not None:
            self.app.on_direct(now, src, msg)
        self._settle(now)

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        if self.left:
            return
        if isinstance(msg, _REQUESTS):
            self.calls.fail(now, msg.rid)
        elif isinstance(msg, Route):
            self.router.on_unreachable(now, dest, msg)
        elif type(msg) in self._handlers:
            self.peer_failed(now, dest)
        elif self.app is not None:
            self.app.on_unreachable(now, dest, msg)
        self._settle(now)

    def on_timer(self, now: float) -> None:
        if self.left:
            return
        # Handling a timer may set another for now (stabilize at once after a failure):
        # run those too rather than costing the driver another wake-up.
        while not self.left and (due := self.timers.pop_due(now)):
            for name in due:
                if type(name) is tuple:
                    kind, rid = name
                    if kind == "rpc":
                        self.calls.timed_out(now, rid)
                    else:
                        self.router.on_timeout(now, rid)
                elif isinstance(name, str):  # the maintenance timers are named
                    self.maintenance.on_timer(now, name)
            self._follow_successor(now)  # may set stabilize for now: run it in this loop
        app = self.app
        if app is not None and not self.left:
            deadline = app.next_deadline()
            if deadline is not None and deadline <= now:
                app.on_timer(now)
        self._settle(now)

    def on_synced(self, now: float, through: int) -> None:
        if self.app is not None:
            self.app.on_synced(now, through)
        self._settle(now)

    def on_storage_failed(self, now: float, through: int, reason: str) -> None:
        if self.app is not None:
            self.app.on_storage_failed(now, through, reason)
        self._settle(now)

    def next_deadline(self) -> float | None:
        if self.left:
            return None
        own = self.timers.next_deadline()
        theirs = self.app.next_deadline() if self.app is not None else None
        if own is None:
            return theirs
        return own if theirs is None else min(own, theirs)

    # -- ring state, for the parts of the core -------------------------------------------------

    @property
    def in_ring(self) -> bool:
        """A member that is not leaving: it answers lookups and routes messages."""
        return self.joined and not self.leaving

    def routing_index(self) -> RoutingIndex:
        """The index over fingers and successors, rebuilt when either has changed since
        (their versions move with every change, wherever it is made)."""
        versions = (self.fingers.version, self.successors.version)
        index = self._index
        if index is None or versions != self._index_versions:
            index = self._index = RoutingIndex(self.local, self.ring_size,
                                               [*self.fingers.nodes, *self.successors.nodes])
            self._index_versions = versions
        return index

    def first_successor(self, avoid: Collection[str]) -> NodeRef | None:
        """The nearest known node after us whose address is not in ``avoid``; None only
        when we know no other node (then we are our own successor)."""
        for node in self.successors:
            if node.addr not in avoid:
                return node
        for node in self.routing_index().nodes:
            if node.addr not in avoid:
                return node
        return None

    def set_predecessor(self, now: float, node: NodeRef | None) -> None:
        if node is not None and node.id == self.local.id:
            node = None
        if node != self.pred:
            self.pred = node
            self.pred_heard = now
            if node is not None:
                self._range_start = node.id

    def _follow_successor(self, now: float) -> None:
        """When the successor moved (whoever changed the list): point the fingers before
        it at it and stabilize soon (to learn its list and notify it)."""
        successor = self.successors.first()
        if successor != self._last_successor:
            self._last_successor = successor
            if successor is not None:
                self.fingers.settle(0, successor)
                self.maintenance.stabilize_soon(now)

    def peer_failed(self, now: float, addr: str) -> None:
        """``addr`` did not answer or could not be reached: forget it everywhere at once,
        and remember it as a merge candidate (it may be on the far side of a partition)."""
        changed = self.successors.remove(addr) | self.fingers.remove(addr)
        if self.pred is not None and self.pred.addr == addr:
            self.pred = None
            changed = True
        if not changed:
            return
        self.maintenance.remember(now, addr)
        if not self.successors and self.joined:
            # All r successors are gone: the nearest finger (or the predecessor) is the
            # best successor we know; stabilize walks back from it to the true one.
            fallback = list(self.routing_index().nodes) or \
                ([self.pred] if self.pred is not None else [])
            self.successors.replace(fallback)

    def trace_lookup(self, key: int, hops: int, ok: bool, ms: float, kind: str) -> None:
        self.trace("lookup", key=hex_id(key, self.bits), hops=hops, ok=ok, ms=round(ms, 3),
                   kind=kind)

    def state(self) -> RingState:
        """This node's ring state (the answer to a ``chord.state_query``)."""
        return RingState(self.local, self.joined, self.pred, tuple(self.successors),
                         tuple(self.fingers.nodes))

    # -- membership ----------------------------------------------------------------------------

    def _check_fresh(self) -> None:
        if self.joined or self.leaving or self.left or self.seeds:
            raise LocalProtocolError("create/join is called once, on a fresh node")

    def became_member(self, now: float) -> None:
        """We are in a ring now (created it, or a join found our successor)."""
        self.joined = True
        self.trace("node_up", addr=self.address, mode="structured", version=TRACE_VERSION)
        self._follow_successor(now)  # tables given before joining (the oracle's)
        self.maintenance.start(now)
        self._settled = (-1, -1, None)  # report the ring as it is now, even if unchanged

    def _on_answer(self, now: float, src: str, msg: Any) -> None:
        self.calls.answer(now, msg.rid, msg)

    def _on_leave(self, now: float, src: str, msg: Leave) -> None:
        self.send(src, LeaveAck(msg.rid))
        gone = msg.node
        if gone.id == self.local.id or not self.joined:
            return
        self.fingers.remove(gone.addr)
        if self.pred is not None and self.pred.addr == gone.addr:
            # Its range is ours now, and its predecessor is our predecessor.
            handed = msg.predecessor
            if handed is not None:
                self._range_start = handed.id
            self.pred = handed if handed is not None and handed.id != self.local.id else None
        first = self.successors.first()
        if first is not None and first.addr == gone.addr:
            rest = [n for n in self.successors if n.addr != gone.addr]
            its_list = [n for n in msg.successors if n.addr != gone.addr]
            self.successors.replace(its_list or rest)
        else:
            self.successors.remove(gone.addr)

    def _leave_step(self, now: float) -> None:
        self._leave_pending -= 1
        if self._leave_pending == 0:
            self._finish_leave(now)

    def _finish_leave(self, now: float) -> None:
        self.lookups.abort_all(now)
        self.calls.cancel_all()
        self.router.cancel_all()
        self.joined = False
        self.left = True
        self.trace("node_down", reason="leave")
        self.notice("left")

    # -- reporting changes -------------------------------------------------------------------

    def _settle(self, now: float) -> None:
        """After an input: follow a new successor, trace ``ring`` and call ``app.update``
        for what changed in the tables during it."""
        self._follow_successor(now)
        pred = self.pred
        settled = (self.successors.version, self.fingers.version, pred)
        if settled == self._settled:
            return
        self._settled = settled
        ring = (hex_id(self.successor().id, self.bits),
                None if pred is None else hex_id(pred.id, self.bits))
        if ring != self._traced_ring and self.joined:
            self._traced_ring = ring
            self.trace("ring", succ=ring[0], pred=ring[1])
        neighbours = sorted({*self.successors, *([pred] if pred is not None else [])},
                            key=lambda n: n.id)
        if neighbours != self._neighbours:
            before, self._neighbours = self._neighbours, neighbours
            app = self.app
            if app is not None:
                for node in before:
                    if node not in neighbours:
                        app.update(now, node, False)
                for node in neighbours:
                    if node not in before:
                        app.update(now, node, True)

"""Key-based routing (KBR ``route``): recursive, hop by hop, in a ``chord.route`` envelope.

Each hop sends the envelope to its successor when the key lies between itself and its
successor (marking it ``final``), otherwise to the closest preceding node it knows. The
application sees ``forward`` at every hop but the origin and ``deliver`` at the owner.
A hop whose next node turns out unreachable drops that node from its tables and sends
the envelope on another way; the application does not see the detour.

When the route asks for it, the owner acknowledges to the origin (:class:`RouteAck`);
the origin then writes a ``lookup`` trace record, or a failed one when no ack comes in
``route_timeout`` and gives the message back to its application
(``on_route_failed``), which may route it again. A hop whose application ends the
route (``forward`` returns None: a Scribe forwarder adopting a JOIN) acknowledges in
the owner's place, with the hops so far: the route ended where its application wanted,
and no ack would read as a failure.
Routes without an ack cost no extra message and leave no record.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from chord.messages import Route, RouteAck
from chord.steps import Step, next_step
from overlay.core.errors import LocalProtocolError
from overlay.core.messages import Message

if TYPE_CHECKING:
    from chord.node import ChordNode


@dataclass(slots=True)
class PendingRoute:
    key: int
    started: float
    #: What was routed: given back to the application if no ack comes.
    msg: Message


class Router:
    def __init__(self, node: ChordNode) -> None:
        self.node = node
        self.pending: dict[int, PendingRoute] = {}

    def route(self, now: float, key: int, msg: Message, ack: bool | None) -> None:
        node = self.node
        if not 0 <= key < node.ring_size:
            raise LocalProtocolError(f"key {key} is outside the ring of {node.bits} bits")
        if ack is None:
            ack = node.config.route_ack
        if not node.in_ring:
            if ack:
                node.trace_lookup(key, 0, False, 0.0, "route")
            return
        if node.is_responsible(key):
            if ack:
                node.trace_lookup(key, 0, True, 0.0, "route")
            if node.app is not None:
                node.app.deliver(now, key, msg, 0)
            return
        rid = 0
        if ack:
            rid = node.calls.new_rid()
            self.pending[rid] = PendingRoute(key, now, msg)
            node.timers.set(("route", rid), now + node.config.route_timeout)
        self._send_on(now, Route(key, node.local, rid, 1, False, ack, msg))

    def on_route(self, now: float, src: str, env: Route) -> None:
        node = self.node
        if env.key >= node.ring_size or not node.joined:
            return
        if node.leaving:
            # Our keys pass to our successor: hand the message on rather than lose it.
            successor = node.first_successor(())
            if successor is not None:
                node.send(successor.addr, replace(env, hops=env.hops + 1, final=True))
            return
        step, hop = next_step(node, env.key, (), as_owner=env.final)
        if step is Step.OWNER:
            self._deliver(now, env)
            return
        if env.hops >= node.config.max_hops:
            return  # a routing loop while tables settle: the origin's ack times out
        payload = env.payload
        if node.app is not None:
            forwarded = node.app.forward(now, env.key, payload, hop)
            if forwarded is None:
                self._ack(env)
                return
            payload = forwarded
        node.send(hop.addr, replace(env, hops=env.hops + 1, final=step is not Step.CLOSER,
                                    payload=payload))

    def on_unreachable(self, now: float, dest: str, env: Route) -> None:
        """The envelope we sent to ``dest`` did not get there: send it another way. Its
        hop count already includes the transmission that failed; keep it, the app
        already saw this hop. (Its ``final`` flag was meant for ``dest``.)"""
        node = self.node
        node.peer_failed(now, dest)
        if node.in_ring:
            self._send_on(now, env)

    def _send_on(self, now: float, env: Route) -> None:
        """Send an envelope whose hop count is already right on its next hop (from the
        origin, or again after a failed hop)."""
        step, hop = next_step(self.node, env.key, (), as_owner=False)
        if step is Step.OWNER:
            self._deliver(now, env)
        else:
            self.node.send(hop.addr, replace(env, final=step is not Step.CLOSER))

    def _ack(self, env: Route) -> None:
        """The route ends here (at its owner, or where its application stopped it)."""
        if env.ack:
            self.node.send(env.origin.addr, RouteAck(env.rid, self.node.local, env.hops))

    def _deliver(self, now: float, env: Route) -> None:
        node = self.node
        self._ack(env)
        if node.app is not None:
            node.app.deliver(now, env.key, env.payload, env.hops)

    def on_route_ack(self, now: float, src: str, ack: RouteAck) -> None:
        pending = self.pending.pop(ack.rid, None)
        if pending is not None:
            self.node.timers.cancel(("route", ack.rid))
            self.node.trace_lookup(pending.key, ack.hops, True,
                                   (now - pending.started) * 1000.0, "route")

    def on_timeout(self, now: float, rid: int) -> None:
        pending = self.pending.pop(rid, None)
        if pending is not None:
            self.node.trace_lookup(pending.key, 0, False,
                                   (now - pending.started) * 1000.0, "route")
            if self.node.app is not None:
                self.node.app.on_route_failed(now, pending.key, pending.msg)

    def cancel_all(self) -> None:
        """The node stopped: acks still awaited will not be traced."""
        for rid in self.pending:
            self.node.timers.cancel(("route", rid))
        self.pending.clear()

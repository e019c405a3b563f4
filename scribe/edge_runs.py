"""Plain copies a step sends down each tree edge, sent as runs (``scribe.events``).

The peer codec is the largest cost of an event's way down the tree, per message: a run
of events the root releases together (a burst of publishes) crosses each edge in one
:class:`~scribe.messages.Events` message rather than one :class:`~scribe.messages.Event`
per event. The copies are decided one by one as before (one rule for what goes where,
``Dissemination._send``); this only holds them until the step ends and packs them.
"""

from __future__ import annotations

from chord.kbr import NodeRef
from overlay.core.limits import SizeLimits
from scribe.messages import Event, Events
from scribe.state import ScribeState
from scribe.wire_records import message_runs


def chains(before: Event, after: Event) -> bool:
    """Whether ``after`` may follow ``before`` in one :class:`Events`: it vouches for it,
    and shares its hop, sender and digest fields (plain copies without groups both)."""
    return (after.prev == before.body.seq and after.hop == before.hop
            and after.settled == before.settled
            and after.digest_version == before.digest_version
            and after.sender == before.sender)


class EdgeRuns:
    """Holds plain copies without groups per child until :meth:`flush`; any other copy
    for a child first sends what is held for it, so each edge keeps its order."""

    def __init__(self, state: ScribeState, sizes: SizeLimits) -> None:
        self.s = state
        self.sizes = sizes
        self._held: dict[int, tuple[NodeRef, list[Event]]] = {}

    def send(self, to: NodeRef, ev: Event) -> None:
        if ev.plain and not ev.groups:
            held = self._held.get(to.id)
            if held is None:
                self._held[to.id] = (to, [ev])
            else:
                held[1].append(ev)
            return
        held = self._held.pop(to.id, None)
        if held is not None:
            self._send_runs(*held)
        self.s.send(to, ev)

    def flush(self) -> None:
        held, self._held = self._held, {}
        for to, copies in held.values():
            self._send_runs(to, copies)

    def _send_runs(self, to: NodeRef, copies: list[Event]) -> None:
        run = [copies[0]]
        for ev in copies[1:]:
            if chains(run[-1], ev):
                run.append(ev)
            else:
                self._send_run(to, run)
                run = [ev]
        self._send_run(to, run)

    def _send_run(self, to: NodeRef, run: list[Event]) -> None:
        """``run``, chained copies, in messages of a message's worth each (a lone copy
        as itself)."""
        first = 0
        for part in message_runs([ev.body for ev in run], self.sizes):
            head = run[first]
            first += len(part)
            if len(part) == 1:
                self.s.send(to, head)
            else:
                self.s.send(to, Events(head.body.topic, tuple(part), head.hop, head.sender,
                                       head.prev, head.settled, head.digest_version))

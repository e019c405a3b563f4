"""Iterative lookups: the asking node walks the ring itself, one question per hop.

The origin first consults its own tables (no message); then it asks the closest
preceding node it knows, which answers either "``succ(key)`` is X" (it found the key
between itself and its successor) or "ask X" (the closest node before the key in *its*
tables), and so on. A verifying lookup then asks X itself to confirm that it owns the
key (its predecessor says so), which also finds a node that joined just before X, and
never returns a dead owner. ``hops`` counts the nodes asked, the owner included: the
transmissions a recursive route to the owner takes, about ½·log2 N in a stable ring
(SIGCOMM 2001, section 6.2). An owner found in the origin's own range costs 0 hops.

A node that does not answer (time-out or unreachable) is dropped from the origin's
tables, added to the lookup's ``avoid`` list (the nodes asked next answer without it),
and the node that pointed to it is asked again. Every lookup ends: at the latest after
``max_hops`` questions, each bounded by the RPC time-out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chord.kbr import NodeRef
from chord.messages import MAX_AVOID, FindSuccessor, Found
from chord.ring import distance
from chord.steps import Step, next_step

if TYPE_CHECKING:
    from chord.node import ChordNode

#: Called once when a lookup ends: ``(now, owner or None, hops)``.
LookupDone = Callable[[float, NodeRef | None, int], None]


@dataclass(slots=True)
class Lookup:
    key: int
    on_done: LookupDone
    #: Ask the node found to confirm it owns the key (application lookups, joins);
    #: finger and merge lookups take the predecessor's word for it.
    verify: bool
    #: Set for lookups that must be answered by another ring (joins, merge probes):
    #: the origin's own tables are no fallback for them.
    remote_only: bool
    hops: int = 0
    #: Nodes that answered "ask X", most recent last: where to go back to on a failure.
    path: list[NodeRef] = field(default_factory=list)
    avoid: list[str] = field(default_factory=list)
    done: bool = False


class Lookups:
    def __init__(self, node: ChordNode) -> None:
        self.node = node
        self.active: list[Lookup] = []
        #: Seed address -> what it last said to one of our lookups: "member" (it answered
        #: from a ring), "not_in_ring", or "unreachable" (no answer). Joining reads it
        #: (a node creates a ring only when no seed is a member: Maintenance).
        self.seed_answers: dict[str, str] = {}

    # -- the asking side -----------------------------------------------------------------

    def start(self, now: float, key: int, on_done: LookupDone, verify: bool,
              via: NodeRef | None = None) -> None:
        """Find ``succ(key)``, starting with our own tables, or by asking ``via``."""
        lookup = Lookup(key, on_done, verify, remote_only=via is not None)
        self.active.append(lookup)
        if via is None:
            self._local_step(now, lookup)
        else:
            self._ask(now, lookup, via, owner_check=False)

    def abort_all(self, now: float) -> None:
        """The node leaves: every lookup still running ends without an owner."""
        for lookup in list(self.active):
            self._finish(now, lookup, None)

    def _local_step(self, now: float, lookup: Lookup) -> None:
        node = self.node
        if not node.in_ring:
            self._finish(now, lookup, None)
            return
        step, nxt = next_step(node, lookup.key, lookup.avoid, as_owner=False)
        if step is Step.OWNER:
            self._finish(now, lookup, node.local)
        elif step is Step.SUCCESSOR:
            self._found(now, lookup, nxt)
        else:
            self._ask(now, lookup, nxt, owner_check=False)

    def _found(self, now: float, lookup: Lookup, owner: NodeRef) -> None:
        """``owner`` should be ``succ(key)``: ask it to confirm if the lookup verifies."""
        if not lookup.verify:
            self._finish(now, lookup, owner)
        else:
            self._ask(now, lookup, owner, owner_check=True)

    def _ask(self, now: float, lookup: Lookup, target: NodeRef, owner_check: bool) -> None:
        if lookup.hops >= self.node.config.max_hops:
            self._finish(now, lookup, None)
            return
        lookup.hops += 1
        avoid = tuple(lookup.avoid)
        self.node.calls.call(
            now, target.addr, lambda rid: FindSuccessor(rid, lookup.key, avoid, owner_check),
            Found, lambda t, answer: self._answered(t, lookup, target, owner_check, answer),
            lambda t: self._unanswered(t, lookup, target))

    def _note(self, addr: str, answer: str) -> None:
        if addr in self.node.seeds:
            self.seed_answers[addr] = answer

    def _unanswered(self, now: float, lookup: Lookup, asked: NodeRef) -> None:
        self._note(asked.addr, "unreachable")
        self._failed(now, lookup, asked)

    def _answered(self, now: float, lookup: Lookup, asked: NodeRef, owner_check: bool,
                  answer: Found) -> None:
        if lookup.done:
            return
        nxt = answer.node
        self._note(asked.addr, "not_in_ring" if nxt is None else "member")
        if nxt is None:  # the node asked is not in a ring (yet, or any more)
            self._failed(now, lookup, asked)
        elif answer.done and nxt.id == asked.id:
            self._finish(now, lookup, asked)  # the owner confirmed
        elif nxt.addr == self.node.address and not self.node.in_ring:
            # It points at our former self: we restarted (same address, same id) before
            # the ring noticed we were gone, and we are joining. Ask it again around us;
            # our own empty tables know nothing yet.
            if self.node.address in lookup.avoid:
                self._failed(now, lookup, asked)
            else:
                lookup.avoid.append(self.node.address)
                self._ask(now, lookup, asked, owner_check=owner_check)
        elif nxt.addr == self.node.address:
            # It points at us: our own tables know better.
            lookup.path.append(asked)
            self._local_step(now, lookup)
        elif nxt.addr in lookup.avoid:
            self._failed(now, lookup, asked)  # it ignored the avoid list: a broken answer
        elif answer.done:
            lookup.path.append(asked)
            self._found(now, lookup, nxt)
        elif owner_check or self._closer(nxt, asked, lookup.key):
            # (An owner that is not one points back at its predecessor: no progress
            # by distance, but nearer to the owner.)
            lookup.path.append(asked)
            self._ask(now, lookup, nxt, owner_check=owner_check)
        else:
            self._failed(now, lookup, asked)  # no progress: a broken answer

    def _closer(self, candidate: NodeRef, than: NodeRef, key: int) -> bool:
        size = self.node.ring_size
        return distance(candidate.id, key, size) < distance(than.id, key, size)

    def _failed(self, now: float, lookup: Lookup, asked: NodeRef) -> None:
        """``asked`` did not help: avoid it and go back to whoever pointed to it."""
        if lookup.done:
            return
        if asked.addr not in lookup.avoid:
            if len(lookup.avoid) >= MAX_AVOID:
                self._finish(now, lookup, None)
                return
            lookup.avoid.append(asked.addr)
        if lookup.path:
            self._ask(now, lookup, lookup.path.pop(), owner_check=False)
        elif lookup.remote_only:
            self._finish(now, lookup, None)
        else:
            self._local_step(now, lookup)

    def _finish(self, now: float, lookup: Lookup, owner: NodeRef | None) -> None:
        if lookup.done:
            return
        lookup.done = True
        self.active.remove(lookup)
        lookup.on_done(now, owner, lookup.hops)

    # -- the answering side ----------------------------------------------------------------

    def on_find_successor(self, now: float, src: str, msg: FindSuccessor) -> None:
        node = self.node
        if not node.in_ring or msg.key >= node.ring_size:
            node.send(src, Found(msg.rid, False, None))
            return
        step, nxt = next_step(node, msg.key, msg.avoid, msg.owner_check)
        node.send(src, Found(msg.rid, step in (Step.OWNER, Step.SUCCESSOR), nxt))

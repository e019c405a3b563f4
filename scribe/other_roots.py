"""Another root's copies at a node that numbers the topic itself.

After a healed partition both sides' roots number a topic for a moment, and the one that
keeps the key may be among the other's replicas: it gets that root's ``Replicate`` and
``ReplicaSync`` copies. A number the other root gave is no number this one has, nor an
event its tree had, so the copies are kept here, per root, apart from this node's log
and from its replica copies (:meth:`scribe.replica_copies.ReplicaCopies.on_replicate`),
until that root hands its log over and the merge takes both logs in
(:mod:`scribe.merge`).

If the other root stops before it hands over (it crashed, or is cut off again), those
copies may be all that is left of events it acknowledged: its other replicas do not own
the key, so none of them ever numbers the topic. So a numbering node that has held
another root's copies for ``ScribeConfig.takeover_window`` with no handover from it takes
them in as that handover's (``Membership.take_in``): merged, fork-aware, and sent down;
and a node that starts numbering takes them in at its next tick. Taking them in early
is safe: a handover that comes later finds those events held (by msg_id) and moves only
what is new to this root.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from chord.kbr import NodeRef
from scribe.config import TopicRetention
from scribe.stream import Retained
from scribe.wire_records import EventBody


@dataclass
class OtherRootCopies:
    """The copies of one topic that one other root sent this node since ``since``."""

    root: NodeRef
    since: float
    #: The highest number that root said it gave (its copies' and syncs' counters).
    counter: int
    copies: Retained | None = None

    def events(self) -> tuple[EventBody, ...]:
        """The copies, in seq order (as a buffer keeps them)."""
        if self.copies is None:
            return ()
        return tuple(self.copies.bodies(len(self.copies)))


class OtherRoots:
    """Per topic, per other root: the copies this node holds, not taken in yet."""

    def __init__(self) -> None:
        self._topics: dict[str, dict[int, OtherRootCopies]] = {}

    def __bool__(self) -> bool:
        return bool(self._topics)

    def copies_of(self, now: float, topic: str, root: NodeRef, counter: int) -> OtherRootCopies:
        """Where ``root``'s copies of ``topic`` are kept (new: held from ``now``)."""
        roots = self._topics.setdefault(topic, {})
        known = roots.get(root.id)
        if known is None:
            known = roots[root.id] = OtherRootCopies(root, now, counter)
        known.counter = max(known.counter, counter)
        return known

    def handed_over(self, topic: str, old_root: NodeRef) -> None:
        """``old_root`` handed its log over: its copies here are in the merge."""
        roots = self._topics.get(topic)
        if roots is not None:
            roots.pop(old_root.id, None)
            if not roots:
                del self._topics[topic]

    def hurry(self, topic: str) -> None:
        """This node starts numbering ``topic``: take its other roots' copies in at once
        (those roots may be what it took the key over from)."""
        for copies in self._topics.get(topic, {}).values():
            copies.since = float("-inf")

    def due(self, now: float, wait: float,
            numbering: Collection[str]) -> list[tuple[str, OtherRootCopies]]:
        """The copies of topics in ``numbering`` whose root has been silent about a
        handover for ``wait`` since its first copy here, each returned once (forgotten
        here). Other topics' copies wait: this node is a replica of their root now."""
        found: list[tuple[str, OtherRootCopies]] = []
        for topic in [t for t in self._topics if t in numbering]:
            roots = self._topics[topic]
            for root_id in [r for r, c in roots.items() if now - c.since >= wait]:
                found.append((topic, roots.pop(root_id)))
            if not roots:
                del self._topics[topic]
        return found

    def trim(self, now: float, retention_of: Callable[[str], TopicRetention]) -> None:
        """Retention bounds these copies as any other; none left, none kept."""
        for topic in list(self._topics):
            roots = self._topics[topic]
            for root_id in list(roots):
                copies = roots[root_id].copies
                if copies is not None:
                    copies.trim(now, retention_of(topic))
                if copies is None or not copies.events:
                    del roots[root_id]
            if not roots:
                del self._topics[topic]


__all__ = ["OtherRootCopies", "OtherRoots"]

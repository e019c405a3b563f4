"""What a node brings back from its store, and the copies it holds of other roots' logs.

A restarted node loads its topic logs before it joins and holds them as replica copies
(``restore``). Once back in the ring it hands the logs of topics another node owns to
that owner (``unoffered``), and takes in as a handover the copies another root replicated
here and never handed over (``other_roots``, after ``takeover_window``).
"""

from __future__ import annotations

from scribe.consumer_root import ConsumerRoots
from scribe.durability import RestoredConsumer, RestoredLog
from scribe.membership import Membership
from scribe.retention import Retention
from scribe.state import ScribeState


class Restarted:
    """Restores a node's logs at start, offers them to their owners, takes in other
    roots' copies: run by the app's heartbeat tick."""

    def __init__(self, state: ScribeState, retention: Retention, membership: Membership,
                 consumers: ConsumerRoots) -> None:
        self.state = state
        self.retention = retention
        self.membership = membership
        self.consumers = consumers

    def restore(self, now: float, logs: list[RestoredLog], load_ms: float = 0.0,
                lost: bool = False, consumers: list[RestoredConsumer] | None = None,
                range_start: int | None = None) -> None:
        """Before joining: the topic logs the node's store kept from its last run
        (``load_ms`` to read them). They are held as replica copies; a ``recover`` trace
        record per topic says what came back. ``lost``: the store was refused whole, so
        any topic this node claims soon may have been in it (its replicas are asked).
        ``range_start``: where the keys it owned began (its predecessor's id), so that it
        waits for the owners of the others (scribe.standin)."""
        self.state.former.restored(range_start)
        self.retention.restore(now, logs, lost)
        for kept in consumers or ():
            self.consumers.restore(kept.topic, kept.name, kept.progress, kept.filter)
        for log in logs:
            self.state.trace("recover", topic=log.topic, events=len(log.events),
                             bytes=log.payload_bytes, first=log.events[0].seq
                             if log.events else None, last=log.counter,
                             ms=round(load_ms, 3))

    def tick(self, now: float) -> None:
        if self.retention.other_roots:
            self._take_in_other_roots(now)
        if self.retention.unoffered and self.state.host.predecessor():
            self._offer_restored(now)

    def _take_in_other_roots(self, now: float) -> None:
        """Another root's copies held past ``takeover_window`` with no handover from it
        (scribe.other_roots): taken in as its handover."""
        s, retention = self.state, self.retention
        wait = s.config.takeover_window()
        for topic, other in retention.other_roots.due(now, wait, s.numbering):
            events = other.events()
            if events:
                self.membership.take_in(now, topic, events, other.counter, other.root)
        s.wake(now)

    def _offer_restored(self, now: float) -> None:
        """Once back in the ring: the logs this node loaded at start, of topics whose key
        another node owns, go to that owner as a handover's events. This node may have
        numbered a topic as the root of its side of a partition and stopped (crashed)
        before it handed its log over: then what it acknowledged is in no other log the
        owner will read. The owner merges them (fork-aware); events it holds already
        change nothing. A topic whose key this node owns stays to offer until it numbers
        the topic itself: the ring may yet settle with another owner (a restarted node
        can take itself for the owner of keys for a moment)."""
        s, retention = self.state, self.retention
        for topic in sorted(retention.unoffered):
            if s.host.is_responsible(s.mid(topic)):
                continue
            copies = retention.replica.get(topic)
            if copies is not None and copies.events:
                self.membership.send_log(now, topic, copies.bodies(len(copies)),
                                         s.seq.get(topic, 0))
            retention.unoffered.discard(topic)

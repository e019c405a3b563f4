"""What the root keeps so that an acknowledged event is not lost with it.

Per topic the root retains its numbered events (bounded by the topic's retention,
:meth:`ScribeConfig.retention_of`) and, for a reliable publish, sends a copy
(:class:`Replicate`) to the next ``replicas`` nodes of its successor list, the nodes
that take the topic's key over when it fails. The publisher is answered only when
every one of them confirmed (:class:`ReplicateAck`), or was given up on: unreachable,
or silent past ``replica_timeout`` (the ring's own repair then changes the successor
list). A replica keeps the copies and the counter; when it becomes responsible for the
key, it adopts them and numbers on from there, so the sequence neither restarts nor
forks.

The retained events also make the root idempotent: a publish retried with a msg_id it
already numbered is answered with the same number and not sent down the tree again.

Events go down the tree in seq order, and a reliable one only once its replicas hold it
(what events wait for, and the answers to their publishers: :mod:`scribe.root_waits`).

Every tick the root sends a :class:`ReplicaSync` to successors that became replicas
since the last one (with the retained events) and tells all replicas the counter when
unreliable events moved it past what they know. A replica the root gave up on for a
copy is brought up to date the same way once it confirms a copy again
(:attr:`ReplicaView.lagging`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chord.kbr import NodeRef
from scribe.durability import (
    AppendEvents,
    DropLog,
    Durability,
    MoveEvents,
    RestoredLog,
    TrimLog,
)
from scribe.merge import MergePlan, plan_merge
from scribe.ordering import Ahead
from scribe.other_roots import OtherRoots
from scribe.publish_messages import ReplicaSync, Replicate, ReplicateAck, ReplicateAcks
from scribe.replica_copies import ReplicaCopies
from scribe.root_waits import LocalAck, LocalRefuse, Release, RootWaits
from scribe.state import ScribeState
from scribe.stream import Retained
from scribe.wire_records import EventBody, message_runs

#: Seconds after a start whose store was refused whole during which a claimed topic's
#: replicas are asked for what the node may have lost (the topics were in that store).
LOST_STORE_WINDOW = 120.0


@dataclass
class ReplicaView:
    """What the root last told its replicas of one topic."""

    addrs: frozenset[str] = frozenset()
    seq: int = 0
    #: Replicas given up on for a copy of an event (silent, or unreachable: the other
    #: side of a partition, say): their copies have a gap. Each is copied the newest
    #: event every tick until it confirms one, then sent the whole log again, as a new
    #: replica is (otherwise it could take the key over lacking events this root
    #: acknowledged, and answer pulls for them with "gone").
    lagging: set[str] = field(default_factory=set)


class Retention:
    def __init__(self, state: ScribeState, local_ack: LocalAck, local_refuse: LocalRefuse,
                 release: Release, durability: Durability, ahead: Ahead) -> None:
        self.s = state
        #: Persists of the retained events, and what waits for them to be synced.
        self.durability = durability
        #: What this root's numbered events wait for before they go down and are answered.
        self.waits = RootWaits(state, local_ack, local_refuse, release, durability, ahead,
                               self.log, self._missed)
        #: Topic -> the lowest seq its persisted log may hold (what was last trimmed to).
        self._persisted_from: dict[str, int] = {}
        #: Topics whose log this node loaded at start and has not numbered since: when it
        #: claims one, its replicas may hold what its own log lost (see on_claim).
        self.restored: set[str] = set()
        #: Topics whose log this node loaded at start and has not offered to the key's
        #: owner yet (scribe.restarted).
        self.unoffered: set[str] = set()
        #: Until then, every topic counts as restored (the store was refused whole).
        self.lost_until = float("-inf")
        #: Topic -> the replicas known to hold this root's events.
        self.replica_views: dict[str, ReplicaView] = {}
        #: Topic -> events this node numbered as its root.
        self.root: dict[str, Retained] = {}
        #: Topic -> copies this node holds for the topic's root.
        self.replica: dict[str, Retained] = {}
        #: At a node that numbers a topic: other roots' copies, kept apart (two roots for
        #: one key, a healed partition), until taken in.
        self.other_roots = OtherRoots()
        #: Topic -> the first number its last partition merge moved events to: a later
        #: part of the same handover moves this root's events below it only (see
        #: scribe.merge). Not the merge's fork: a merge may move only some events above
        #: its fork (stranded ones), and the others there are still to be merged.
        self._moved_below: dict[str, int] = {}
        #: The copies other roots send this node (as their replica), and syncs.
        self.copies_in = ReplicaCopies(state, durability, self.root, self.replica,
                                       self.other_roots, self.adopt_events)

    def __bool__(self) -> bool:
        """Whether the maintenance tick has work here (time-outs, trimming)."""
        return bool(self.waits or self.root or self.replica or self._persisted_from)

    def log(self, topic: str) -> Retained | None:
        """The events this node retains as ``topic``'s root."""
        return self.root.get(topic)

    def handled_through(self, topic: str) -> int:
        """This root's own subscriptions and subtree had every event up to this seq: what
        it sent down, not what came into its log around its tree (``Ordering.unsent``)."""
        released = self.waits.released_through(topic)
        tree = self.s.trees.get(topic)
        if tree is None or tree.stream.through is None:
            return released
        return min(released, tree.stream.through)

    # -- at the root -------------------------------------------------------------------------

    def numbered(self, topic: str, msg_id: str) -> int | None:
        """The number this root gave ``msg_id`` already (a retried publish), if any."""
        retained = self.root.get(topic)
        return None if retained is None else retained.by_msg.get(msg_id)

    def adopt_replica(self, now: float, topic: str) -> None:
        """This node now numbers ``topic``: take over the copies it holds for it. (Other
        roots' copies, kept apart, are taken in at its next tick: scribe.other_roots.)"""
        self.other_roots.hurry(topic)
        self.unoffered.discard(topic)  # its log is this node's own from now on
        copies = self.replica.pop(topic, None)
        if copies is not None:
            self.adopt(topic, copies)
            misplaced = tuple(self.root[topic].misplaced())
            if misplaced:
                # Copies under their numbers from before a merge the former root made,
                # whose copies under the new ones never came: where they are, this
                # node's tree has passed (or has other events). They move on after the
                # counter as a merge's events do (this node's subscriptions tell the
                # ones they had by msg_id).
                counter = self.s.seq.get(topic, 0)
                self.merge(now, topic, MergePlan((), misplaced[0].seq, misplaced, misplaced,
                                                 counter), 0, handover=False)

    def adopt(self, topic: str, copies: Retained) -> None:
        retained = self.root.get(topic)
        if retained is None:
            self.root[topic] = copies
        else:
            for seq, (kept_at, body) in copies.events.items():
                if seq not in retained.events:
                    retained.add(kept_at, body)
            retained.complete_from = min(retained.complete_from, copies.complete_from)
        self.s.note_seq(topic, copies.last_seq())

    def adopt_events(self, now: float, topic: str, events: tuple[EventBody, ...],
                     counter: int) -> None:
        """Events a former root handed over with the key, numbered up to ``counter``.
        When they fork from what this node holds (it numbered the topic too, each on its
        side of a partition; or its own copies, loaded at a restart, hold events the
        former root never had at numbers it gave to others) the two logs are merged
        (:mod:`scribe.merge`): no copy is dropped for a clash of numbers."""
        numbering = topic in self.s.numbering and topic in self.root
        mine = self.root.get(topic) if numbering else self.replica.get(topic)
        if mine is not None:
            # What this node sent down as the root, its subscriptions had already.
            released = self.handled_through(topic) if numbering else 0
            plan = plan_merge(mine, self.s.seq.get(topic, 0), events, counter,
                              self._moved_below.get(topic), released)
            if plan.follow:
                self._follow(now, topic, mine, plan.follow, released)
            if plan.fork is not None and not numbering:
                # The copies merged are this node's log from now on (adopting them may
                # move some: the plan is made again on the log as adopted).
                self.adopt_replica(now, topic)
                plan = plan_merge(self.root[topic], self.s.seq.get(topic, 0), events,
                                  counter, self._moved_below.get(topic),
                                  self.handled_through(topic))
            if plan.fork is not None:
                self.merge(now, topic, plan, released)
                return
            events = plan.fill
        copies = Retained(complete_from=events[0].seq or 1) if events else Retained()
        copies.merge(now, events)
        self.adopt(topic, copies)
        if events:
            self.durability.write(AppendEvents(topic, events))
        self.s.note_seq(topic, counter)

    def _follow(self, now: float, topic: str, mine: Retained, later: tuple[EventBody, ...],
                released: int) -> None:
        """Events of ``mine`` another log moved to ``later`` numbers (past this node's
        counter) take those numbers here too: the other side's members may have them
        only there. This node's subscriptions had those up to ``released`` under their
        old numbers: its log of handled events tells the moved copies from new ones."""
        old = tuple(mine.by_msg[b.msg_id] for b in later)
        handled = [mine.events[seq][1] for seq in old if seq <= released]
        for seq in old:
            mine.remove(seq)
        mine.merge(now, later)
        tree = self.s.trees.get(topic)
        if tree is not None:
            tree.stream.log.merge(now, handled)
        self.durability.write(MoveEvents(topic, old, later))

    def merge(self, now: float, topic: str, plan: MergePlan, released: int,
              handover: bool = True) -> None:
        """Carry out a merge (:func:`scribe.merge.plan_merge`): fill holes, move the
        events numbered on both sides since the fork after both counters, and send them
        down in their new order (behind any event still waiting for its replicas).
        ``released``: this node sent its events up to there down as the root.
        ``handover``: the merge of a handed log (a later part of it moves this root's
        events below the numbers this merge moved events to only)."""
        s = self.s
        mine = self.root[topic]
        for body in plan.fill:
            mine.add(now, body)
        if plan.fill:
            self.durability.write(AppendEvents(topic, plan.fill))
        waits = self.waits
        handled: list[EventBody] = []
        for body in plan.ours:
            assert body.seq is not None
            mine.remove(body.seq)
            if not waits.take_queued(topic, body.seq) and body.seq <= released:
                handled.append(body)
        tree = s.trees.get(topic)
        if tree is not None:
            # This root's subscriptions had these under their old numbers: its log of
            # handled events tells the moved copies from new ones (see Dissemination).
            tree.stream.log.merge(now, handled)
        moved = plan.renumbered(mine.before(plan.base + 1))
        s.note_seq(topic, moved[-1].seq or 0)
        assert plan.fork is not None
        if handover:
            self._moved_below[topic] = plan.base + 1
        for body in moved:
            mine.add(now, body)
        self.durability.write(MoveEvents(topic, tuple(b.seq or 0 for b in plan.ours), moved))
        waits.hold_moved(now, moved, self.replicas_of(topic))
        s.trace("merge", topic=topic, fork=plan.fork, moved=len(moved), ours=len(plan.ours),
                first=moved[0].seq, last=moved[-1].seq)
        waits.release_ready(now, topic)

    def hand_over(self, now: float, topic: str) -> tuple[EventBody, ...]:
        """This node no longer owns ``topic``'s key: what it retained goes with it (and it
        keeps a copy, as the new owner's successor is a natural replica)."""
        released = self.handled_through(topic)
        self.waits.hand_over(topic)
        retained = self.root.pop(topic, None)
        self.replica_views.pop(topic, None)
        if retained is None:
            return ()
        self.replica[topic] = retained
        bodies = tuple(retained.bodies(len(retained)))
        tree = self.s.trees.get(topic)
        if tree is not None:
            # What this node's subscriptions had as the root: if the new root moves some
            # of it (a partition merge), its log tells the moved copies from new events.
            tree.stream.log.merge(now, [b for b in bodies if (b.seq or 0) <= released])
        return bodies

    def keep(self, now: float, bodies: Sequence[EventBody], origin: NodeRef,
             reliable: bool) -> bool:
        """Retain freshly numbered events of one topic (in seq order, from ``origin``),
        persisted in one write; for reliable ones, copy them to the replicas. True when
        the publisher can be answered now (nothing to wait for)."""
        s = self.s
        topic = bodies[0].topic
        retained = self.root.get(topic)
        if retained is None:
            # A root numbering from scratch has every event from 1 on.
            retained = self.root[topic] = Retained(complete_from=1)
        for body in bodies:
            retained.add(now, body)
        retained.trim(now, s.config.retention_of(topic))
        written = self.durability.write(AppendEvents(topic, tuple(bodies)))
        replicas = self.replicas_of(topic) if reliable else []
        if replicas:
            view = self.replica_views.setdefault(topic, ReplicaView())
            first = bodies[0].seq or 0
            if not view.addrs and next(iter(retained.events), first) >= first:
                # The log's first copies: these replicas start from here. A root that
                # holds older events (numbered while it had no replicas: alone on its
                # side of a partition, say) leaves them to the next tick's sync.
                view.addrs = frozenset(n.addr for n in replicas)
            view.seq = max(view.seq, bodies[-1].seq or 0)
        # A reliable event waits for the root's own sync too (persisting nodes only).
        own_copy = written if reliable and written > self.durability.synced else None
        return self.waits.hold(now, bodies, origin, replicas, own_copy)

    def copies(self, topic: str) -> Retained | None:
        """The events this node holds of ``topic`` for its root (as a replica)."""
        return self.replica.get(topic)

    def replicas_of(self, topic: str) -> list[NodeRef]:
        """The nodes that hold this root's copies of ``topic``."""
        s = self.s
        if s.config.replicas == 0:
            return []
        return [n for n in s.host.replica_set(s.mid(topic), s.config.replicas)
                if n.id != s.me.id]

    def tick(self, now: float) -> None:
        """Copy again to silent replicas, bring new ones up to date; drop events past the
        retention bounds."""
        self.waits.tick(now)
        self._sync_replicas()
        cfg = self.s.config
        for table in (self.root, self.replica):
            for topic, retained in list(table.items()):
                retained.trim(now, cfg.retention_of(topic))
                if not retained.events:
                    del table[topic]
        if self.other_roots:
            self.other_roots.trim(now, cfg.retention_of)
        if self.durability.enabled:
            self._persist_trims()

    def _persist_trims(self) -> None:
        """Tell the store what retention dropped since the last tick."""
        persisted = self._persisted_from
        for topic in sorted({*persisted, *self.root, *self.replica}):
            held = [t[topic] for t in (self.root, self.replica) if topic in t]
            if not held:
                del persisted[topic]
                self.durability.write(DropLog(topic))
                continue
            complete_from = min(r.complete_from for r in held)
            if topic not in persisted:  # logged since the last tick
                persisted[topic] = complete_from
            elif complete_from > persisted[topic]:
                persisted[topic] = complete_from
                self.durability.write(TrimLog(topic, complete_from))

    def _missed(self, topic: str, addr: str) -> None:
        """The root gave replica ``addr`` up on for a copy of one of its ``topic`` events."""
        self.replica_views.setdefault(topic, ReplicaView()).lagging.add(addr)

    def on_replicate_ack(self, now: float, ack: ReplicateAck) -> None:
        self._heard_from(ack.topic, ack.replica.addr)
        self.waits.on_replicate_ack(now, ack)

    def on_replicate_acks(self, now: float, acks: ReplicateAcks) -> None:
        self._heard_from(acks.topic, acks.replica.addr)
        self.waits.on_replicate_acks(now, acks)

    def _heard_from(self, topic: str, addr: str) -> None:
        """A replica confirmed a copy: if it was lagging, the next tick sends it the whole
        log, as to a new replica."""
        view = self.replica_views.get(topic)
        if view is not None and addr in view.lagging:
            view.lagging.discard(addr)
            view.addrs -= {addr}

    def _sync_replicas(self) -> None:
        """Bring successors that became replicas, or that confirmed a copy again after the
        root gave them up on, up to date; copy the newest event to lagging ones (their
        confirmation shows them reachable again); tell every replica the counter when
        unreliable events moved it."""
        s = self.s
        for topic in sorted(s.numbering):
            replicas = self.replicas_of(topic)
            view = self.replica_views.setdefault(topic, ReplicaView())
            counter = s.seq.get(topic, 0)
            retained = self.root.get(topic)
            runs: list[list[EventBody]] | None = None  # built only for a new replica
            for replica in replicas:
                if replica.addr in view.lagging and replica.addr in view.addrs:
                    if retained:
                        newest = retained.events[retained.last_seq()][1]
                        s.send(replica, Replicate(newest, s.me))
                    else:
                        view.lagging.discard(replica.addr)  # nothing it could lack
                if replica.addr not in view.addrs:
                    if runs is None:
                        bodies = retained.bodies(len(retained)) if retained else []
                        # Oldest first, each a message's worth (the replica completes its
                        # buffer downward from whichever part comes first).
                        runs = message_runs(bodies, s.config.sizes)
                    for run in runs:
                        s.send(replica, ReplicaSync(topic, counter, s.me, tuple(run)))
                elif counter > view.seq:
                    s.send(replica, ReplicaSync(topic, counter, s.me, ()))
            view.addrs = frozenset(n.addr for n in replicas)
            view.lagging &= view.addrs
            view.seq = counter

    # -- storage -------------------------------------------------------------------------------

    def logs(self) -> dict[str, dict[str, Any]]:
        """Per topic this node retains events of: as its root or a replica, how many,
        their payload bytes, the first and last seq, the topic's counter, and its
        retention (the bounds that apply to it)."""
        found: dict[str, dict[str, Any]] = {}
        for role, table in (("replica", self.replica), ("root", self.root)):
            for topic, retained in table.items():
                events = retained.events
                found[topic] = {"role": role, "events": len(events),
                                "bytes": retained.payload_bytes,
                                "first_seq": next(iter(events), None),
                                "last_seq": retained.last_seq() if events else None,
                                "counter": self.s.seq.get(topic, 0),
                                "retention": self.s.config.retention_of(topic).limits()}
        return dict(sorted(found.items()))

    def restore(self, now: float, logs: list[RestoredLog], lost: bool = False) -> None:
        """Logs a store loaded at start: this node holds them as replica copies (it
        adopts them when it owns a topic's key again, and numbers on from their counter,
        never below it), each as old as :meth:`RestoredLog.age` says. ``lost``: the
        store was refused whole; until ``lost_until`` any topic this node claims is
        treated as restored (its replicas are asked)."""
        s = self.s
        if lost:
            self.lost_until = now + LOST_STORE_WINDOW
        for log in logs:
            copies = Retained(complete_from=log.complete_from)
            for body in log.events:
                copies.add(now - log.age(body), body)
            # Events past the topic's retention go now; the first tick tells the store.
            copies.trim(now, s.config.retention_of(log.topic))
            if copies.events:
                self.replica[log.topic] = copies
            self._persisted_from[log.topic] = log.complete_from
            self.restored.add(log.topic)
            self.unoffered.add(log.topic)
            s.note_seq(log.topic, max(log.counter, log.events[-1].seq or 0 if log.events
                                      else 0))
        if logs:  # the tick ages the copies and tells the store what restoring dropped
            s.wake(now)


__all__ = ["Retention"]

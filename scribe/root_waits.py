"""What a root's numbered events wait for before they go down the tree and their
publishers are answered.

A reliable event waits for its copies: one at each replica (:class:`ReplicateAck`, or
given up on: unreachable, or silent through ``REPLICATE_TRIES`` copies) and, on a
persisting node, the root's own (its group commit, ``on_synced``). Every event also
waits for the events numbered before it: a topic's events go down in seq order, so a
reliable event waiting for its copies holds back those after it (otherwise a root
failing right after sending them would leave members holding numbers the next root,
knowing only the replicated counter, gives to other events).

:class:`RootWaits` keeps both: per topic the queue of events not sent down yet (each
marked whether it may go), and per reliable event what it still waits for. What the root
keeps of its events (its log, their persists, the replicas' view) is
:class:`scribe.retention.Retention`'s, which hands each freshly kept run here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chord.kbr import NodeRef
from scribe.durability import Durability, ReplicaCopy, RootCopy
from scribe.ordering import Ahead
from scribe.publish_messages import (
    PublishAck,
    PublishRefused,
    Replicate,
    ReplicateAck,
    ReplicateAcks,
)
from scribe.state import ScribeState
from scribe.stream import Retained
from scribe.wire_records import MAX_BATCH, MAX_REASON, EventBody

#: Copies of a reliable event sent to a replica that does not confirm before the root
#: answers without it.
REPLICATE_TRIES = 3

#: Called on the publisher's own node when its event is acknowledged (topic, msg_id, seq).
LocalAck = Callable[[str, str, int], None]
#: Called on the publisher's own node when the root refuses its event (topic, msg_id,
#: the store's error).
LocalRefuse = Callable[[str, str, str], None]
#: Called when the root may send numbered events of one topic down the tree (now, the
#: events in seq order).
Release = Callable[[float, Sequence[EventBody]], None]
#: The root's log of a topic (None: it holds none).
RootLog = Callable[[str], Retained | None]
#: Called when the root gives a replica up on for a copy of one of its events (topic,
#: the replica's address): that replica's copies of the topic have a gap.
Missed = Callable[[str, str], None]


@dataclass
class PendingAck:
    """A reliable event the root numbered, waiting for its replicas' confirmations."""

    body: EventBody
    origins: list[NodeRef]
    #: The replicas asked to hold it, and the addresses of those yet to confirm.
    replicas: list[NodeRef]
    waiting: set[str]
    deadline: float
    #: Copies sent to each silent replica so far.
    tries: int = 1


class RootWaits:
    def __init__(self, state: ScribeState, local_ack: LocalAck, local_refuse: LocalRefuse,
                 release: Release, durability: Durability, ahead: Ahead,
                 root_log: RootLog, missed: Missed) -> None:
        self.s = state
        self.local_ack = local_ack
        self.local_refuse = local_refuse
        self.release = release
        self.durability = durability
        self.ahead = ahead
        self.root_log = root_log
        self.missed = missed
        #: Topic -> numbered events not sent down yet: seq -> (event, ready to go).
        self.unreleased: dict[str, OrderedDict[int, tuple[EventBody, bool]]] = {}
        #: (topic, msg_id) -> reliable events waiting for replica confirmations.
        self.pending: dict[tuple[str, str], PendingAck] = {}

    def __bool__(self) -> bool:
        """Whether the maintenance tick has work here (copies to send again)."""
        return bool(self.pending)

    def released_through(self, topic: str) -> int:
        """Every event up to this seq has been sent down the tree (or was there before
        this root: restored from members, synced by another root)."""
        queue = self.unreleased.get(topic)
        if queue:
            return next(iter(queue)) - 1
        return self.s.seq.get(topic, 0)

    def hold(self, now: float, bodies: Sequence[EventBody], origin: NodeRef,
             replicas: list[NodeRef], own_copy: int | None) -> bool:
        """Freshly kept events of one topic (in seq order, from ``origin``): copy them to
        ``replicas`` and wait for their confirmations, and for the root's own copy
        (``own_copy``: the persist it waits for; None: none). True when nothing is to
        be waited for: the caller answers and releases them."""
        s = self.s
        topic = bodies[0].topic
        queue = self.unreleased.get(topic)
        if not replicas and own_copy is None:
            if queue:  # behind events that wait for their replicas
                for body in bodies:
                    queue[body.seq or 0] = (body, True)
            return True
        if queue is None:
            queue = self.unreleased[topic] = OrderedDict()
        for body in bodies:
            queue[body.seq or 0] = (body, False)
        for body in bodies:
            for replica in replicas:
                s.send(replica, Replicate(body, s.me))
        waiting = {n.addr for n in replicas}
        if own_copy is not None:  # the root's own address stands for its own copy
            waiting.add(s.me.addr)
        deadline = now + s.config.replica_timeout
        for body in bodies:
            if own_copy is not None:
                self.durability.after(own_copy, RootCopy(topic, body.msg_id))
            self.pending[(topic, body.msg_id)] = PendingAck(
                body, [origin], replicas, set(waiting), deadline)
        s.wake(now)
        return False

    def hand_over(self, topic: str) -> None:
        """This node handed ``topic``'s key over: its events still waiting to go down
        went with its log, and the new root sends them. Their confirmations may still
        come (their publishers are answered: the copies are stored), but nothing goes
        down from here: as a member now, this node's position would pass events it has
        not had."""
        self.unreleased.pop(topic, None)

    def release_ready(self, now: float, topic: str, kept: Sequence[EventBody] = ()) -> None:
        """Send down, in seq order, the events at the head of the queue that may go.
        ``kept``: events :meth:`hold` found ready, which it did not queue when no event
        of the topic was waiting (then they go at once)."""
        queue = self.unreleased.get(topic)
        if queue:
            kept = []
            while queue:
                seq, (body, ready) = next(iter(queue.items()))
                if not ready:
                    break
                del queue[seq]
                kept.append(body)
            if not queue:
                del self.unreleased[topic]
        if kept:
            with self.ahead(topic, kept):
                self.release(now, kept)

    # -- a partition merge renumbers queued events ---------------------------------------------

    def take_queued(self, topic: str, seq: int) -> bool:
        """Take the event at ``seq`` out of the queue (it moves to another number):
        whether it was queued."""
        queue = self.unreleased.get(topic)
        return queue is not None and queue.pop(seq, None) is not None

    def hold_moved(self, now: float, moved: Sequence[EventBody],
                   replicas: list[NodeRef]) -> None:
        """Events a partition merge moved to new numbers (after every number queued): a
        new number goes down only once the replicas hold the event under it, as a
        freshly numbered event's does; otherwise a root failing right after sending them
        would leave members holding numbers its successor lacks. (The root's own store
        writes the move unwaited: its copies are there under their old numbers.) A
        publisher still waiting for one is answered then, its root copy still counted."""
        s = self.s
        deadline = now + s.config.replica_timeout
        done: list[PendingAck] = []  # still waiting for nothing: answered below
        for body in moved:
            key = (body.topic, body.msg_id)
            waiting = {n.addr for n in replicas}
            pending = self.pending.get(key)
            if pending is not None:  # its replicas' confirmations were for its old number
                waiting |= pending.waiting & {s.me.addr}
                pending.body, pending.replicas = body, replicas
                pending.waiting, pending.deadline, pending.tries = waiting, deadline, 1
                if not waiting:
                    done.append(self.pending.pop(key))
            elif waiting:
                self.pending[key] = PendingAck(body, [], replicas, waiting, deadline)
            queue = self.unreleased.setdefault(body.topic, OrderedDict())
            queue[body.seq or 0] = (body, not waiting and pending is None)
            for replica in replicas:
                s.send(replica, Replicate(body, s.me))
        self._answer(now, done)
        s.wake(now)

    # -- confirmations -------------------------------------------------------------------------

    def also_waiting(self, topic: str, msg_id: str, origin: NodeRef) -> bool:
        """A retried publish of an event still waiting for its replicas: answer that
        origin too when they confirm. False when nothing is pending for it."""
        pending = self.pending.get((topic, msg_id))
        if pending is None:
            return False
        if all(o.id != origin.id for o in pending.origins):
            pending.origins.append(origin)
        return True

    def on_replicate_ack(self, now: float, ack: ReplicateAck) -> None:
        # A replica that could not store its copy is given up on at once: the root does
        # not wait for it (as for a silent one), nor refuse the event for it.
        self._confirmed(now, ack.topic, ack.msg_id, ack.seq, ack.replica.addr)

    def on_replicate_acks(self, now: float, acks: ReplicateAcks) -> None:
        """A replica's confirmations of one sync: the events they free are answered and
        go down the tree together (a run per topic), as after the root's own sync."""
        addr = acks.replica.addr
        done = [pending for msg_id, seq in zip(acks.msg_ids, acks.seqs, strict=True)
                if (pending := self._confirm(acks.topic, msg_id, seq, addr)) is not None]
        self._answer(now, done)

    def replica_unreachable(self, now: float, dest: str, msg: Replicate) -> None:
        body = msg.body
        pending = self.pending.get((body.topic, body.msg_id))
        if pending is not None and pending.body.seq == body.seq and dest in pending.waiting:
            self.missed(body.topic, dest)
        self._confirmed(now, body.topic, body.msg_id, body.seq or 0, dest)

    def _confirmed(self, now: float, topic: str, msg_id: str, seq: int,
                   replica_addr: str) -> None:
        done = self._confirm(topic, msg_id, seq, replica_addr)
        if done is not None:
            self._answer(now, [done])

    def _confirm(self, topic: str, msg_id: str, seq: int | None, replica_addr: str
                 ) -> PendingAck | None:
        """``replica_addr`` holds its copy of the event under number ``seq`` (None: the
        root's own copy, under any number): the event's pending entry, taken out, when
        that was the last copy it waited for. (A replica's copy under an older number,
        the event since moved by a merge, confirms nothing.)"""
        pending = self.pending.get((topic, msg_id))
        if pending is None or (seq is not None and pending.body.seq != seq):
            return None
        pending.waiting.discard(replica_addr)
        return None if pending.waiting else self.pending.pop((topic, msg_id))

    def tick(self, now: float) -> None:
        """Copy again to silent replicas (a copy or its confirmation may be lost), give up
        on them after ``REPLICATE_TRIES`` copies."""
        s = self.s
        for key, pending in list(self.pending.items()):
            if pending.deadline > now:
                continue
            if pending.tries >= REPLICATE_TRIES:
                # Silent replicas are given up on; the root's own copy never is (its
                # sync comes, or the publish times out at its origin).
                for addr in sorted(pending.waiting - {s.me.addr}):
                    self.missed(key[0], addr)
                pending.waiting &= {s.me.addr}
                pending.deadline = float("inf")
                if not pending.waiting:
                    self._answer(now, [self.pending.pop(key)])
                continue
            pending.tries += 1
            pending.deadline = now + s.config.replica_timeout
            for replica in pending.replicas:
                if replica.addr in pending.waiting:
                    s.send(replica, Replicate(pending.body, s.me))

    # -- answers -------------------------------------------------------------------------------

    def answer(self, body: EventBody, origin: NodeRef) -> None:
        """Tell the publisher's node that the root holds ``body`` (number ``body.seq``)."""
        s = self.s
        assert body.seq is not None
        if origin.id == s.me.id:
            self.local_ack(body.topic, body.msg_id, body.seq)
        else:
            s.send(origin, PublishAck(body.topic, body.msg_id, body.seq, s.me))

    def refuse(self, topic: str, msg_id: str, origin: NodeRef, reason: str) -> None:
        """Tell the publisher's node that this root cannot store its reliable event."""
        s = self.s
        reason = reason[:MAX_REASON]
        if origin.id == s.me.id:
            self.local_refuse(topic, msg_id, reason)
        else:
            s.send(origin, PublishRefused(topic, msg_id, reason, s.me))

    def _answer(self, now: float, done: Sequence[PendingAck]) -> None:
        """Events whose copies are all stored: they may go down the tree (those at the
        head of their topic's queue go, each topic's in one run), then their publishers
        are answered."""
        topics: dict[str, None] = {}  # in order of first appearance
        for pending in done:
            body = pending.body
            assert body.seq is not None
            queue = self.unreleased.get(body.topic)
            if queue is not None and body.seq in queue:
                queue[body.seq] = (body, True)
                topics[body.topic] = None
        for topic in topics:
            self.release_ready(now, topic)
        for pending in done:
            for origin in pending.origins:
                self.answer(pending.body, origin)

    # -- storage -------------------------------------------------------------------------------

    def on_synced(self, now: float, through: int) -> None:
        """Persists up to ``through`` are on disk: confirm the root's own copies, send
        the replicas' confirmations."""
        s = self.s
        done: list[PendingAck] = []
        #: (root, topic) -> the confirmations of its copies this sync made, in order.
        confirmed: dict[tuple[str, str], list[ReplicaCopy]] = {}
        for waiter in self.durability.synced_through(through):
            if isinstance(waiter, RootCopy):
                pending = self._confirm(waiter.topic, waiter.msg_id, None, s.me.addr)
                if pending is not None:
                    done.append(pending)
            else:
                confirmed.setdefault((waiter.root.addr, waiter.ack.topic), []).append(waiter)
        for copies in confirmed.values():
            self._send_confirmations(copies)
        # A group commit frees many events at once: they go down the tree together (a
        # run per topic, as unreliable ones do), not one pass through the tree each.
        self._answer(now, done)

    def _send_confirmations(self, copies: list[ReplicaCopy]) -> None:
        """A replica's confirmations of one root's copies of one topic, synced together:
        MAX_BATCH to a :class:`ReplicateAcks` (whose bytes that bounds), one alone as
        its :class:`ReplicateAck`."""
        for at in range(0, len(copies), MAX_BATCH):
            run = copies[at:at + MAX_BATCH]
            first = run[0]
            if len(run) == 1:
                self.s.send(first.root, first.ack)
                continue
            self.s.send(first.root, ReplicateAcks(
                first.ack.topic, tuple(c.ack.msg_id for c in run),
                tuple(c.ack.seq for c in run), first.ack.replica))

    def on_storage_failed(self, now: float, through: int, reason: str) -> None:
        """The events of persists up to ``through`` not synced yet are not stored (their
        counters are). A reliable event whose root copy is among them is refused to its
        publisher and dropped: never sent down the tree nor served, and its seq is not
        used again (a retried publish is numbered afresh). A replica tells the root that
        its copy is not stored."""
        s = self.s
        refused = 0
        began = self.durability.failed_at is None
        for waiter in self.durability.failed_through(now, through):
            if isinstance(waiter, ReplicaCopy):
                ack = waiter.ack
                s.send(waiter.root, ReplicateAck(ack.topic, ack.msg_id, ack.seq, ack.replica,
                                                 stored=False))
                continue
            pending = self.pending.pop((waiter.topic, waiter.msg_id), None)
            if pending is None:
                continue
            refused += 1
            self._drop_unstored(now, pending.body)
            for origin in pending.origins:
                self.refuse(waiter.topic, waiter.msg_id, origin, reason)
        if began or refused:  # not one record per failed group commit of a full disk
            s.trace("storage_failed", through=through, reason=reason, refused=refused)

    def _drop_unstored(self, now: float, body: EventBody) -> None:
        topic, seq = body.topic, body.seq
        assert seq is not None
        retained = self.root_log(topic)
        if retained is not None:
            retained.remove(seq)
        queue = self.unreleased.get(topic)
        if queue is not None and queue.pop(seq, None) is not None:
            if queue:
                self.release_ready(now, topic)  # the events behind it may go now
            else:
                del self.unreleased[topic]


__all__ = ["LocalAck", "LocalRefuse", "PendingAck", "Release", "RootLog", "RootWaits"]

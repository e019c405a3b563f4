"""What the root keeps so that an acknowledged event is not lost with it.

Per topic the root retains its numbered events (bounded by ``retain_count`` and
``retain_seconds``) and, for a reliable publish, sends a copy (:class:`Replicate`) to
the next ``replicas`` nodes of its successor list, the nodes that take the topic's key
over when it fails. The publisher is answered only when every one of them confirmed
(:class:`ReplicateAck`), or was given up on: unreachable, or silent past
``replica_timeout`` (the ring's own repair then changes the successor list). A replica
keeps the copies and the counter; when it becomes responsible for the key, it adopts
them and numbers on from there, so the sequence neither restarts nor forks.

The retained events also make the root idempotent: a publish retried with a msg_id it
already numbered is answered with the same number and not sent down the tree again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from chord.kbr import NodeRef
from scribe.messages import EventBody, PublishAck, Replicate, ReplicateAck
from scribe.state import ScribeState


@dataclass
class Retained:
    """One topic's numbered events, oldest first."""

    events: OrderedDict[int, tuple[float, EventBody]] = field(default_factory=OrderedDict)
    by_msg: dict[str, int] = field(default_factory=dict)

    def add(self, now: float, body: EventBody) -> None:
        assert body.seq is not None
        if body.seq not in self.events:
            self.events[body.seq] = (now, body)
            self.by_msg[body.msg_id] = body.seq

    def trim(self, now: float, count: int, seconds: float) -> None:
        while self.events:
            seq, (kept_at, body) = next(iter(self.events.items()))
            if len(self.events) <= count and kept_at > now - seconds:
                return
            del self.events[seq]
            self.by_msg.pop(body.msg_id, None)

    def merge(self, other: Retained) -> None:
        for seq, (kept_at, body) in other.events.items():
            if seq not in self.events:
                self.events[seq] = (kept_at, body)
                self.by_msg[body.msg_id] = seq
        self.events = OrderedDict(sorted(self.events.items()))


@dataclass
class PendingAck:
    """A reliable event the root numbered, waiting for its replicas' confirmations."""

    body: EventBody
    origins: list[NodeRef]
    waiting: set[str]
    deadline: float


#: Called on the publisher's own node when its event is acknowledged (topic, msg_id, seq).
LocalAck = Callable[[str, str, int], None]


class Retention:
    def __init__(self, state: ScribeState, local_ack: LocalAck) -> None:
        self.s = state
        self.local_ack = local_ack
        #: Topic -> events this node numbered as its root.
        self.root: dict[str, Retained] = {}
        #: Topic -> copies this node holds for the topic's root.
        self.replica: dict[str, Retained] = {}
        #: (topic, msg_id) -> reliable events waiting for replica confirmations.
        self.pending: dict[tuple[str, str], PendingAck] = {}

    def __bool__(self) -> bool:
        """Whether the maintenance tick has work here (time-outs, trimming)."""
        return bool(self.pending or self.root or self.replica)

    # -- at the root -------------------------------------------------------------------------

    def numbered(self, topic: str, msg_id: str) -> int | None:
        """The number this root gave ``msg_id`` already (a retried publish), if any."""
        retained = self.root.get(topic)
        return None if retained is None else retained.by_msg.get(msg_id)

    def adopt_replica(self, topic: str) -> None:
        """This node now numbers ``topic``: take over the copies it holds for it."""
        copies = self.replica.pop(topic, None)
        if copies is not None:
            self.root.setdefault(topic, Retained()).merge(copies)
            if copies.events:
                self.s.note_seq(topic, next(reversed(copies.events)))

    def keep(self, now: float, body: EventBody, origin: NodeRef, reliable: bool) -> bool:
        """Retain a freshly numbered event; for a reliable one, copy it to the replicas.
        True when the publisher can be answered now (nothing to wait for)."""
        s = self.s
        topic = body.topic
        retained = self.root.setdefault(topic, Retained())
        retained.add(now, body)
        retained.trim(now, s.config.retain_count, s.config.retain_seconds)
        if not reliable or s.config.replicas == 0:
            return True
        replicas = [n for n in s.host.replica_set(s.mid(topic), s.config.replicas)
                    if n.id != s.me.id]
        if not replicas:
            return True  # alone in the ring: nobody to copy to
        for replica in replicas:
            s.send(replica, Replicate(body, s.me))
        self.pending[(topic, body.msg_id)] = PendingAck(
            body, [origin], {n.addr for n in replicas}, now + s.config.replica_timeout)
        s.wake(now)
        return False

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
        self._confirmed(now, ack.topic, ack.msg_id, ack.replica.addr)

    def replica_unreachable(self, now: float, dest: str, msg: Replicate) -> None:
        self._confirmed(now, msg.body.topic, msg.body.msg_id, dest)

    def _confirmed(self, now: float, topic: str, msg_id: str, replica_addr: str) -> None:
        pending = self.pending.get((topic, msg_id))
        if pending is None:
            return
        pending.waiting.discard(replica_addr)
        if not pending.waiting:
            self._answer(self.pending.pop((topic, msg_id)))

    def tick(self, now: float) -> None:
        """Give up on silent replicas; drop events past the retention bounds."""
        for key, pending in list(self.pending.items()):
            if pending.deadline <= now:
                self._answer(self.pending.pop(key))
        cfg = self.s.config
        for table in (self.root, self.replica):
            for topic, retained in list(table.items()):
                retained.trim(now, cfg.retain_count, cfg.retain_seconds)
                if not retained.events:
                    del table[topic]

    def answer(self, body: EventBody, origin: NodeRef) -> None:
        """Tell the publisher's node that the root holds ``body`` (number ``body.seq``)."""
        s = self.s
        assert body.seq is not None
        if origin.id == s.me.id:
            self.local_ack(body.topic, body.msg_id, body.seq)
        else:
            s.send(origin, PublishAck(body.topic, body.msg_id, body.seq, s.me))

    def _answer(self, pending: PendingAck) -> None:
        for origin in pending.origins:
            self.answer(pending.body, origin)

    # -- at a replica ------------------------------------------------------------------------

    def on_replicate(self, now: float, msg: Replicate) -> None:
        s = self.s
        body = msg.body
        assert body.seq is not None
        copies = self.replica.setdefault(body.topic, Retained())
        copies.add(now, body)
        copies.trim(now, s.config.retain_count, s.config.retain_seconds)
        s.note_seq(body.topic, body.seq)
        s.send(msg.root, ReplicateAck(body.topic, body.msg_id, body.seq, s.me))
        s.wake(now)


__all__ = ["LocalAck", "PendingAck", "Retained", "Retention"]

"""What a node does with the copies other nodes send it of the topics they number: a
root's copies (:class:`Replicate`, :class:`ReplicaSync`) join this node's replica log
of the topic where they fit it, and are kept apart as another root's where they do not
(the other side of a healed partition may replicate here: scribe.other_roots). At a
root gathering a topic (recovering it), a member's answer joins the root's own log.
Split from :mod:`scribe.retention`, whose tables (``root``, ``replica``,
``other_roots``) these are: given at construction, shared, never replaced.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from chord.kbr import NodeRef
from scribe.durability import AppendEvents, Durability, NoteCounter, ReplicaCopy
from scribe.other_roots import OtherRoots
from scribe.publish_messages import ReplicaSync, Replicate, ReplicateAck, Restore
from scribe.state import ScribeState
from scribe.stream import Retained
from scribe.wire_records import EventBody

#: ``Retention.adopt_events``: a handed log's events (numbered up to a counter) taken
#: into this node's log of a topic, merged where they fork from it.
AdoptEvents = Callable[[float, str, tuple[EventBody, ...], int], None]


def _contiguous(events: tuple[EventBody, ...]) -> bool:
    return all((b.seq or 0) == (a.seq or 0) + 1 for a, b in itertools.pairwise(events))


class ReplicaCopies:
    """Takes the copies and syncs other nodes send this one (see the module)."""

    def __init__(self, state: ScribeState, durability: Durability,
                 root: dict[str, Retained], replica: dict[str, Retained],
                 other_roots: OtherRoots, adopt_events: AdoptEvents) -> None:
        self.s = state
        self.durability = durability
        #: Topic -> events this node numbered as its root (Retention's).
        self.root = root
        #: Topic -> copies this node holds for the topic's root (Retention's).
        self.replica = replica
        #: Other roots' copies, kept apart until taken in (Retention's).
        self.other_roots = other_roots
        self._adopt_events = adopt_events

    def on_replica_sync(self, now: float, msg: ReplicaSync) -> None:
        s = self.s
        # At a root gathering the topic (recovering it, or finding members ahead of its
        # counter) a member's events join its own buffer; anywhere else they are a
        # replica's copies: at a root that numbers on, another root's (see on_replicate).
        gathering = msg.topic in s.recovering
        if gathering and msg.events and msg.topic in self.root \
                and self._asked_again(now, msg.topic, msg.root, msg.events[0]):
            return  # its events come again, with the fork, in the answer asked for
        if gathering and msg.events and msg.topic in self.root:
            # Taken in as a handover's events are (scribe.merge): a member may have
            # handled another lineage's numbers (the other side of a healed partition),
            # whose events must not fill this root's holes, nor move its own events to
            # their numbers: a clash forks, and both sides' events move on.
            self._adopt_events(now, msg.topic, msg.events, msg.seq)
        else:
            first = msg.events[0].seq or 1 if msg.events else msg.seq + 1
            if gathering:
                self.root[msg.topic] = self._stored(now, self.root.get(msg.topic), msg.topic,
                                                    first, msg.events)
            elif msg.topic not in s.numbering:
                self._keep_copies(now, msg.topic, msg.root, msg.seq, first, msg.events)
            elif msg.events:  # another root's (see on_replicate)
                self._keep_apart(now, msg.topic, msg.root, msg.seq, msg.events)
            if msg.events:
                self.durability.write(AppendEvents(msg.topic, msg.events))
        if gathering or msg.topic not in s.numbering:
            s.note_seq(msg.topic, msg.seq)
            self.durability.write(NoteCounter(msg.topic, msg.seq))
        s.wake(now)

    def _asked_again(self, now: float, topic: str, member: NodeRef, first: EventBody) -> bool:
        """An answer to this gathering root's :class:`Restore` whose first event names
        (``prev``) another event than this root's log holds before it: the member's events
        fork from this root's below where the root asked from (its contiguous reach, held
        to be the same events on both), and the member's event at the fork may be one
        this root lacks (acknowledged, if the member numbered it as root while this node
        was down). Merging the answer as it is would leave that seq a hole, which the
        event's later fill would put below this root's tree's position: ask the member
        once again for everything from the log's start, so that the merge sees the fork.
        True when asked (the answer is dropped: its events come again)."""
        s = self.s
        log = self.root[topic]
        seq = first.seq or 0
        held = log.events.get(seq - 1)
        asked = s.asked_whole.setdefault(topic, set())
        if held is None or first.follows(held[1]) or member.id in asked:
            return False
        asked.add(member.id)
        s.send(member, Restore(topic, s.me, log.complete_from - 1))
        s.recover_until(now, topic, now + 2 * s.config.replica_timeout)
        return True

    def _keep_copies(self, now: float, topic: str, root: NodeRef, counter: int, first: int,
                     events: tuple[EventBody, ...]) -> bool:
        """A root's copies (numbered up to ``counter``) at a node that does not number
        the topic: kept in its replica log where they fit it (:meth:`Retained.fits`),
        apart as another root's where they do not: the other side of a healed partition
        may replicate here, and its numbers are not this log's (scribe.other_roots).
        True when every copy fits."""
        log = self.replica.get(topic)
        apart = [] if log is None else [b for b in events if not log.fits(b)]
        if apart:
            self._keep_apart(now, topic, root, counter, tuple(apart))
            kept_apart = {b.msg_id for b in apart}
            events = tuple(b for b in events if b.msg_id not in kept_apart)
            if not events:
                return False
            first = events[0].seq or 1
        self.replica[topic] = self._stored(now, log, topic, first, events)
        return not apart

    def _keep_apart(self, now: float, topic: str, root: NodeRef, counter: int,
                    events: tuple[EventBody, ...]) -> None:
        """Another root's copies (numbered up to ``counter``), kept apart from this
        node's logs until a merge takes them in (scribe.other_roots)."""
        other = self.other_roots.copies_of(now, topic, root, counter)
        other.copies = self._stored(now, other.copies, topic, events[0].seq or 1, events)

    def _stored(self, now: float, retained: Retained | None, topic: str, first: int,
                events: tuple[EventBody, ...]) -> Retained:
        """``retained`` (a buffer of ``topic``'s copies) with ``events`` kept in it; a new
        buffer holds every event from ``first`` on (older ones are not with this node)."""
        if retained is None:
            retained = Retained(complete_from=first)
        elif events and first < retained.complete_from and _contiguous(events) \
                and (events[-1].seq or 0) >= retained.complete_from - 1:
            # An older part of a sync split across messages, come after a newer one:
            # with it the buffer is complete from its first event on.
            retained.complete_from = first
        retained.merge(now, events)
        retained.trim(now, self.s.config.retention_of(topic))
        return retained

    def on_replicate(self, now: float, msg: Replicate) -> None:
        s = self.s
        body = msg.body
        assert body.seq is not None
        topic = body.topic
        if topic not in s.numbering:
            if self._keep_copies(now, topic, msg.root, body.seq, body.seq, (body,)):
                s.note_seq(topic, body.seq)
        else:
            # The copy is another root's: a number it gave is no number this one has,
            # nor events its tree had. Kept apart, and taken in only by the merge of
            # that root's log (its handover, or scribe.other_roots if none comes).
            self._keep_apart(now, topic, msg.root, body.seq, (body,))
        if any(log is not None and (held := log.events.get(body.seq)) is not None
               and held[1].msg_id != body.msg_id
               for log in (self.root.get(topic), self.replica.get(topic))):
            # Its number holds another event in this node's log on disk (one row per
            # number): kept apart in memory only, and the root told it is not stored.
            s.send(msg.root, ReplicateAck(topic, body.msg_id, body.seq, s.me, stored=False))
            s.wake(now)
            return
        ack = ReplicateAck(body.topic, body.msg_id, body.seq, s.me)
        written = self.durability.write(AppendEvents(body.topic, (body,)))
        if not self.durability.after(written, ReplicaCopy(msg.root, ack)):
            s.send(msg.root, ack)
        s.wake(now)


__all__ = ["ReplicaCopies"]

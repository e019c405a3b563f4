"""The root's side of gap repair: routed pulls, and getting back what a failed root took.

A routed :class:`Pull` (a re-joined member's catch-up) reaches the topic's key; the
root answers it from its retention buffer with what the puller's digest wants. A root
that took the key over knowing nothing of the topic (``ScribeState.recovering``) first
gathers: it holds such pulls, notes the pullers' positions (a member ahead of its
counter proves numbers it must not give again) and asks members for the events it
lacks (:class:`Restore`, answered with :class:`ReplicaSync`: the former root and each of
its replicas may have failed, and members that received its last events are then their
only holders); it answers the held pulls when the wait ends.
"""

from __future__ import annotations

from chord.kbr import NodeRef
from scribe.messages import Fill, Pull
from scribe.ordering import Released, RootLog, batch
from scribe.publish_messages import ReplicaSync, Restore
from scribe.state import ScribeState
from scribe.stream import Retained
from scribe.summaries import Digest


def restore_after(log: Retained | None) -> int:
    """Where a root asks a member or replica for the events it lacks from
    (:class:`Restore`): past its log's contiguous reach, both taken to hold the same
    events up to there (an answer whose first event shows otherwise is asked for again
    from the log's start: ``Retention._asked_again``)."""
    return 0 if log is None else log.contiguous_through()


class RootPulls:
    def __init__(self, state: ScribeState, root_log: RootLog, released: Released,
                 copies: RootLog) -> None:
        self.s = state
        self.root_log = root_log
        self.released = released
        #: The events this node holds of a topic as a replica (a restarted root asks).
        self.copies = copies

    def on_root_pull(self, now: float, pull: Pull) -> None:
        """A routed pull reached the topic's key: answer it from the retained events."""
        s = self.s
        topic = pull.topic
        if topic in s.recovering or (pull.after > s.seq.get(topic, 0)
                                     and topic in s.numbering):
            # Gather first: the puller's position, and the events it holds that this
            # root lacks (it may be the only survivor holding them); answer at the end.
            held = s.held_pulls.setdefault(topic, {})
            if pull.child.id not in held:
                self.gather_from(now, topic, pull.child, pull.after)
            else:
                s.note_seq(topic, pull.after)
            held[pull.child.id] = pull
            return
        log = self.root_log(pull.topic)
        if log is None or pull.digest is None:
            if pull.topic not in s.numbering:
                return  # not this topic's root (yet): the puller asks again
            log = Retained(complete_from=s.seq.get(pull.topic, 0) + 1)
        wanted = Digest.from_wire(pull.digest, s.config.summary_max_filters) \
            if pull.digest is not None else None
        released = self.released(pull.topic)
        events, through = batch(log, pull.after, released, lambda body: (
            wanted is None or not s.config.summaries or wanted.plain_may_match(body.attrs)),
            s.config.sizes.batch_bytes)
        gone_before = log.complete_from if log.complete_from > pull.after + 1 else 0
        s.send(pull.child, Fill(pull.topic, s.me, pull.after, through, tuple(events),
                                gone_before, routed=True, more=through < released))


    def gather_from(self, now: float, topic: str, member: NodeRef, position: int) -> None:
        """``member`` handled ``topic`` up to ``position``: the root asks it for what it
        holds of that and the root lacks, and numbers on above it. Past this root's
        counter (it was lost with every copy; or numbered on the other side of a
        partition), the root gathers as a recovering root does (publishes and pulls
        wait). What comes goes down this root's tree
        before its next event (``Ordering.unsent``): its own members may not have it.
        (Moving the tree's position to the member's would vouch for events it never
        had.)"""
        s = self.s
        if topic not in s.recovering and position > s.seq.get(topic, 0):
            s.recover_until(now, topic, now + 2 * s.config.replica_timeout)
        self._ask_restore(topic, member, position)
        s.note_seq(topic, position)

    def _ask_restore(self, topic: str, member: NodeRef, position: int) -> None:
        """A member handled this topic up to ``position``. When this root does not hold
        every event up to there (the former root failed with each of its replicas, and
        members that received its last events may be their only holders), ask the
        member for the events it handled beyond what the root holds."""
        holds = restore_after(self.root_log(topic))
        if position > holds:
            self.s.send(member, Restore(topic, self.s.me, holds))

    def on_restore(self, now: float, msg: Restore) -> None:
        """A root recovering the topic asks for the events this node handled after
        ``after``: send them from the log (as replica syncs, a message's worth each)."""
        s = self.s
        copies = self.copies(msg.topic)
        tree = s.trees.get(msg.topic)
        if copies is not None and copies.events:  # a replica's copies: all it holds
            log, through = copies, max(copies.last_seq(), s.seq.get(msg.topic, 0))
        elif tree is not None and tree.stream.through is not None:
            log, through = tree.stream.log, tree.stream.through
        else:
            return
        after = msg.after
        while True:
            events, reached = batch(log, after, through, lambda body: True,
                                    s.config.sizes.batch_bytes)
            s.send(msg.root, ReplicaSync(msg.topic, through, s.me, tuple(events)))
            if reached >= through or not events:
                return
            after = reached


__all__ = ["RootPulls", "restore_after"]

"""What a restarted node knows of the keys it owned before, and the keys it only stands in
for until their owners are back.

A Chord node owns the keys after its predecessor's id up to its own. Every node
persists that range's start (:class:`~scribe.durability.NoteRange`) whenever its
predecessor changes. After a restart of many nodes, one back early owns, for a while, the
keys of nodes not back yet: their topics' latest logs are on those nodes' disks, and
numbering such a topic from what this node knows (a stale copy, or nothing) forks the
sequence, which the holders' return then merges by moving events to new numbers
(scribe.merge): no acknowledged event is lost, but an application whose node restarted
meanwhile may get one again, under its new number.

A node that knows its former range knows better: a key it owns now but did not own
before the restart belongs to a node that was in the ring when it stopped. For such a
key it **stands in**: it takes the topic's root role (members join, publishers find it)
but numbers nothing, holding publishes, pulls and replays as a recovering root does
(:meth:`ScribeState.recover_until`), until

- the owner is back: the ring moves the key to it, and this node hands over what it
  holds and sends the held publishes on to it (nothing was numbered, nothing forks); or
- ``standin_wait`` has passed since the node was back in the ring: the owner may be gone
  for good, and the topic must not stay unavailable; the node numbers from what it holds
  (a replica copy holds every acknowledged event) and a late owner's return is merged.

Knowledge, not a guess from time alone: a node with no former range (new, or its store
was lost) or one whose keys are all within its former range never waits. The former
range is only as exact as the predecessor the node knew when it stopped (one that had
failed unnoticed makes the node wait ``standin_wait`` for it; one that had joined
unnoticed gives the node keys that were the newcomer's for a moment).
"""

from __future__ import annotations

from dataclasses import dataclass

from chord.ring import in_half_open, in_open


@dataclass
class FormerRange:
    """The key range a restarted node owned before (see the module docs)."""

    #: The node's own id, and the ring's size.
    me: int
    ring_size: int
    #: How long, once back in the ring, it waits for the owners of the other keys.
    wait: float
    #: Its predecessor's id when it stopped (None: not known, or the wait is over).
    start: int | None = None
    #: When the wait ends (None: not in the ring again yet: set at the first question).
    until: float | None = None
    #: The range start the store holds (None: none written yet).
    persisted: int | None = None

    def restored(self, start: int | None) -> None:
        """The store kept ``start`` (None: nothing was kept)."""
        self.start, self.until, self.persisted = start, None, start

    def deadline(self, now: float) -> float | None:
        """When the wait ends, if the node has one running (counted from the first
        question after the restore: the node asks once it is back in the ring)."""
        if self.start is None:
            return None
        if self.until is None:
            self.until = now + self.wait
        if now >= self.until:
            self.start = None  # over: every key the node owns now is its own
            return None
        return self.until

    def standing_in(self, now: float, key: int) -> bool:
        """Whether ``key`` (owned now) belonged to another node before the restart, whose
        return this node still waits for."""
        start = self.start
        return self.deadline(now) is not None and start is not None \
            and not in_half_open(key, start, self.me, self.ring_size)

    def note(self, now: float, pred: int | None) -> int | None:
        """The range start to persist, the predecessor being ``pred`` (None: nothing to
        write: unchanged, unknown, or wider than the former range while the node waits,
        as a second restart must find the former range again; the first call after the
        wait gives it)."""
        if pred is None or pred == self.persisted:
            return None
        start = self.start
        if self.deadline(now) is not None and start is not None and start != pred \
                and in_open(start, pred, self.me, self.ring_size):
            return None
        self.persisted = pred
        return pred


__all__ = ["FormerRange"]

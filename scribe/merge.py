"""What a root does with a log another root numbered in parallel (a healed partition).

While the ring is split, each side has a node responsible for a topic's key, and both
number events: from the last number they shared on (the fork), the same seqs name
different events on each side. At the heal one of them keeps the key and is handed the
other's log (:class:`~scribe.messages.RootHandover`). Keeping either side's events at
those seqs would lose the other side's; so the root **moves** every event numbered on
either side since the fork to new numbers after both counters, in publish-time order
(``ts``, then msg_id), and sends them down the tree:

- every member's position is at most one of the two counters, so each moved event
  comes after it: a subscription never sees seq go backwards;
- a member handled its own side's events already (under their old numbers): the moved
  copy is recognised by its msg_id (the node's log of handled events, or its memory of
  recent ones) and passed on to the children, not delivered again; the other side's
  events are new to it and delivered;
- the old numbers are left empty in the root's log (a pull for them gets nothing, a
  replay returns each event once, at its new number).

:func:`plan_merge` decides; ``Retention.merge`` carries the plan out (buffers, persists,
replicas, the release queue).
"""

from __future__ import annotations

from dataclasses import dataclass

from scribe.messages import EventBody
from scribe.stream import Retained


@dataclass(frozen=True)
class MergePlan:
    """How a root takes in another root's events of one topic."""

    #: Events of the other side to keep at their own seqs: the root's log has nothing
    #: there (it lost them, or never had them), and they precede the fork.
    fill: tuple[EventBody, ...]
    #: The first seq the two sides gave to different events (None: no fork, the other
    #: log only continues or completes this one, and ``moving`` is empty).
    fork: int | None
    #: This root's events from the fork on that the other side lacks, as numbered now.
    ours: tuple[EventBody, ...]
    #: Every event to renumber, in its new order, with the numbers it has now.
    moving: tuple[EventBody, ...]
    #: The new numbers start after this one (both counters).
    base: int

    def renumbered(self) -> tuple[EventBody, ...]:
        return tuple(body.numbered(self.base + 1 + i) for i, body in enumerate(self.moving))


def plan_merge(mine: Retained, counter: int, theirs: tuple[EventBody, ...],
               their_counter: int, moved_below: int | None = None) -> MergePlan:
    """How the root holding ``mine`` (numbered up to ``counter``) takes in ``theirs``
    (another root's events, numbered up to ``their_counter``).

    A fork shows as a seq both logs hold for different events. The other side's events
    this root lacks from the fork on move; so do this root's own events from the fork on
    that the other side lacks, except those at ``moved_below`` or above (an earlier part
    of the same handover moved them already, or they were numbered after it). Older
    events of the other side fill holes in this root's log where it has none (``fill``);
    events older than the log's ``complete_from`` are history this root trimmed.
    """
    held = mine.events
    new = [b for b in theirs if b.msg_id not in mine.by_msg and (b.seq or 0) >= mine.complete_from]
    # A seq both logs hold for different events. Not only an event this root lacks: one
    # it holds under another number also shows it (a publish retried across the heal
    # that this root numbered anew, while the other side's number stood for it there).
    clashes = [seq for b in theirs if (seq := b.seq or 0) in held
               and held[seq][1].msg_id != b.msg_id and seq >= mine.complete_from]
    if not clashes:
        return MergePlan(tuple(b for b in new if (b.seq or 0) not in held), None, (), (),
                         max(counter, their_counter))
    fork = min(clashes)
    limit = counter + 1 if moved_below is None else min(moved_below, counter + 1)
    theirs_ids = {b.msg_id for b in theirs}
    ours = tuple(body for seq, (_, body) in held.items()
                 if fork <= seq < limit and body.msg_id not in theirs_ids)
    fill = tuple(b for b in new if (b.seq or 0) < fork and (b.seq or 0) not in held)
    moving = sorted([b for b in new if (b.seq or 0) >= fork] + list(ours),
                    key=lambda b: (b.ts, b.msg_id))
    if not moving:
        # Every event of the clash is held already, under its one number (an earlier
        # part of the handover moved this root's): nothing moves, holes are filled.
        return MergePlan(fill, None, (), (), max(counter, their_counter))
    return MergePlan(fill, fork, ours, tuple(moving), max(counter, their_counter))


__all__ = ["MergePlan", "plan_merge"]

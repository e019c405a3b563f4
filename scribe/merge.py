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

from scribe.stream import Retained
from scribe.wire_records import EventBody, numbered_run


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
    #: Events this root holds under older numbers that the other log holds under later
    #: ones, past this root's counter (a merge there moved them; members of that side
    #: may have them only there): they take the later number here too. So do those the
    #: other log lacks where the event after its gap names them (``prev``).
    follow: tuple[EventBody, ...] = ()

    def renumbered(self, prev: str | None = None) -> tuple[EventBody, ...]:
        """The moving events at their new numbers, the first tied to ``prev`` (what the
        root's log holds at ``base``)."""
        return tuple(numbered_run(self.moving, self.base + 1, prev))


def plan_merge(mine: Retained, counter: int, theirs: tuple[EventBody, ...],
               their_counter: int, moved_below: int | None = None,
               passed_through: int = 0) -> MergePlan:
    """How the root holding ``mine`` (numbered up to ``counter``) takes in ``theirs``
    (another root's events, in seq order, numbered up to ``their_counter``).

    A fork shows where the two logs hold different events at one seq: both hold one
    there, or an event's ``prev`` names another event than the other log holds next to
    it (:meth:`EventBody.follows`). So does a copy of another numbering in the other
    log (an event whose ``prev`` names another event than that log holds before it: a
    replica that was sent another root's copies): its number is no number of that log's
    own numbering. The other side's events this root lacks from the fork on move; so do
    this root's own events from the fork on that the other side lacks (a copy of another
    numbering there does not count), except those at ``moved_below`` or above (an
    earlier part of the same handover moved them there, or they were numbered after
    it). Older events of the other side fill holes in this root's log where it has none
    (``fill``); events older than the log's ``complete_from`` are history this root
    trimmed.

    An event this root holds under a later number than theirs (a merge here moved it,
    their log is from before it) shows that their numbers from there on are none of
    this log's: an event of theirs this root lacks there moves too (filling the number
    would put it where this root's tree has passed), but this root's own events do not
    (their side gets them in order, after their counter). An event the other log holds
    under a later number past this root's counter (a merge there moved it) takes that
    number here too (``follow``), unless their log holds another event at its number
    here; so does one their log lacks where the event after the gap names it.

    This root's tree passed every number up to ``passed_through``: an event of theirs it
    lacks at a free number there moves too (filled in, it would reach no member: each
    has passed that number; a hole there is a number a merge moved an event from).
    """
    held = mine.events
    by_msg = mine.by_msg
    complete = mine.complete_from
    new = [b for b in theirs if b.msg_id not in by_msg and (b.seq or 0) >= complete]
    their_log = {b.seq or 0: b for b in theirs}
    #: Their events that stand in their own numbering (not copies of another's).
    own: list[EventBody] = []
    #: Seqs the two numberings gave to different events.
    clashes: list[int] = []
    #: Seqs of theirs holding an event this root moved to a later number since.
    passed: list[int] = []
    for b in theirs:
        seq = b.seq or 0
        in_line = b.follows(their_log.get(seq - 1))
        if in_line:
            own.append(b)
        if seq < complete:
            continue
        if not in_line:
            clashes.append(seq)  # a copy of another numbering: its seq is contested
        here = held.get(seq)
        if here is not None and here[1].msg_id != b.msg_id:
            # Not only an event this root lacks: one it holds under another number also
            # shows it (a publish retried across the heal that this root numbered anew,
            # while the other side's number stood for it there).
            clashes.append(seq)
        elif by_msg.get(b.msg_id, seq) > seq or (
                here is None and seq <= passed_through and b.msg_id not in by_msg):
            passed.append(seq)
        mine_before = held.get(seq - 1)
        if in_line and mine_before is not None and not b.follows(mine_before[1]) \
                and seq - 1 >= complete:
            clashes.append(seq - 1)  # their seq - 1 is another event than this root's
        after = held.get(seq + 1)
        if after is not None and not after[1].follows(b):
            clashes.append(seq)  # this root's seq is another event (or a hole here)
    base = max(counter, their_counter)
    # Their events this root holds under earlier numbers, past this root's counter (a
    # merge there moved them): they take the later number here too, unless their log
    # holds another event at this root's number (which that would leave free for it).
    follow = tuple(b for b in own if (b.seq or 0) > counter and b.msg_id in by_msg
                   and complete <= by_msg[b.msg_id] < (b.seq or 0)
                   and by_msg[b.msg_id] not in their_log)
    follow = tuple(sorted(follow + _linked_follow(own, mine, counter, their_log),
                          key=lambda b: b.seq or 0))
    stranded = _stranded(mine, their_log)
    if not clashes and not passed:
        fill = tuple(b for b in new if (b.seq or 0) not in held)
        if not stranded:
            return MergePlan(fill, None, (), (), base, follow)
        return MergePlan(fill, stranded[0].seq, stranded, _in_publish_order(stranded),
                         base, follow)
    fork = min(clashes + passed)
    ours: tuple[EventBody, ...] = ()
    if clashes:
        limit = counter + 1 if moved_below is None else min(moved_below, counter + 1)
        theirs_ids = {b.msg_id for b in own}
        # An event both logs hold under different numbers (a publish retried to each
        # root) moves too where their log holds another event at its number here: their
        # members passed that number with the other event.
        ours = tuple(body for seq, (_, body) in held.items()
                     if min(clashes) <= seq < limit
                     and (body.msg_id not in theirs_ids
                          or their_log.get(seq, body).msg_id != body.msg_id))
    ours_ids = {b.msg_id for b in ours}
    ours = tuple(sorted(ours + tuple(b for b in stranded if b.msg_id not in ours_ids),
                        key=lambda b: b.seq or 0))
    fill = tuple(b for b in new if (b.seq or 0) < fork and (b.seq or 0) not in held)
    moving = _in_publish_order([b for b in new if (b.seq or 0) >= fork] + list(ours))
    if not moving:
        # Every event of the clash is held already, under its one number (an earlier
        # part of the handover moved this root's): nothing moves, holes are filled.
        return MergePlan(fill, None, (), (), base, follow)
    return MergePlan(fill, fork, ours, tuple(moving), base, follow)


def _in_publish_order(bodies: list[EventBody] | tuple[EventBody, ...],
                      ) -> tuple[EventBody, ...]:
    return tuple(sorted(bodies, key=lambda b: (b.ts, b.msg_id)))


def _stranded(mine: Retained, their_log: dict[int, EventBody]) -> tuple[EventBody, ...]:
    """This root's events at numbers the other log has nothing at, between two of its
    events, where the event after them there names them (``prev``), directly or through
    others stranded the same way (the other root numbered past them without their
    copies); or that the other log holds under no number at all (a merge there moved its
    own events away from those numbers, and its members passed them with others). Either
    way its tree passed those numbers without them. They move after both counters
    (members that had them tell the moved copies by msg_id). Below their first event
    their log may have trimmed what it held: nothing moves there. In seq order."""
    if not their_log:
        return ()
    found: list[EventBody] = []
    #: What the stranded event just found names before it (stranded too, if held).
    named: str | None = None
    first, last = min(their_log), max(their_log)
    theirs = {b.msg_id for b in their_log.values()}
    held = mine.events
    for seq in reversed(held):
        body = held[seq][1]
        after = their_log.get(seq + 1)
        if seq in their_log or seq < mine.complete_from or seq <= first:
            named = None
            continue
        names = body.msg_id == named or (after is not None and after.prev == body.msg_id)
        if names or (seq < last and body.msg_id not in theirs):
            found.append(body)
        named = body.prev if names else None  # a chain of names only
    return tuple(reversed(found))


def _linked_follow(own: list[EventBody], mine: Retained, counter: int,
                   their_log: dict[int, EventBody]) -> tuple[EventBody, ...]:
    """Events this root holds under earlier numbers that the other log's numbering put
    at a number past this root's counter where that log has a hole (its copy there is
    missing: the replica that answered never got it), shown by the ``prev`` of the
    event after the hole: they take that number here too, as ``follow`` does for the
    copies the other log holds. Otherwise the other side's members, which passed the
    number, never get them. Tied to what the other log holds before the hole, if
    anything."""
    linked: list[EventBody] = []
    theirs_ids = {b.msg_id for b in their_log.values()}
    for b in own:
        seq = b.seq or 0
        hole = seq - 1
        if b.prev is None or hole <= counter or hole in their_log or b.prev in theirs_ids:
            continue
        at = mine.by_msg.get(b.prev)
        if at is None or not mine.complete_from <= at < hole or at in their_log:
            continue
        before = their_log.get(hole - 1)
        linked.append(mine.events[at][1].numbered(hole, None if before is None
                                                  else before.msg_id))
    return tuple(linked)


__all__ = ["MergePlan", "plan_merge"]

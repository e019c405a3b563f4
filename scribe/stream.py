"""Per-topic event streams at one node: what it retains, and how far it has handled.

:class:`Retained` keeps numbered events by seq (the root's buffer, a replica's copies,
and every tree node's log of the events it handled, from which it answers its
children's pulls). :class:`Stream` is a tree node's position in the topic's sequence.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from chord.kbr import NodeRef
from scribe.config import TopicRetention
from scribe.messages import Event
from scribe.wire_records import EventBody


@dataclass
class Retained:
    """Numbered events of one topic, oldest first. ``complete_from``: every event from
    that seq on that belongs here is here (older ones were trimmed, or came before this
    node knew the topic)."""

    events: OrderedDict[int, tuple[float, EventBody]] = field(default_factory=OrderedDict)
    by_msg: dict[str, int] = field(default_factory=dict)
    complete_from: int = 1
    #: Payload bytes of the events held (retention bounds them: ``bytes``).
    payload_bytes: int = 0
    #: Until then, nothing can be trimmed: the oldest event is younger than both limits
    #: of age (a burst kept past ``count`` spares the per-event look at it).
    untouchable_until: float = float("-inf")

    def __len__(self) -> int:
        return len(self.events)

    def add(self, now: float, body: EventBody) -> None:
        """Keep ``body`` at its seq, unless an event is there already. An event lives at
        one seq: a copy at a higher seq than one held (renumbered at a partition merge,
        see ``Retention.merge``) replaces it, one at a lower seq is ignored."""
        seq = body.seq
        assert seq is not None
        if seq in self.events:
            return
        held = self.by_msg.get(body.msg_id)
        if held is not None:
            if held > seq:
                return
            self.remove(held)
        out_of_order = bool(self.events) and seq < next(reversed(self.events))
        self.events[seq] = (now, body)
        self.by_msg[body.msg_id] = seq
        self.payload_bytes += len(body.payload)
        if out_of_order:
            self.events = OrderedDict(sorted(self.events.items()))
            self.untouchable_until = float("-inf")  # the oldest event may be another

    def fits(self, body: EventBody) -> bool:
        """Whether ``body`` may stand at its seq in this log's numbering: no other event
        is held there, and the events held next to it agree with it
        (:meth:`EventBody.follows`)."""
        seq = body.seq or 0
        events = self.events
        here = events.get(seq)
        if here is not None:
            return here[1].msg_id == body.msg_id
        before = events.get(seq - 1)
        after = events.get(seq + 1)
        return (before is None or body.follows(before[1])) \
            and (after is None or after[1].follows(body))

    def misplaced(self) -> list[EventBody]:
        """Events held under an older number than their numbering gives them now: the
        event each names (``prev``) is held at a later number, or is itself misplaced
        right before it (a merge moved them all, and the copies of some under their new
        numbers never came here). In seq order."""
        found: list[EventBody] = []
        stale: set[str] = set()
        by_msg = self.by_msg
        for seq, (_, body) in self.events.items():
            prev = body.prev
            if prev is None or prev not in by_msg:
                continue
            at = by_msg[prev]
            if at > seq or (at == seq - 1 and prev in stale):
                found.append(body)
                stale.add(body.msg_id)
        return found

    def lacks_copies(self, counter: int) -> bool:
        """Whether the root that numbered up to ``counter`` gave numbers to events whose
        copies never came here: past the last one held, or right before an event that
        names (``prev``) an event this log holds nowhere."""
        if self.last_seq() < counter:
            return True
        held, by_msg = self.events, self.by_msg
        return any(body.prev is not None and body.prev not in by_msg
                   and self.complete_from <= seq - 1 and seq - 1 not in held
                   for seq, (_, body) in held.items())

    def remove(self, seq: int) -> EventBody | None:
        """Take the event at ``seq`` out (it moved to another seq), if one is there."""
        found = self.events.pop(seq, None)
        if found is None:
            return None
        body = found[1]
        self.by_msg.pop(body.msg_id, None)
        self.payload_bytes -= len(body.payload)
        return body

    def contiguous_through(self) -> int:
        """The highest seq up to which every event from ``complete_from`` on is here."""
        through = self.complete_from - 1
        for seq in self.events:
            if seq > through + 1:
                break
            through = max(through, seq)
        return through

    def before(self, seq: int) -> str | None:
        """The msg_id of the event held at ``seq - 1`` (None: none is): what an event
        numbered ``seq`` in this log names as its ``prev``."""
        found = self.events.get(seq - 1)
        return None if found is None else found[1].msg_id

    def last_seq(self) -> int:
        return next(reversed(self.events)) if self.events else 0

    def trim(self, now: float, retention: TopicRetention) -> None:
        """Drop the oldest events beyond the topic's ``count`` or ``bytes``, older than
        its ``seconds``, or past their own ``ttl``; but not, for the count and bytes,
        those younger than ``min_age``. Oldest first: an event whose ttl passed behind
        one that is kept leaves when it reaches the front (it is not delivered
        meanwhile: ``ScribeState.expired``)."""
        count, seconds, limit = retention.count, retention.seconds, retention.bytes
        events = self.events
        wall = now + retention.clock_offset
        if len(events) <= count and self.payload_bytes <= limit and (not events or (
                (first := next(iter(events.values())))[0] > now - seconds
                and not first[1].expired(wall))):
            return  # the common case, checked without taking the first item apart
        if now < self.untouchable_until:
            return
        young = now - retention.min_age
        while self.events:
            seq, (kept_at, body) = next(iter(self.events.items()))
            within = len(self.events) <= count and self.payload_bytes <= limit
            if kept_at > now - seconds and (within or kept_at > young) \
                    and not body.expired(wall):
                until = kept_at + min(retention.min_age, seconds)
                if body.ttl is not None:
                    until = min(until, body.ts + body.ttl - retention.clock_offset)
                self.untouchable_until = until
                return
            del self.events[seq]
            self.by_msg.pop(body.msg_id, None)
            self.payload_bytes -= len(body.payload)
            self.complete_from = max(self.complete_from, seq + 1)

    def merge(self, now: float, bodies: list[EventBody] | tuple[EventBody, ...]) -> None:
        for body in bodies:
            self.add(now, body)

    def between(self, after: int, through: int, limit: int) -> list[EventBody]:
        """Retained events in (after, through], oldest first, at most ``limit``."""
        found: list[EventBody] = []
        for seq, (_, body) in self.events.items():
            if seq > through or len(found) >= limit:
                break
            if seq > after:
                found.append(body)
        return found

    def bodies(self, limit: int) -> list[EventBody]:
        """The newest ``limit`` events, oldest first."""
        newest = list(self.events.values())[-limit:]
        return [body for _, body in newest]


@dataclass
class Stream:
    """A tree node's place in its topic's sequence.

    ``through``: every event up to this seq that this node's subtree needs has been
    handled here (delivered to local subscriptions, sent to the children that need it);
    None until the node learns where to start. ``held``: copies that came early, by seq,
    waiting for a gap before them to be filled. A node handles events strictly in seq
    order, so its children see each edge's events in order too.
    """

    through: int | None = None
    held: dict[int, Event] = field(default_factory=dict)
    log: Retained = field(default_factory=Retained)
    #: When the unanswered :class:`Pull` went to the parent; None: none is out.
    pull_sent: float | None = None
    #: Pulls from children this node could not answer yet (its log lacks older events):
    #: child id -> (child, after).
    waiting: dict[int, tuple[NodeRef, int]] = field(default_factory=dict)
    #: The lowest seq after which those children want events (None: no such pull). A
    #: fill that brings a message's worth of them moves it up to the fill's end.
    need: int | None = None
    #: Where the log's completion started while a need is filled message by message:
    #: ``log.complete_from`` drops to it once the last part has come (None: no such
    #: chain under way).
    filling_from: int | None = None
    #: After a (re)join: copies are held until the root's fill from this position came
    #: (None: not catching up). The new path's digests take a moment to reach the root,
    #: and events meanwhile may have passed the new parent by.
    catch_up_after: int | None = None
    #: When to ask the root (the digests have had time to travel up).
    catch_up_at: float = 0.0
    #: Events gathered for the catch-up: from the root, and from the new parent (whose
    #: log may hold what a root that lost its replicas could not recover).
    catch_up_events: dict[int, EventBody] = field(default_factory=dict)
    #: The root's answer: how far it reaches, and when it came (None: not yet).
    catch_up_through: int | None = None
    catch_up_answered_at: float = 0.0
    #: Whether the new parent answered too.
    catch_up_parent: bool = False

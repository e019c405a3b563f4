"""Gap repair and in-order handling of a topic's events at one tree node.

Every node handles a topic's events strictly in seq order (:class:`scribe.stream.Stream`):
``through`` says how far. A plain copy sent down an edge carries ``prev``, the sender's
``vouched`` mark for that edge: it sent the child every event up to ``prev`` that the
child needs and none since. So a child that has handled up to ``prev`` can handle the
copy at once; otherwise something it needs was lost, it holds the copy and pulls the
missing range from its parent (:class:`Pull`, a ``repair`` record of kind ``gap``). The
parent answers from its log of handled events (:class:`Fill`: everything in the range
the child needs); a parent whose log does not reach back far enough (it joined the tree
later than the child fell behind) pulls from its own parent first. The root's log is
its retention buffer. Heartbeats carry the parent's position, so a child also notices
a lost last event, and a node that re-joined under a new parent catches up the same way.

A node learns where to start from its parent (the ``through`` of a JOIN acknowledgement
or heartbeat), or from the first copy it gets. Anycast-only copies (``plain`` false)
are outside the sequence: they are steered at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace

from chord.kbr import NodeRef
from scribe.messages import Event, Fill, Pull
from scribe.state import ScribeState
from scribe.stream import Retained, Stream
from scribe.tree import ChildEdge, TopicTree
from scribe.wire_records import MAX_BATCH, EventBody

#: Hands one event, in order, to dissemination (deliver locally, pass on).
Handle = Callable[[float, TopicTree, Event], None]
#: The root's retention buffer of a topic, if any.
RootLog = Callable[[str], Retained | None]
#: Sends events of one topic the root holds down its tree, in seq order
#: (``Dissemination.from_root``).
FromRoot = Callable[[float, Sequence[EventBody]], None]
#: A context in which events about to be handled in a row are matched against the
#: local subscriptions in one call (``Dissemination.matching_ahead``): only a cost.
Ahead = Callable[[str, Sequence[EventBody]], AbstractContextManager[None]]
#: How far the root has sent a topic's events down: the others wait for their replicas
#: (``RootWaits.released_through``).
Released = Callable[[str], int]
#: Heartbeat intervals a (re)joined node waits at least before asking the root to catch
#: it up, and at most for its parent to say its digest reached the root (``settled``).
CATCH_UP_DELAY = 2.0
CATCH_UP_PATIENCE = 10.0


def batch(log: Retained, after: int, through: int, wanted: Callable[[EventBody], bool],
          budget: int) -> tuple[list[EventBody], int]:
    """The wanted events of ``log`` in (after, through], at most a message's worth (at
    most ``MAX_BATCH`` events whose costs add up to at most ``budget`` bytes), and how
    far that answer reaches (below ``through`` when the batch filled up). The first
    wanted event always goes, whatever its cost: the size model lets no event through
    that does not fit a message alone."""
    events: list[EventBody] = []
    used = 0
    for body in log.between(after, through, len(log)):
        assert body.seq is not None
        if not wanted(body):
            continue
        cost = body.cost()
        if events and (len(events) == MAX_BATCH or used + cost > budget):
            return events, body.seq - 1
        events.append(body)
        used += cost
    return events, max(through, after)


def follows(ev: Event, through: int) -> bool:
    """Whether a held copy can be handled by a node that handled up to ``through``: its
    sender vouches for everything the node needs before it."""
    return ev.prev is not None and ev.prev <= through


def ready_run(stream: Stream) -> list[EventBody]:
    """The held copies :meth:`Ordering.drain` would handle now, in order."""
    through, held = stream.through, stream.held
    assert through is not None
    run: list[EventBody] = []
    first = min(held, default=None)
    if first is None or (first > through and not follows(held[first], through)):
        return run  # a gap first: no sort while copies wait behind it
    for seq in sorted(held):
        if seq > through:
            ev = held[seq]
            if not follows(ev, through):
                break
            run.append(ev.body)
            through = seq
    return run


def start(stream: Stream, through: int) -> None:
    """The node starts handling the topic's sequence after ``through``."""
    stream.through = through
    stream.log.complete_from = through + 1


class Ordering:
    def __init__(self, state: ScribeState, handle: Handle, root_log: RootLog,
                 released_through: Released, from_root: FromRoot, ahead: Ahead
                 ) -> None:
        self.s = state
        self.handle = handle
        self.root_log = root_log
        self.released_through = released_through
        self.from_root = from_root
        self.ahead = ahead

    def on_root(self, now: float, tree: TopicTree) -> None:
        """This node took the root role: send down, in order, what it holds (adopted from
        the former root's replicas) beyond what it handled as a member."""
        st = tree.stream
        # Copies it held back as a member are numbered events of the topic: it numbers
        # on after them.
        self.s.note_seq(tree.topic, max([*st.held, *st.catch_up_events], default=0))
        # What it retains, and the copies it held back as a member (waiting for a gap to
        # fill or a catch-up), go down in seq order; not events waiting for their
        # replicas (a merge's new numbers), nor those after them: they go when released.
        through = self._may_go_through(tree.topic)
        run = self.unsent(tree, through)
        if tree.topic in self.s.recovering and st.through is not None:
            # It gathers what it lacks (a copy the former root made may be at another
            # replica): send down only up to its first gap, the rest once the gathering
            # ends (send_unsent), or the tree would pass numbers the gathering fills.
            run = [body for i, body in enumerate(run) if body.seq == st.through + 1 + i]
            through = run[-1].seq or 0 if run else st.through
        self._send_down(now, tree.topic, run)
        start_at = through if st.through is None else max(st.through, through)
        st.held.clear()
        st.catch_up_after = None
        st.catch_up_events.clear()
        st.catch_up_through = None
        st.through = start_at

    def send_unsent(self, now: float, tree: TopicTree) -> None:
        """At the root, once its gathering ended: what it holds that its tree has not
        handled, up to its counter and the next event waiting for its replicas."""
        self._send_down(now, tree.topic, self.unsent(tree, self._may_go_through(tree.topic)))

    def _may_go_through(self, topic: str) -> int:
        """At the root: how far its events may go down now (its counter, and not past an
        event still waiting for its replicas)."""
        return min(self.s.seq.get(topic, 0), self.released_through(topic))

    def _send_down(self, now: float, topic: str, run: list[EventBody]) -> None:
        if run:
            with self.ahead(topic, run):
                self.from_root(now, run)

    def unsent(self, tree: TopicTree, through: int) -> list[EventBody]:
        """At the root: the events up to ``through`` that it holds (its log, copies held
        back as a member: waiting for a gap to fill, or gathered for a catch-up) and its
        tree has not handled, in seq order. The counter can move past the tree's position
        without them going down: events restored from members or synced by another root
        (a healed partition) join the log, not the tree, and the next event sent down
        would vouch for them (``prev``) to every child."""
        st = tree.stream
        if st.through is None or st.through >= through:
            return []
        bodies = {seq: ev.body for seq, ev in st.held.items() if st.through < seq <= through}
        for seq, body in st.catch_up_events.items():
            if st.through < seq <= through:
                bodies.setdefault(seq, body)
        log = self.root_log(tree.topic)
        if log is not None:
            for body in log.between(st.through, through, len(log)):
                assert body.seq is not None
                bodies.setdefault(body.seq, body)
        return [bodies[seq] for seq in sorted(bodies)]

    # -- copies from the parent -----------------------------------------------------------------

    def seen(self, tree: TopicTree, seq: int) -> bool:
        """Whether a plain copy of ``seq`` would be a duplicate here."""
        st = tree.stream
        return (st.through is not None and seq <= st.through) or seq in st.held

    def on_event(self, now: float, tree: TopicTree, ev: Event) -> None:
        st = tree.stream
        seq = ev.body.seq
        assert seq is not None
        if st.through is None:
            if ev.prev is None:  # the first copy on the edge: start just before it
                start(st, seq - 1)
                self._handle(now, tree, ev)
                self.drain(now, tree)
                return
            # The parent vouches for copies before this one, from a start this node
            # never heard of (lost with them): ask where it was, and what came since.
            st.held[seq] = ev
            self.ask_start(now, tree)
            return
        if self.seen(tree, seq):
            if ev.groups:  # handled here already, but its anycast duty is new
                self.handle(now, tree, replace(ev, plain=False))
            return
        st.held[seq] = ev
        self.drain(now, tree)

    def drain(self, now: float, tree: TopicTree) -> None:
        """Handle held copies while the next one follows what was handled; pull when a
        gap stops them."""
        st = tree.stream
        assert st.through is not None
        if st.catch_up_after is not None:
            return  # everything waits for the root's catch-up fill
        with self.ahead(tree.topic, ready_run(st) if len(st.held) > 1 else []):
            while st.held:
                seq = min(st.held)
                ev = st.held[seq]
                if seq <= st.through:
                    del st.held[seq]
                    continue
                if not follows(ev, st.through):
                    break
                del st.held[seq]
                self._handle(now, tree, ev)
        if st.held:
            self.pull(now, tree)

    def _handle(self, now: float, tree: TopicTree, ev: Event) -> None:
        st = tree.stream
        assert ev.body.seq is not None
        st.through = ev.body.seq
        # Handled before it joins the log: the log still shows whether this node had
        # the event under another number (moved at a partition merge: not delivered again).
        self.handle(now, tree, ev)
        st.log.add(now, ev.body)
        st.log.trim(now, self.s.config.retention_of(tree.topic))

    def on_sync(self, now: float, tree: TopicTree, prev: int | None,
                through: int | None) -> None:
        """The parent's position (a heartbeat; a JOIN acknowledgement with ``prev`` None)."""
        st = tree.stream
        if through is None or st.catch_up_after is not None:
            return
        if st.through is None:
            if prev is not None:  # copies were sent before this heartbeat: see on_event
                self.ask_start(now, tree)
                return
            start(st, through)
            for edge in list(tree.children.values()):
                self.s.heartbeat(now, tree, edge)  # tell the children where to start
            self.drain(now, tree)
            self.answer_waiting(now, tree)
        elif prev is not None and prev <= st.through and \
                not any(seq <= through for seq in st.held):
            st.through = max(st.through, through)  # nothing was sent since: none needed
            self.drain(now, tree)
        elif through > st.through:
            self.pull(now, tree)

    def on_joined(self, now: float, tree: TopicTree, through: int | None) -> None:
        """A parent adopted this node (first join or re-join), at its position ``through``.

        Its digest still has to travel up the new path; an event the root sends meanwhile
        may pass the new parent by, and the parent's chain would not show it. So the node
        holds what comes and, once its parent says every edge up to the root holds its
        digest (``settled``; after ``CATCH_UP_PATIENCE`` heartbeat intervals at the
        latest), asks the root for everything it wants after the position it had."""
        s = self.s
        st = tree.stream
        if st.through is None:
            if through is None:
                return  # the first copy or heartbeat tells where to start
            start(st, through)
            for edge in list(tree.children.values()):
                s.heartbeat(now, tree, edge)
        if st.catch_up_after is None:
            st.catch_up_after = st.through
            st.catch_up_events.clear()
        st.catch_up_through, st.catch_up_parent = None, False
        st.catch_up_at = now + CATCH_UP_DELAY * s.config.heartbeat_interval
        st.pull_sent = None
        s.wake(now)

    def _catch_up_pull(self, now: float, tree: TopicTree) -> None:
        s = self.s
        st = tree.stream
        assert st.catch_up_after is not None
        s.trace("repair", topic=tree.topic, msg_id=None, **{"from": s.hex(tree.mid)},
                kind="gap")
        if st.catch_up_through is None:
            s.host.route(now, tree.mid, Pull(tree.topic, s.me, st.catch_up_after,
                                             s.digest_wire(s.digest_of(tree))))
        if not st.catch_up_parent and tree.parent is not None:
            s.send(tree.parent, Pull(tree.topic, s.me, st.catch_up_after))
        st.pull_sent = now

    # -- pulling ----------------------------------------------------------------------------------

    def ask_start(self, now: float, tree: TopicTree) -> None:
        """This node has no position, and its parent sent it copies from one it never
        heard: ask the parent (a ``fresh`` pull), at most once per heartbeat interval."""
        self._ask_parent(now, tree, 0, fresh=True)

    def pull(self, now: float, tree: TopicTree, need: int | None = None) -> None:
        """Ask the parent for what follows this node's position (or ``need``, for a
        child's pull this node's log cannot answer), at most once per heartbeat interval."""
        st = tree.stream
        if need is not None:
            st.need = need if st.need is None else min(st.need, need)
        if st.through is None or tree.is_root or st.catch_up_after is not None:
            return
        self._ask_parent(now, tree, st.through if st.need is None else min(st.through, st.need))

    def _ask_parent(self, now: float, tree: TopicTree, after: int, fresh: bool = False) -> None:
        s = self.s
        st = tree.stream
        if tree.parent is None or (st.pull_sent is not None
                                   and now - st.pull_sent < s.config.heartbeat_interval):
            return
        s.trace("repair", topic=tree.topic, msg_id=None, **{"from": s.hex(tree.parent.id)},
                kind="gap")
        s.send(tree.parent, Pull(tree.topic, s.me, after, fresh=fresh))
        st.pull_sent = now
        s.wake(now)

    def tick(self, now: float, tree: TopicTree) -> None:
        """Ask the root to catch this node up when it is time; pull again when an earlier
        pull went unanswered."""
        st = tree.stream
        if st.catch_up_after is not None:
            interval = self.s.config.heartbeat_interval
            if tree.is_root:
                st.catch_up_after = None
            elif st.catch_up_through is not None and \
                    now - st.catch_up_answered_at >= 2 * interval:
                self._finish_catch_up(now, tree, tree.parent or self.s.me)
            elif now >= st.catch_up_at and (tree.settled or now >= st.catch_up_at + (
                    CATCH_UP_PATIENCE - CATCH_UP_DELAY) * interval) and (
                    st.pull_sent is None or now - st.pull_sent >= 2 * interval):
                self._catch_up_pull(now, tree)
            return
        if st.through is None:
            if st.held:
                self.ask_start(now, tree)
        elif st.held or st.waiting:
            self.pull(now, tree)

    def on_fill(self, now: float, fill: Fill) -> None:
        s = self.s
        tree = s.trees.get(fill.topic)
        if tree is None:
            return
        st = tree.stream
        if st.catch_up_after is not None:
            if fill.after != st.catch_up_after:
                return  # only answers to the catch-up count now
            for body in fill.events:
                assert body.seq is not None
                st.catch_up_events.setdefault(body.seq, body)
            if fill.routed:
                st.catch_up_through, st.catch_up_answered_at = fill.through, now
            elif tree.parent is not None and tree.parent.id == fill.parent.id:
                st.catch_up_parent = True
            if st.catch_up_through is not None and (st.catch_up_parent or tree.parent is None):
                self._finish_catch_up(now, tree, fill.parent)
            return
        if tree.parent is not None and tree.parent.id == fill.parent.id:
            tree.parent_heard = now
            st.pull_sent = None
        if st.through is None:
            start(st, fill.after)
        assert st.through is not None
        # Older events complete this node's log, for its children's pulls.
        for body in fill.events:
            if body.seq is not None and body.seq <= st.through:
                st.log.add(now, body)
        partial = fill.more and fill.through + 1 < st.log.complete_from
        if partial:
            # Older events a child waits for, a message's worth: the log completes from
            # here once the parts that follow reach what it holds.
            if st.filling_from is None and fill.after + 1 < st.log.complete_from:
                st.filling_from = fill.after + 1
        elif fill.after + 1 < st.log.complete_from <= fill.through + 1:
            start_of_chain = fill.after + 1 if st.filling_from is None else st.filling_from
            st.log.complete_from = min(fill.after + 1, start_of_chain)
            st.filling_from = None
        if st.need is not None and fill.after <= st.need:
            st.need = fill.through if partial else None
        if fill.after <= st.through < fill.through:
            self._catch_up(now, tree, fill)
        self.drain(now, tree)
        if fill.more:  # a message's worth: the rest follows at once, not at the next tick
            self.pull(now, tree)
        # Children waiting for older events are answered once the chain of parts ends,
        # and only by a fill from where they wait: a catch-up's fill starts at this
        # node's own position, and a child below it may wait for older events the root
        # still holds (the tick pulls for them: ``need``).
        self.answer_waiting(now, tree, give_up=not partial and st.need is None)

    def _finish_catch_up(self, now: float, tree: TopicTree, sender: NodeRef) -> None:
        """Both answers are in (or the parent's is overdue): handle their union as one
        fill reaching as far as the root's."""
        st = tree.stream
        assert st.catch_up_after is not None and st.catch_up_through is not None
        after, through = st.catch_up_after, st.catch_up_through
        events = tuple(body for seq, body in sorted(st.catch_up_events.items())
                       if after < seq <= through)
        st.catch_up_after, st.catch_up_through = None, None
        st.catch_up_events.clear()
        st.pull_sent = None
        # A fill of this node's own making, never sent: it may hold more than one
        # message's worth (the root's and the parent's answers together), so it is
        # built without the wire checks.
        self.on_fill(now, Fill.trusted(tree.topic, sender, after, max(after, through), events,
                                       0, False, False))

    def _catch_up(self, now: float, tree: TopicTree, fill: Fill) -> None:
        """Handle, in order, the fill's events and the held copies it covers."""
        st = tree.stream
        assert st.through is not None
        hop = len(tree.path) - 1 if tree.path else 1
        batch: dict[int, Event] = {seq: ev for seq, ev in st.held.items() if seq <= fill.through}
        for body in fill.events:
            assert body.seq is not None
            batch.setdefault(body.seq, Event(body, max(hop, 1), fill.parent, True, ()))
        order = sorted(batch)
        with self.ahead(tree.topic, [batch[seq].body for seq in order if seq > st.through]):
            for seq in order:
                st.held.pop(seq, None)
                if seq > st.through:
                    self._handle(now, tree, batch[seq])
        st.through = max(st.through, fill.through)

    # -- answering children ------------------------------------------------------------------------

    def log_of(self, tree: TopicTree) -> Retained:
        if tree.is_root:
            return self.root_log(tree.topic) or Retained(complete_from=1)
        return tree.stream.log

    def on_pull(self, now: float, pull: Pull) -> None:
        s = self.s
        tree, edge = s.child_edge(pull.topic, pull.child)
        if tree is None or edge is None:
            return
        st = tree.stream
        if pull.fresh:  # from where the child was to start (see ask_start)
            start_at = edge.start if edge.start is not None else st.through
            if start_at is None:
                return  # nothing was sent down this edge yet
            pull = replace(pull, after=start_at, fresh=False)
        log = self.log_of(tree)
        if st.through is None or (log.complete_from > pull.after + 1 and pull.after < st.through
                                  and not tree.is_root):
            # Nothing to start from yet, or the log misses older events: ask upward first.
            st.waiting[edge.ref.id] = (edge.ref, pull.after)
            self.pull(now, tree, need=pull.after)
            return
        self._fill(tree, edge, pull.after)

    def answer_waiting(self, now: float, tree: TopicTree, give_up: bool = False) -> None:
        """Answer children's pulls this node held back, once it can (``give_up``: with
        what it has, after its own parent answered)."""
        st = tree.stream
        if st.through is None:
            return
        log = self.log_of(tree)
        for child_id, (_, after) in list(st.waiting.items()):
            edge = tree.children.get(child_id)
            if edge is None:
                del st.waiting[child_id]
            elif give_up or log.complete_from <= after + 1 or after >= st.through:
                del st.waiting[child_id]
                self._fill(tree, edge, after)

    def _fill(self, tree: TopicTree, edge: ChildEdge, after: int) -> None:
        s = self.s
        st = tree.stream
        assert st.through is not None
        log = self.log_of(tree)
        events, through = batch(log, after, st.through, lambda body: not s.config.summaries
                                or edge.digest.plain_may_match(body.attrs),
                                s.config.sizes.batch_bytes)
        gone_before = log.complete_from if log.complete_from > after + 1 else 0
        s.send(edge.ref, Fill(tree.topic, s.me, after, through, tuple(events), gone_before,
                              more=through < st.through))
        # Up to here the child has all it needs once it handled the fill (see module doc).
        edge.vouched = st.through


__all__ = ["Handle", "Ordering", "RootLog", "batch", "start"]

"""Events down a topic tree: local deliveries, filtered forwarding, anycast steering.

A node that handles an event delivers it to its plain subscriptions whose filter
matches, sends it to each child whose digest may match it (with summaries off, to every
child), and serves the anycast groups it was asked to (see ``anycast``). Each
child gets at most one copy per step, carrying both duties. A node remembers the events
it handled for ``event_memory`` seconds, so a second copy (after a tree change) is
neither delivered nor forwarded again, and a group handed back finds its search state.

Plain copies pass through :mod:`scribe.ordering` first, which hands them over in seq
order once nothing before them is missing. Where it (or retention) is about to hand over
several events of a topic in a row, :meth:`Dissemination.matching_ahead` matches them
against the local subscriptions in one call first, and the plain copies it sends down
each edge meanwhile leave as runs (``scribe.events``, :mod:`scribe.edge_runs`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from collections.abc import Sequence as Seq
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Protocol

from chord.kbr import NodeRef
from overlay.core.pubsub import DeliveredEvent
from scribe.anycast import GroupSearch, Steering
from scribe.edge_runs import EdgeRuns
from scribe.messages import AnycastBack, Event, Events, Leave
from scribe.state import ScribeState
from scribe.subscriptions import Subscription, TopicSubscriptions
from scribe.tree import TopicTree
from scribe.wire_records import EventBody, group_runs


class Sequence(Protocol):
    """The in-order handling of a topic's plain copies at this node (``scribe.ordering``)."""

    def seen(self, tree: TopicTree, seq: int) -> bool:
        """Whether a plain copy of ``seq`` would be a duplicate here."""

    def on_event(self, now: float, tree: TopicTree, ev: Event) -> None:
        """A plain copy from the parent: handle it in seq order (or hold it, and pull)."""


@dataclass(slots=True)
class HandledEvent:
    """An event this node has handled, as long as it remembers it."""

    body: EventBody
    #: This node's depth when it first got the event.
    hop: int
    plain_done: bool = False
    #: The anycast groups served from this node for the event, made for the first one
    #: (most events serve none, and an empty dict per event per node costs).
    searches: dict[str, GroupSearch] | None = None


#: The group runs of a copy that serves no anycast group.
_NO_GROUPS: list[tuple[str, ...]] = [()]


class EventMemory:
    """Recently handled events by (topic, msg_id), forgotten ``keep`` seconds after the
    first copy, or sooner when more than ``max_events`` are held (oldest first). (A
    msg_id is globally unique, but clients may choose their own.)"""

    def __init__(self, keep: float, max_events: int) -> None:
        self.keep = keep
        self.max_events = max_events
        self._events: dict[tuple[str, str], HandledEvent] = {}
        self._order: deque[tuple[float, tuple[str, str]]] = deque()

    def __len__(self) -> int:
        return len(self._events)

    def get(self, topic: str, msg_id: str) -> HandledEvent | None:
        return self._events.get((topic, msg_id))

    def remember(self, now: float, handled: HandledEvent) -> None:
        key = (handled.body.topic, handled.body.msg_id)
        self._events[key] = handled
        order = self._order
        order.append((now, key))
        if len(order) > self.max_events:
            self._events.pop(order.popleft()[1], None)

    def forget_old(self, now: float) -> None:
        while self._order and self._order[0][0] <= now - self.keep:
            _, key = self._order.popleft()
            self._events.pop(key, None)


#: Per child id: (whether the copy is plain, the groups it must serve).
Plan = dict[int, tuple[bool, list[str]]]


class Dissemination:
    def __init__(self, state: ScribeState, sequence: Sequence) -> None:
        self.s = state
        #: The in-order handling of plain copies (``scribe.ordering``, through the app).
        self.sequence = sequence
        self.memory = EventMemory(state.config.event_memory, state.config.event_memory_events)
        self.steering = Steering()
        #: While a run is handled: the copies it sends down each edge, sent at its end.
        self.runs: EdgeRuns | None = None

    @contextmanager
    def edge_runs(self) -> Iterator[None]:
        """A context whose plain copies down each edge leave as runs at its end
        (:class:`~scribe.edge_runs.EdgeRuns`); nested in another, that one's."""
        if self.runs is not None:
            yield
            return
        self.runs = runs = EdgeRuns(self.s, self.s.config.sizes)
        try:
            yield
        finally:
            self.runs = None
            runs.flush()

    def from_root(self, now: float, bodies: Seq[EventBody]) -> None:
        """The root numbered ``bodies``, events of one topic in seq order: start them
        down the tree (the topic's tree, subscriptions and anycast groups looked up once
        for the run)."""
        s = self.s
        tree = s.trees.get(bodies[0].topic)
        s.wake(now)
        if tree is None:  # nobody subscribes to the topic
            for body in bodies:
                self.memory.remember(now, HandledEvent(body, 0))
            return
        topic_subs = s.subs.topic(bodies[0].topic)
        # The anycast groups to serve: local ones and those below each child.
        groups: set[str] | None = None
        if topic_subs is not None and topic_subs.groups:
            groups = set(topic_subs.groups)
        for edge in tree.children.values():
            if edge.digest.groups:
                if groups is None:
                    groups = set()
                groups.update(edge.digest.groups)
        served = sorted(groups) if groups else ()
        stream = tree.stream
        remember = self.memory.remember
        with self.edge_runs():
            for body in bodies:
                moved = self._moved(tree, body)
                handled = HandledEvent(body, 0)
                remember(now, handled)
                seq = body.seq
                assert seq is not None
                if stream.through is not None and seq <= stream.through:
                    continue  # handled already (caught up when this node took the root role)
                stream.through = seq
                self._spread(now, tree, topic_subs, handled, True, served, None, not moved)

    def matching_ahead(self, topic: str, bodies: Seq[EventBody]
                       ) -> AbstractContextManager[None]:
        """A context in which ``bodies``, events of ``topic`` about to be handled, are
        matched against the local plain subscriptions already, in one call
        (:meth:`TopicSubscriptions.ahead`)."""
        topic_subs = self.s.subs.topic(topic)
        if topic_subs is None or len(bodies) < 2:
            return nullcontext()
        return topic_subs.ahead([body.attrs for body in bodies])

    def on_events(self, now: float, msg: Events) -> None:
        """A run of plain copies from upstream: each handled as its own :class:`Event`,
        in one step (matched together, passed on down each edge as runs)."""
        with self.edge_runs(), self.matching_ahead(msg.topic, msg.bodies):
            for ev in msg.copies():
                self.on_event(now, ev)

    def on_event(self, now: float, ev: Event) -> None:
        s = self.s
        body = ev.body
        assert body.seq is not None  # Event validates that
        s.note_seq(body.topic, body.seq)
        handled = self.memory.get(body.topic, body.msg_id)
        tree = s.trees.get(body.topic)
        ordering = self.sequence if ev.plain else None
        dup = handled is not None or (
            ordering is not None and tree is not None and ordering.seen(tree, body.seq))
        s.trace("recv", topic=body.topic, msg_id=body.msg_id, **{"from": s.hex(ev.sender.id)},
                hop=ev.hop, dup=dup)
        if tree is not None and tree.parent is not None and tree.parent.id == ev.sender.id:
            tree.parent_heard = now
            if ev.digest_version:
                tree.settled = ev.settled and ev.digest_version >= tree.digest_version
        else:
            # The sender counts this node as its child, which it is not (any more).
            s.send(ev.sender, Leave(body.topic, s.me))
        if tree is None:
            s.trace("drop", topic=body.topic, msg_id=body.msg_id, reason="no_route")
            if ev.groups:
                s.send(ev.sender, AnycastBack(body.topic, body.msg_id, ev.groups, s.me))
            return
        if ordering is not None:
            ordering.on_event(now, tree, ev)
        else:
            self.handle(now, tree, ev)

    def handle(self, now: float, tree: TopicTree, ev: Event) -> None:
        """Deliver and pass on one event from upstream (in seq order, when plain)."""
        s = self.s
        body = ev.body
        handled = self.memory.get(body.topic, body.msg_id)
        moved = False
        if handled is None or (ev.plain and handled.body.seq != body.seq):
            # New here, or a copy a partition merge moved to a new number: passed on
            # under that number, delivered only where it was not before.
            moved = ev.plain and self._moved(tree, body)
            handled = HandledEvent(body, ev.hop)
            self.memory.remember(now, handled)
            s.wake(now)
        self._spread(now, tree, s.subs.topic(body.topic), handled,
                     ev.plain and not handled.plain_done, ev.groups, ev.sender, not moved)

    def _moved(self, tree: TopicTree | None, body: EventBody) -> bool:
        """Whether this node handled ``body``'s event already under another number: a
        copy a partition merge moved (:mod:`scribe.merge`), to pass on to the children
        but not to deliver again. Known from the memory of recent events, or from the
        node's log of handled ones (as far back as retention keeps it)."""
        earlier = self.memory.get(body.topic, body.msg_id)
        if earlier is not None and earlier.plain_done and earlier.body.seq != body.seq:
            return True
        held = None if tree is None else tree.stream.log.by_msg.get(body.msg_id)
        return held is not None and held != body.seq

    def on_anycast_back(self, now: float, msg: AnycastBack) -> None:
        handled = self.memory.get(msg.topic, msg.msg_id)
        if handled is None:
            self.s.trace("drop", topic=msg.topic, msg_id=msg.msg_id, reason="expired")
            return
        self.retry_groups(now, handled, msg.groups)

    def retry_groups(self, now: float, handled: HandledEvent, groups: Iterable[str]) -> None:
        """The child asked to serve ``groups`` could not: ask the next one, or go back up."""
        s = self.s
        tree = s.trees.get(handled.body.topic)
        topic_subs = s.subs.topic(handled.body.topic)
        plan: Plan = {}
        searches = handled.searches or {}
        for group in groups:
            search = searches.get(group)
            if search is not None:
                back: list[str] = []
                self._steer(now, tree, topic_subs, handled, group, search, plan, back)
                self._hand_back(handled, back, search.upstream)
        if tree is not None:
            self._send(now, tree, handled, plan)

    # -- one step ------------------------------------------------------------------------------

    def _spread(self, now: float, tree: TopicTree, topic_subs: TopicSubscriptions | None,
                handled: HandledEvent, plain: bool, groups: Seq[str],
                upstream: NodeRef | None, deliver: bool) -> None:
        """``topic_subs``: the local subscriptions to the event's topic (the caller's
        look-up, once for a run at the root); ``deliver``: to them too (not an event they
        had already)."""
        attrs = handled.body.attrs
        plan: Plan = {}
        if plain:
            handled.plain_done = True
            if topic_subs is not None and deliver:
                for sub in topic_subs.matching_plain(attrs):
                    self.deliver_to(now, sub, handled)
            children = tree.children
            if children:  # most often nobody below (a leaf, or the root of a local topic)
                filtered = self.s.config.summaries
                for edge in children.values():
                    if not filtered or edge.digest.plain_may_match(attrs):
                        plan[edge.ref.id] = (True, [])
        back: list[str] | None = None
        if groups:
            back = []
            searches = handled.searches
            if searches is None:
                searches = handled.searches = {}
            for group in groups:
                if group in searches:
                    continue  # already being served from this node
                search = searches[group] = GroupSearch(upstream)
                self._steer(now, tree, topic_subs, handled, group, search, plan, back)
        if plan:
            self._send(now, tree, handled, plan)
        if back:
            self._hand_back(handled, back, upstream)

    def _steer(self, now: float, tree: TopicTree | None, topic_subs: TopicSubscriptions | None,
               handled: HandledEvent, group: str, search: GroupSearch, plan: Plan,
               back: list[str]) -> None:
        step = self.steering.next_step(tree, topic_subs, group, handled.body.attrs, search)
        if step is None:
            back.append(group)
        elif isinstance(step, Subscription):
            self.deliver_to(now, step, handled)
        else:
            plan.setdefault(step.ref.id, (False, []))[1].append(group)

    def _send(self, now: float, tree: TopicTree, handled: HandledEvent, plan: Plan) -> None:
        s = self.s
        body = handled.body
        hop = handled.hop + 1
        send = s.send if self.runs is None else self.runs.send
        for child_id, (plain, groups) in plan.items():
            edge = tree.children[child_id]
            edge.last_sent = now
            prev = None
            if plain:  # plain copies chain along the edge (see scribe.ordering)
                prev = edge.vouched
                if edge.start is None and body.seq is not None:
                    edge.start = body.seq - 1  # the child starts just before its first copy
                edge.vouch(body.seq)
                if prev is not None and body.seq is not None and prev >= body.seq:
                    prev = None  # an older event handed down again: vouch for nothing
                    edge.vouched = None
            s.trace("forward", topic=body.topic, msg_id=body.msg_id, to=s.hex(child_id), hop=hop)
            # Group names beyond one copy's share of the envelope go in further,
            # anycast-only copies (outside the edge's sequence).
            for i, run in enumerate(group_runs(groups) if groups else _NO_GROUPS):
                first = i == 0
                send(edge.ref, Event(body, hop, s.me, plain and first, run,
                                     prev if first else None,
                                     tree.is_root or tree.settled, edge.version))

    def _hand_back(self, handled: HandledEvent, groups: list[str],
                   upstream: NodeRef | None) -> None:
        # At the root (no upstream) a group nobody matches simply has no receiver.
        if groups and upstream is not None:
            body = handled.body
            for run in group_runs(groups):
                self.s.send(upstream, AnycastBack(body.topic, body.msg_id, run, self.s.me))

    def deliver_to(self, now: float, sub: Subscription, handled: HandledEvent,
                   replay: bool = False) -> None:
        """Hand one event to a local subscription, unless it had it (or a later one).
        ``replay``: an event the subscription asked the root for (its record says so:
        it may predate the subscription, and is then no false delivery). A subscription
        waiting for its replay queues the event, to have it after the replayed ones."""
        if sub.replay_queue is not None:
            sub.replay_queue.append(handled)
            return
        s = self.s
        body = handled.body
        if body.seq is not None:
            if body.seq <= sub.last_seq:
                return
            sub.last_seq = body.seq
        if body.ttl is not None and s.expired(now, body):
            s.trace("drop", topic=body.topic, msg_id=body.msg_id, reason="too_old")
            return
        # Two calls, not one spreading the ``replay`` field when there is one (TRACES.md:
        # present only then): keywords spread from a mapping are copied twice, which cost
        # 2% of an event at one daemon (bench/daemon_path.py --setup 3, callgrind).
        if replay:
            s.trace("deliver", topic=body.topic, msg_id=body.msg_id, sub=sub.sub_id,
                    hop=handled.hop, seq=body.seq, dup=False, replay=True)
        else:
            s.trace("deliver", topic=body.topic, msg_id=body.msg_id, sub=sub.sub_id,
                    hop=handled.hop, seq=body.seq, dup=False)
        s.host.deliver_local(sub.sub_id, DeliveredEvent(
            body.topic, body.msg_id, body.seq, body.attrs, body.payload, body.publisher,
            body.ts, handled.hop))

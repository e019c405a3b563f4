"""How the parts of a :class:`~scribe.app.ScribeApp` reach the parts built after them:
membership's :class:`~scribe.membership.TreeEvents` and dissemination's
:class:`~scribe.dissemination.Sequence`, carried out by the app's ordering, retention,
publishing and consumers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from chord.kbr import NodeRef
from scribe.messages import Event
from scribe.tree import TopicTree
from scribe.wire_records import EventBody

if TYPE_CHECKING:
    from scribe.app import ScribeApp


class PartLinks:
    """Membership's :class:`TreeEvents` and dissemination's :class:`Sequence`, carried out
    by the app's ordering, retention and publishing (which are built after the parts
    that call them: every call comes once the app is whole)."""

    def __init__(self, app: ScribeApp) -> None:
        self.app = app

    def root_taken(self, now: float, tree: TopicTree) -> None:
        self.app.ordering.on_root(now, tree)

    def joined(self, now: float, tree: TopicTree, through: int | None) -> None:
        self.app.ordering.on_joined(now, tree, through)

    def numbering(self, now: float, topic: str, fresh: bool) -> None:
        self.app.publishing.on_claim(now, topic, fresh)
        self.app.consumers.on_claim(now, topic)

    def release(self, now: float, bodies: Sequence[EventBody]) -> None:
        """The root sends numbered events of one topic down the tree, and to its durable
        consumers (in seq order). With them what the root holds that its tree never
        handled (``Ordering.unsent``), before them and after them up to the next event
        still waiting for its replicas: events that joined the log while one waited
        (handed over, synced, restored) go when it goes."""
        topic = bodies[0].topic
        tree = self.app.state.trees.get(topic)
        first, last = bodies[0].seq or 0, bodies[-1].seq or 0
        if tree is not None and tree.is_root:
            upto = max(last, self.app.publishing.retention.waits.released_through(topic))
            if (tree.stream.through or 0) < first - 1 or upto > last:
                held = {b.seq or 0: b for b in self.app.ordering.unsent(tree, upto)}
                held.update((b.seq or 0, b) for b in bodies)
                bodies = [held[seq] for seq in sorted(held)]
        self.app.dissemination.from_root(now, bodies)
        if self.app.consumers:
            for body in bodies:
                self.app.consumers.offer(now, body)

    def handing_over(self, now: float, topic: str) -> tuple[EventBody, ...]:
        self.app.consumers.hand_over(now, topic)
        return self.app.publishing.retention.hand_over(now, topic)

    def taking_over(self, now: float, topic: str, events: tuple[EventBody, ...],
                    counter: int, old_root: NodeRef) -> None:
        retention = self.app.publishing.retention
        retention.other_roots.handed_over(topic, old_root)
        retention.adopt_events(now, topic, events, counter)

    def recovered(self, now: float, topic: str) -> None:
        self.app.repair.end_recovery(now, topic)

    def gather_from(self, now: float, topic: str, member: NodeRef, position: int) -> None:
        self.app.root_pulls.gather_from(now, topic, member, position)

    def seen(self, tree: TopicTree, seq: int) -> bool:
        return self.app.ordering.seen(tree, seq)

    def on_event(self, now: float, tree: TopicTree, ev: Event) -> None:
        self.app.ordering.on_event(now, tree, ev)

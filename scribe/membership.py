"""Joining and leaving topic trees, the root role, and digests flowing up the edges.

JOIN (van Steen & Tanenbaum's description of Scribe on Chord): a node that subscribes
routes JOIN toward the topic's key. A node on the way that is already in the tree adopts
the sender and stops the JOIN; one that is not becomes a forwarder, adopts the sender
and continues the JOIN in its own name. The responsible node becomes the root.

Bounded fan-out (FreePastry's LimitedScribePolicy): a node with ``max_children``
children does not refuse a new one but pushes its JOIN down to one of its children,
which adopts it or pushes it further.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from chord.kbr import NodeRef
from overlay.core.messages import Message
from scribe.messages import DigestUpdate, Disown, Join, JoinAck, Leave, RootHandover
from scribe.state import ScribeState
from scribe.summaries import Digest
from scribe.tree import TopicTree
from scribe.wire_records import DigestWire, EventBody, message_runs


class TreeEvents(Protocol):
    """What membership tells the node's other parts (ordering, retention, publishing):
    given at construction, every method required (no part is silently left out)."""

    def root_taken(self, now: float, tree: TopicTree) -> None:
        """This node took the root role of ``tree`` (it catches its stream up)."""

    def joined(self, now: float, tree: TopicTree, through: int | None) -> None:
        """A parent adopted this node, at the parent's stream position ``through``."""

    def numbering(self, now: float, topic: str, fresh: bool) -> None:
        """This node numbers ``topic`` (it owns the key); ``fresh``: it did not a moment
        ago (it adopts its replica copies then)."""

    def handing_over(self, now: float, topic: str) -> tuple[EventBody, ...]:
        """The key moved away: the events retained for ``topic``, to hand over."""

    def taking_over(self, now: float, topic: str, events: tuple[EventBody, ...],
                    counter: int, old_root: NodeRef) -> None:
        """A former root (``old_root``) handed ``events`` of ``topic`` over, numbered up
        to ``counter``."""

    def gather_from(self, now: float, topic: str, member: NodeRef, position: int) -> None:
        """At the root: ``member`` handled ``topic`` up to ``position``, past the counter
        (``RootPulls.gather_from``)."""

    def recovered(self, now: float, topic: str) -> None:
        """What the topic's recovery waited for has come: number its held publishes."""


class Membership:
    def __init__(self, state: ScribeState, events: TreeEvents) -> None:
        self.s = state
        self.events = events

    # -- this node's own needs -------------------------------------------------------------

    def local_change(self, now: float, topic: str) -> None:
        """The local subscriptions of ``topic`` changed: join, update the digest, or leave."""
        s = self.s
        tree = s.trees.get(topic)
        if tree is None:
            if s.subs.topic(topic) is not None:
                self.send_join(now, s.tree_for(now, topic))
            return
        if not self.prune(tree):
            s.note_tree(tree)  # member <-> forwarder
            self.push_digest(tree)

    def send_join(self, now: float, tree: TopicTree) -> None:
        """Route a JOIN in this node's name (first join, retry, or repair)."""
        s = self.s
        digest = s.digest_of(tree)
        tree.joining_since = now
        version = tree.stamp_digest(digest)  # whoever adopts this node stores this digest
        # May come straight back through ``on_join_at_root`` when this node is the root.
        s.host.route(now, tree.mid, Join(tree.topic, s.me, s.digest_wire(digest), version,
                                         through=tree.stream.through))

    def rejoin(self, now: float, tree: TopicTree) -> None:
        """The parent is gone (silent, unreachable or disowning): join again via the DHT."""
        s = self.s
        lost = tree.parent
        assert lost is not None, "only a node with a parent can lose it"
        s.trace("repair", topic=tree.topic, msg_id=None, **{"from": s.hex(lost.id)},
                kind="rejoin")
        tree.detach(now)
        if not self.prune(tree):
            self.send_join(now, tree)

    def push_digest(self, tree: TopicTree) -> None:
        """Send the parent this subtree's digest if it differs from what the parent has."""
        s = self.s
        if tree.parent is None:
            return  # the root has nobody to tell; a joining node compares on its ack
        digest = s.digest_of(tree)
        if digest != tree.sent_digest:
            version = tree.stamp_digest(digest)
            s.send(tree.parent, DigestUpdate(tree.topic, s.me, s.digest_wire(digest), version))

    def prune(self, tree: TopicTree) -> bool:
        """Leave the tree when nothing below this node needs it; True when it left."""
        s = self.s
        if tree.children or s.subs.topic(tree.topic) is not None:
            return False
        if tree.parent is not None:
            s.send(tree.parent, Leave(tree.topic, s.me))
        s.forget_tree(tree)
        return True

    def lose_child(self, tree: TopicTree, child_id: int) -> None:
        """A child left, stopped answering or could not be reached."""
        if self.s.drop_child_edge(tree, child_id) is not None and not self.prune(tree):
            self.push_digest(tree)

    # -- the root role -----------------------------------------------------------------------

    def become_root(self, now: float, tree: TopicTree) -> None:
        s = self.s
        if tree.is_root:
            return
        if tree.parent is not None:
            s.send(tree.parent, Leave(tree.topic, s.me))
        tree.set_root(s.me.id)
        fresh = tree.topic not in s.numbering
        s.numbering.add(tree.topic)
        self.events.numbering(now, tree.topic, fresh)
        self.events.root_taken(now, tree)
        s.note_tree(tree)
        self.announce_path(now, tree)

    def claim_root(self, now: float, topic: str) -> None:
        """This node is responsible for ``topic``'s key: it numbers the topic's events and,
        when it is in the tree, is its root."""
        fresh = topic not in self.s.numbering
        self.s.numbering.add(topic)
        self.events.numbering(now, topic, fresh)
        tree = self.s.trees.get(topic)
        if tree is not None:
            self.become_root(now, tree)

    def hand_over(self, now: float, topic: str) -> None:
        """The ring moved ``topic``'s key away: give the sequence counter to the new owner,
        which adopts this node (with its subtree) as a child."""
        s = self.s
        # Whether this node numbered the topic as its root knowing its log (not waiting
        # for a lost root's members or a stand-in's owner): a stand-in may number on.
        live = topic in s.numbering and topic not in s.recovering
        s.numbering.discard(topic)
        tree = s.trees.get(topic)
        digest: DigestWire | None = None
        version = 0
        if tree is not None:
            tree.detach(now)
            current = s.digest_of(tree)
            version = tree.stamp_digest(current)
            digest = s.digest_wire(current)
        bodies = self.events.handing_over(now, topic)
        self.send_log(now, topic, bodies, s.seq.get(topic, 0), digest, version, live)

    def send_log(self, now: float, topic: str, bodies: Sequence[EventBody], counter: int,
                 digest: DigestWire | None = None, version: int = 0,
                 live: bool = False) -> None:
        """Hand ``bodies`` (a log of ``topic``, oldest first, numbered up to ``counter``)
        to the key's owner, a message's worth per handover: the newest events with the
        first (the new root sends down what it lacks of them at once), older ones after
        it, each without the digest (they only add to the new root's buffer). Each
        message is oldest first."""
        s = self.s
        runs = [run[::-1] for run in message_runs(list(bodies)[::-1], s.config.sizes)]
        for part, run in enumerate(runs):
            # Acknowledged, and routed again until it is (ScribeApp.on_route_failed).
            s.host.route(now, s.mid(topic),
                         RootHandover(topic, counter, s.me, digest if part == 0 else None,
                                      version if part == 0 else 0, tuple(run), live),
                         ack=True)

    def on_handover(self, now: float, msg: RootHandover) -> None:
        s = self.s
        self.events.taking_over(now, msg.topic, msg.events, msg.seq, msg.old_root)
        adopt = msg.digest is not None and msg.old_root.id != s.me.id
        tree = s.tree_for(now, msg.topic) if adopt else None
        mine = s.trees.get(msg.topic)
        was_root = mine is not None and mine.is_root
        self.claim_root(now, msg.topic)
        if msg.live and s.standin_over(msg.topic):
            # Handed over by a live root: its log and counter are what a stand-in waits
            # for its owner's return to learn. (Not what a root gathering a lost root's
            # members waits for: they may hold events past a live root's counter.)
            self.events.recovered(now, msg.topic)
        if was_root and mine is not None:
            # A root that kept the key on its side of a healed partition: the events
            # the other side numbered meanwhile go down now, as on taking the role.
            self.events.root_taken(now, mine)
        if tree is not None and msg.digest is not None:
            self.accept(now, tree, Join(msg.topic, msg.old_root, msg.digest, msg.version))

    def take_in(self, now: float, topic: str, events: tuple[EventBody, ...], counter: int,
                old_root: NodeRef) -> None:
        """At a node that numbers ``topic``: another root's copies, held with no handover
        from it for a while (scribe.other_roots), taken in as its handover would be: merged
        with this root's log, and what its tree lacks sent down."""
        self.events.taking_over(now, topic, events, counter, old_root)
        tree = self.s.trees.get(topic)
        if tree is not None and tree.is_root:
            self.events.root_taken(now, tree)

    def announce_path(self, now: float, tree: TopicTree) -> None:
        """This node's path from the root changed: tell the children at once."""
        for edge in list(tree.children.values()):
            self.s.heartbeat(now, tree, edge)

    # -- JOINs of other nodes ------------------------------------------------------------------

    def on_join_passing(self, now: float, join: Join) -> Message | None:
        """``forward`` up-call for a JOIN: adopt and stop it, or become a forwarder."""
        s = self.s
        tree = s.trees.get(join.topic)
        if join.joiner.id == s.me.id:
            return join
        if tree is None:
            tree = s.tree_for(now, join.topic)
            self._adopt(now, tree, join)
            digest = s.digest_of(tree)
            tree.joining_since = now
            return Join(join.topic, s.me, s.digest_wire(digest), tree.stamp_digest(digest),
                        through=join.through)
        if tree.is_ancestor(join.joiner.id):
            return join  # the joiner is above this node: adopting it would close a loop
        self.accept(now, tree, join)
        return None

    def on_join_at_root(self, now: float, join: Join) -> None:
        """``deliver`` up-call for a JOIN: this node is responsible for the topic's key."""
        s = self.s
        if join.joiner.id == s.me.id and join.topic not in s.trees:
            self.claim_root(now, join.topic)  # its own JOIN, back after it left the topic
            return
        tree = s.tree_for(now, join.topic)
        self.claim_root(now, join.topic)
        if join.joiner.id != s.me.id:
            self.accept(now, tree, join)

    def on_join_pushed(self, now: float, join: Join) -> None:
        """A full parent pushed a JOIN down to this node."""
        s = self.s
        tree = s.trees.get(join.topic)
        if tree is None or tree.is_ancestor(join.joiner.id) or join.joiner.id == s.me.id:
            # Not a place for it (any more): send it toward the root again.
            s.host.route(now, s.mid(join.topic), replace(join, redirects=join.redirects + 1))
            return
        self.accept(now, tree, join)

    def accept(self, now: float, tree: TopicTree, join: Join) -> None:
        """Adopt the joiner, or push it down to a child when this node is full."""
        s = self.s
        limit = s.config.max_children
        if limit is not None and join.joiner.id not in tree.children and \
                len(tree.children) >= limit and join.redirects < s.config.max_redirects:
            below = [edge for edge in tree.children.values() if edge.ref.id != join.joiner.id]
            target = below[s.host.rng.randrange(len(below))]
            s.send(target.ref, replace(join, redirects=join.redirects + 1))
            return
        self._adopt(now, tree, join)
        self.push_digest(tree)

    def _adopt(self, now: float, tree: TopicTree, join: Join) -> None:
        s = self.s
        digest = Digest.from_wire(join.digest, s.config.summary_max_filters)
        if tree.is_root and join.through is not None and \
                join.through > s.seq.get(tree.topic, 0):
            # The joiner has handled numbers this root never gave: gather them, and
            # number on above them rather than again.
            self.events.gather_from(now, tree.topic, join.joiner, join.through)
        s.add_child(now, tree, join.joiner, digest, join.version)
        through = tree.stream.through
        tree.children[join.joiner.id].vouch(through)
        s.send(join.joiner, JoinAck(tree.topic, s.me, tree.path, through))

    # -- answers from parents and children -------------------------------------------------------

    def on_join_ack(self, now: float, ack: JoinAck) -> None:
        s = self.s
        tree = s.trees.get(ack.topic)
        parent = ack.parent
        if tree is None or tree.is_root or s.me.id in ack.path or parent.id == s.me.id or (
                tree.parent is not None and tree.parent.id != parent.id):
            # Not wanted: the node left, is the root, already has another parent (a
            # retried JOIN was adopted twice), or the adoption would close a loop. A
            # joining node retries on its timer.
            s.send(parent, Leave(ack.topic, s.me))
            return
        if parent.id in tree.children:
            s.drop_child_edge(tree, parent.id)  # a child became the parent (root moved)
        old_path = tree.path
        tree.set_parent(parent, ack.path, s.me.id, now)
        s.note_tree(tree)
        if tree.path != old_path:
            self.announce_path(now, tree)
        self.push_digest(tree)
        self.events.joined(now, tree, ack.through)

    def on_leave(self, now: float, msg: Leave) -> None:
        tree = self.s.trees.get(msg.topic)
        if tree is not None:
            self.lose_child(tree, msg.child.id)

    def on_disown(self, now: float, msg: Disown) -> None:
        tree = self.s.trees.get(msg.topic)
        if tree is not None and tree.parent is not None and tree.parent.id == msg.parent.id:
            self.rejoin(now, tree)

    def on_digest(self, now: float, msg: DigestUpdate) -> None:
        s = self.s
        tree, edge = s.child_edge(msg.topic, msg.child)
        if tree is None or edge is None:
            return
        edge.set_digest(Digest.from_wire(msg.digest, s.config.summary_max_filters), msg.version)
        edge.unanswered = 0
        self.push_digest(tree)

    def resend_digest(self, tree: TopicTree) -> None:
        """The parent holds an older digest than the last one sent (a lost update)."""
        tree.sent_digest = None
        self.push_digest(tree)

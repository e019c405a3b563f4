"""What every part of a Scribe node shares: the host, the configuration, the topic trees,
the local subscriptions, the root's sequence counters, timers, and the few effects that
keep the trace consistent (``tree``/``child`` records)."""

from __future__ import annotations

import math
from collections.abc import Callable

from chord.kbr import KbrHost, NodeRef
from overlay.core.ids import format_id, hash_id
from overlay.core.messages import Message
from overlay.core.timers import Timers
from scribe.config import ScribeConfig
from scribe.messages import Disown, Heartbeat, Pull
from scribe.standin import FormerRange
from scribe.subscriptions import Subscriptions
from scribe.summaries import Digest, aggregate
from scribe.tree import ChildEdge, Role, TopicTree
from scribe.wire_records import DigestWire, EventBody

#: Most topic keys kept hashed.
KEY_CACHE_SIZE = 4096
#: Name of the maintenance timer (heartbeats, time-outs, forgetting old events).
TICK = "tick"


class ScribeState:
    def __init__(self, host: KbrHost, config: ScribeConfig) -> None:
        self.host = host
        #: A trace record (the host's own method: records are written several times per
        #: event, and a method passing its keywords on would copy them once more).
        self.trace: Callable[..., None] = host.trace
        self.config = config
        self.me: NodeRef = host.local
        self.bits = host.bits
        self.me_hex = format_id(self.me.id, self.bits)
        self.trees: dict[str, TopicTree] = {}
        self.subs = Subscriptions()
        #: Per topic, the highest sequence number this node assigned (as root) or saw on
        #: an event: a node that takes over the root role continues from it.
        self.seq: dict[str, int] = {}
        #: Topics this node numbers events for as their root, with or without a tree.
        self.numbering: set[str] = set()
        #: When this node's predecessor (and so the key range it owns) last changed.
        self.pred_changed_at = -math.inf
        self.pred_id: int | None = None
        #: The keys this node owned before a restart (scribe.standin).
        self.former = FormerRange(self.me.id, 1 << self.bits, config.standin_wait)
        #: Topics whose key this node took over knowing nothing of them, until when it
        #: gathers what the members know before numbering (``ScribeConfig.takeover_wait``),
        #: or stands in for an owner not back yet (scribe.standin): the later of the two.
        self.recovering: dict[str, float] = {}
        #: ... the gathering's end, and the stand-in's, each kept apart: a live root's
        #: handover ends the stand-in only (the members may know more than that root).
        self._gathering: dict[str, float] = {}
        self._standing_in: dict[str, float] = {}
        #: Topics a live root handed over while this node stood in: it never waits for
        #: their former owner again (it numbers them knowing their log).
        self._stood_in: set[str] = set()
        #: Per recovering topic, the members this root asked again for everything from
        #: its log's start: an answer began past a fork (``ReplicaCopies.on_replica_sync``).
        #: Asked once per recovery.
        self.asked_whole: dict[str, set[int]] = {}
        #: Catch-up pulls that reached this root while it was recovering, by puller id.
        self.held_pulls: dict[str, dict[int, Pull]] = {}
        self.timers = Timers()
        #: Topic -> its key, for the topics seen lately (hashed once, not per event).
        self._keys: dict[str, int] = {}

    # -- identities ----------------------------------------------------------------------

    def hex(self, node_id: int) -> str:
        return format_id(node_id, self.bits)

    def wall(self, now: float) -> float:
        """The wall-clock time (the clock of events' ``ts``) at the core's ``now``."""
        return now + self.config.clock_offset

    def expired(self, now: float, body: EventBody) -> bool:
        """Whether ``body``'s ttl has passed (``EventBody.expired``) at ``now``."""
        return body.ttl is not None and body.expired(now + self.config.clock_offset)

    def mid(self, topic: str) -> int:
        key = self._keys.get(topic)
        if key is None:
            if len(self._keys) >= KEY_CACHE_SIZE:
                self._keys.clear()  # a plain bound: topics seen again are hashed again
            key = self._keys[topic] = hash_id(topic, self.bits)
        return key

    # -- effects -------------------------------------------------------------------------

    def send(self, dest: NodeRef, msg: Message) -> None:
        self.host.send_direct(dest.addr, msg)

    def wake(self, now: float) -> None:
        """Make sure the maintenance tick runs while there is anything to maintain."""
        if TICK not in self.timers:
            self.timers.set(TICK, now + self.config.heartbeat_interval)

    # -- tree bookkeeping ------------------------------------------------------------------

    def tree_for(self, now: float, topic: str) -> TopicTree:
        tree = self.trees.get(topic)
        if tree is None:
            tree = self.trees[topic] = TopicTree(topic, self.mid(topic), parent_heard=now)
            self.wake(now)
        return tree

    def role(self, tree: TopicTree) -> Role:
        return tree.role(self.subs.topic(tree.topic) is not None)

    def note_tree(self, tree: TopicTree) -> None:
        """Write a ``tree`` record when the parent or role changed since the last one;
        nothing while the node waits for its first parent."""
        if not tree.attached:
            return
        state = (None if tree.parent is None else self.hex(tree.parent.id), self.role(tree))
        if state != tree.traced:
            tree.traced = state
            self.trace("tree", topic=tree.topic, parent=state[0], role=str(state[1]))

    def add_child(self, now: float, tree: TopicTree, child: NodeRef, digest: Digest,
                  version: int) -> None:
        edge = tree.children.get(child.id)
        if edge is None:
            tree.children[child.id] = ChildEdge(child, digest, version, last_sent=now)
            self.trace("child", topic=tree.topic, child=self.hex(child.id), op="add")
        else:
            edge.ref, edge.unanswered = child, 0
            edge.set_digest(digest, version)

    def child_edge(self, topic: str, child: NodeRef) -> tuple[TopicTree | None,
                                                              ChildEdge | None]:
        """The tree and the edge to ``child``; when this node does not count ``child`` as
        its child in ``topic``, it tells it so (:class:`Disown`) and the edge is None."""
        tree = self.trees.get(topic)
        edge = None if tree is None else tree.children.get(child.id)
        if edge is None:
            self.send(child, Disown(topic, self.me))
        return tree, edge

    def drop_child_edge(self, tree: TopicTree, child_id: int) -> ChildEdge | None:
        edge = tree.children.pop(child_id, None)
        if edge is not None:
            self.trace("child", topic=tree.topic, child=self.hex(child_id), op="remove")
        return edge

    def heartbeat(self, now: float, tree: TopicTree, edge: ChildEdge) -> None:
        """Tell a child this node is alive, and its current path from the root."""
        edge.last_sent = now
        edge.unanswered += 1
        through = tree.stream.through
        self.send(edge.ref, Heartbeat(tree.topic, self.me, tree.path, edge.version,
                                      edge.vouched, through, tree.is_root or tree.settled))
        if through is not None:
            edge.vouch(through)  # everything up to it handled: the child needs no more

    def forget_tree(self, tree: TopicTree) -> None:
        del self.trees[tree.topic]
        for child_id in list(tree.children):
            self.drop_child_edge(tree, child_id)
        if tree.traced is not None:
            self.trace("tree_leave", topic=tree.topic)

    def digest_of(self, tree: TopicTree) -> Digest:
        """This node's digest for a topic: own subscriptions and all children."""
        topic_subs = self.subs.topic(tree.topic)
        local = Digest.empty() if topic_subs is None else topic_subs.digest(
            self.config.summaries, self.config.summary_max_filters)
        return aggregate(local, tree.child_digests())

    def digest_wire(self, digest: Digest) -> DigestWire:
        """``digest`` for a message, within the size model's bound for digests."""
        return digest.to_wire(self.config.sizes.digest_bytes)

    def start_recovery(self, now: float, topic: str) -> None:
        """This node starts numbering ``topic``: when it knows nothing of it and its key
        range changed lately, a root may have failed together with every copy of its
        counter; wait for members' positions and events before numbering. When the key
        was another node's before this node restarted, wait for that node's return
        (scribe.standin)."""
        until = self.takeover_until()
        if topic not in self.seq and topic not in self.recovering and now < until:
            self.recover_until(now, topic, until)
        former = self.former
        if topic not in self._standing_in and topic not in self._stood_in \
                and former.standing_in(now, self.mid(topic)):
            assert former.until is not None  # set by standing_in
            self.trace("standin", topic=topic, until=round(former.until - now, 3))
            self._standing_in[topic] = former.until
            self._recover(now, topic)

    def takeover_until(self) -> float:
        """Until when this node's key range counts as changed lately: a root failed, or a
        former root hands its topics over (``ScribeConfig.takeover_wait``)."""
        return self.pred_changed_at + self.config.takeover_window()

    def recover_until(self, now: float, topic: str, until: float) -> None:
        """Gather ``topic``'s events and positions until ``until`` (or later, if a
        recovery already runs longer) before numbering or answering from the log."""
        self._gathering[topic] = max(self._gathering.get(topic, until), until)
        self._recover(now, topic)

    def _recover(self, now: float, topic: str) -> None:
        self.recovering[topic] = max(self._gathering.get(topic, -math.inf),
                                     self._standing_in.get(topic, -math.inf))
        self.wake(now)

    def standin_over(self, topic: str) -> bool:
        """A live root handed ``topic`` over: stop standing in for its owner. True when
        nothing else holds the topic's recovery (the caller ends it now)."""
        if self._standing_in.pop(topic, None) is None:
            return False
        self._stood_in.add(topic)
        gathering = self._gathering.get(topic)
        if gathering is None:
            return True
        self.recovering[topic] = gathering
        return False

    def recovery_over(self, topic: str) -> None:
        """``topic``'s recovery ended (its time came, or its key moved away)."""
        self.recovering.pop(topic, None)
        self.asked_whole.pop(topic, None)
        self._gathering.pop(topic, None)
        self._standing_in.pop(topic, None)

    def note_seq(self, topic: str, seq: int) -> None:
        if seq > self.seq.get(topic, 0):
            self.seq[topic] = seq

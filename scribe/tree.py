"""Per-topic tree state of one node: parent, children and their digests, role, path.

A node is in a topic's tree from the moment it sends a JOIN (its own subscription) or
adopts a child while passing another node's JOIN on (it becomes a forwarder), until it
has neither local subscriptions nor children and leaves.

``path`` lists the ids from the root down to this node, as the parent last told it. A
node never adopts a node on its path (that would close a loop). While a node re-joins,
its path is kept although stale: its descendants' paths still name it, so none of them
adopts it. The path is *current* once the present parent has told it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from chord.kbr import NodeRef
from scribe.stream import Stream
from scribe.summaries import Digest


class Role(StrEnum):
    ROOT = "root"
    FORWARDER = "forwarder"
    MEMBER = "member"


@dataclass
class ChildEdge:
    ref: NodeRef
    digest: Digest
    #: Version of ``digest`` (the child numbers the digests it sends).
    version: int
    #: When this node last sent the child anything (an event or a heartbeat).
    last_sent: float
    #: Heartbeats sent since the child last answered one.
    unanswered: int = 0
    #: Every event up to this seq that the child needs was sent to it on this edge
    #: (None: nothing vouched for yet). Carried as ``prev`` by the next event.
    vouched: int | None = None
    #: The position the child was first told to start from on this edge (the first
    #: vouch: a JOIN acknowledgement's or heartbeat's ``through``, or just before the
    #: first copy); what a child that missed it is answered from (``Pull.fresh``).
    start: int | None = None

    def vouch(self, seq: int | None) -> None:
        self.vouched = seq
        if self.start is None and seq is not None:
            self.start = seq

    def set_digest(self, digest: Digest, version: int) -> None:
        """Take the child's digest unless a newer one already came (JOINs are routed and
        may arrive after a direct update)."""
        if version >= self.version:
            self.digest, self.version = digest, version


@dataclass
class TopicTree:
    topic: str
    #: The topic's key on the ring (its root is the node responsible for it).
    mid: int
    is_root: bool = False
    parent: NodeRef | None = None
    #: Ids from the root to this node (maybe stale, see above); empty: never known.
    path: tuple[int, ...] = ()
    #: The parent that told this node its path (None: none, or this is the root).
    path_parent: int | None = None
    children: dict[int, ChildEdge] = field(default_factory=dict)
    #: When the parent was last heard from (any message).
    parent_heard: float = 0.0
    #: When the current parent adopted this node.
    attached_at: float = 0.0
    #: When the JOIN still waiting for an acknowledgement was sent; None: none is.
    joining_since: float | None = None
    #: The digest the parent holds for this subtree (None: not sent to this parent yet).
    sent_digest: Digest | None = None
    #: Digests sent upward so far (the version of ``sent_digest``).
    digest_version: int = 0
    #: Whether every edge from the root down to this node holds this node's newest
    #: digest, as the parent last said (events the root numbers from then on that this
    #: subtree wants reach it). The root is always settled.
    settled: bool = False
    #: (parent hex, role) of the last ``tree`` record written; None: none yet.
    traced: tuple[str | None, Role] | None = None
    stream: Stream = field(default_factory=Stream)

    @property
    def attached(self) -> bool:
        """Whether this node has a parent (or is the root), i.e. events can reach it."""
        return self.is_root or self.parent is not None

    @property
    def path_current(self) -> bool:
        return self.is_root or (self.parent is not None and self.path_parent == self.parent.id)

    @property
    def depth(self) -> int | None:
        return len(self.path) - 1 if self.path else None

    def role(self, has_local_subscriptions: bool) -> Role:
        if self.is_root:
            return Role.ROOT
        return Role.MEMBER if has_local_subscriptions else Role.FORWARDER

    def child_at(self, addr: str) -> ChildEdge | None:
        for edge in self.children.values():
            if edge.ref.addr == addr:
                return edge
        return None

    def child_digests(self) -> Iterator[Digest]:
        return (edge.digest for edge in self.children.values())

    def is_ancestor(self, node_id: int) -> bool:
        """Whether ``node_id`` is above this node (adopting it would make a loop)."""
        return node_id in self.path[:-1]

    def stamp_digest(self, digest: Digest) -> int:
        """Note ``digest`` as sent to the parent; returns its version."""
        self.sent_digest = digest
        self.digest_version += 1
        self.settled = False
        return self.digest_version

    def set_root(self, own_id: int) -> None:
        self.is_root = True
        self.parent = None
        self.path = (own_id,)
        self.path_parent = None
        self.joining_since = None
        self.sent_digest = None

    def set_parent(self, parent: NodeRef, parent_path: tuple[int, ...], own_id: int,
                   now: float) -> None:
        self.is_root = False
        self.parent = parent
        self.parent_heard = self.attached_at = now
        self.joining_since = None
        self.learn_path(parent_path, own_id)

    def learn_path(self, parent_path: tuple[int, ...], own_id: int) -> bool:
        """The parent told its path (empty: it does not know it); True if ours changed."""
        if not parent_path or self.parent is None:
            return False
        path = (*parent_path, own_id)
        changed = path != self.path
        self.path = path
        self.path_parent = self.parent.id
        return changed

    def detach(self, now: float) -> None:
        """Forget the parent and wait for a new JOIN to be acknowledged (the path stays,
        stale, so that no descendant adopts this node meanwhile)."""
        self.is_root = False
        self.parent = None
        self.joining_since = now
        self.sent_digest = None
        self.settled = False

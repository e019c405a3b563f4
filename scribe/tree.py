"""Per-topic tree state of one node: parent, children and their digests, role, path.

A node is in a topic's tree from the moment it sends a JOIN (its own subscription) or
adopts a child while passing another node's JOIN on (it becomes a forwarder), until it
has neither local subscriptions nor children and leaves. ``path`` lists the ids from
the root down to this node once the parent told it its own path; a node never adopts
an ancestor (that would close a loop), which ``path`` lets it check.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from chord.kbr import NodeRef
from scribe.summaries import Digest


class Role(StrEnum):
    ROOT = "root"
    FORWARDER = "forwarder"
    MEMBER = "member"


@dataclass
class ChildEdge:
    ref: NodeRef
    digest: Digest
    #: When this node last sent the child anything (an event or a heartbeat).
    last_sent: float
    #: Heartbeats sent since the child last answered one.
    unanswered: int = 0


@dataclass
class TopicTree:
    topic: str
    #: The topic's key on the ring (its root is the node responsible for it).
    mid: int
    is_root: bool = False
    parent: NodeRef | None = None
    #: Ids from the root to this node; empty while that is not known.
    path: tuple[int, ...] = ()
    children: dict[int, ChildEdge] = field(default_factory=dict)
    #: When the parent was last heard from (any message).
    parent_heard: float = 0.0
    #: When the current parent adopted this node.
    attached_at: float = 0.0
    #: When the JOIN still waiting for an acknowledgement was sent; None: none is.
    joining_since: float | None = None
    #: The digest the parent holds for this subtree (None: not sent to this parent yet).
    sent_digest: Digest | None = None
    #: (parent hex, role) of the last ``tree`` record written; None: none yet.
    traced: tuple[str | None, Role] | None = None

    @property
    def attached(self) -> bool:
        """Whether this node has a parent (or is the root), i.e. events can reach it."""
        return self.is_root or self.parent is not None

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

    def set_root(self, own_id: int) -> None:
        self.is_root = True
        self.parent = None
        self.path = (own_id,)
        self.joining_since = None
        self.sent_digest = None

    def set_parent(self, parent: NodeRef, parent_path: tuple[int, ...], own_id: int,
                   now: float) -> None:
        self.is_root = False
        self.parent = parent
        self.path = (*parent_path, own_id) if parent_path else ()
        self.parent_heard = self.attached_at = now
        self.joining_since = None

    def detach(self, now: float) -> None:
        """Forget the parent and wait for a new JOIN to be acknowledged."""
        self.is_root = False
        self.parent = None
        self.path = ()
        self.joining_since = now
        self.sent_digest = None

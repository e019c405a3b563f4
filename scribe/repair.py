"""Keeping trees whole: heartbeats, silent parents and children, ring changes, failed sends.

- Every ``heartbeat_interval`` a parent sends a heartbeat (with its path from the root)
  to each child it sent nothing else to during the interval; events flowing to a child
  stand in for heartbeats. A child answers each heartbeat.
- A child that hears nothing from its parent for ``parent_timeout``, whose parent
  disowns it, or that cannot reach it, re-joins through the DHT (``repair`` record,
  kind ``rejoin``) with its whole subtree. So does a node whose parent sends a path
  that holds the node itself, or never tells it a path: its ancestors form a loop.
- A parent drops a child after ``missed_heartbeats`` unanswered heartbeats or a failed
  send; an anycast group the child was serving goes to the next candidate.
- When ring changes move a topic's key, the old root hands the sequence counter over
  and joins under the new owner; a node that became responsible takes the root role.
"""

from __future__ import annotations

from overlay.core.messages import Message
from scribe.dissemination import Dissemination
from scribe.membership import Membership
from scribe.messages import (
    DigestUpdate,
    Disown,
    Event,
    Events,
    Fill,
    Heartbeat,
    HeartbeatAck,
    Join,
    JoinAck,
    Leave,
    Pull,
)
from scribe.ordering import Ordering
from scribe.publish import Publishing
from scribe.publish_messages import Publish, Publishes, Replicate
from scribe.root_pulls import RootPulls
from scribe.state import TICK, ScribeState
from scribe.tree import TopicTree

#: A node whose present parent has not told it a path from the root this many parent
#: time-outs after adopting it re-joins: its ancestors never reach a root (a loop).
LOOP_SUSPICION = 3


class Repair:
    def __init__(self, state: ScribeState, membership: Membership,
                 dissemination: Dissemination, publishing: Publishing,
                 ordering: Ordering, root_pulls: RootPulls) -> None:
        self.s = state
        self.membership = membership
        self.dissemination = dissemination
        self.publishing = publishing
        self.ordering = ordering
        self.root_pulls = root_pulls

    def tick(self, now: float) -> None:
        s = self.s
        self.check_ownership(now)
        for tree in list(s.trees.values()):
            if s.trees.get(tree.topic) is tree:
                self._check_parent(now, tree)
            if s.trees.get(tree.topic) is tree:
                self._check_children(now, tree)
            if s.trees.get(tree.topic) is tree:
                self.ordering.tick(now, tree)
        self.dissemination.memory.forget_old(now)
        publishing = self.publishing
        for topic, until in list(s.recovering.items()):
            if until <= now:  # what members knew has come in: answer them, then number
                self.end_recovery(now, topic)
        publishing.retention.tick(now)
        publishing.retry(now)
        if s.trees or len(self.dissemination.memory) or publishing.unacked \
                or publishing.retention or s.recovering:
            s.timers.set(TICK, now + s.config.heartbeat_interval)

    def end_recovery(self, now: float, topic: str) -> None:
        """Recovering ``topic`` ended: answer the catch-up pulls and number the publishes
        held meanwhile, or, when the key moved away in the meantime, send them on to it."""
        s = self.s
        s.recovery_over(topic)
        key = s.mid(topic)
        owner = s.host.is_responsible(key)
        tree = s.trees.get(topic)
        if owner and tree is not None and tree.is_root:
            self.ordering.send_unsent(now, tree)  # held back at a gap while it gathered
        for pull in s.held_pulls.pop(topic, {}).values():
            if owner:
                self.root_pulls.on_root_pull(now, pull)
            else:
                s.host.route(now, key, pull)
        self.publishing.number_deferred(now, topic, owner)

    def check_ownership(self, now: float) -> None:
        """Move root roles to where the ring says they belong now."""
        s = self.s
        for topic in sorted(set(s.trees) | s.numbering):
            responsible = s.host.is_responsible(s.mid(topic))
            tree = s.trees.get(topic)
            holds_root = tree.is_root if tree is not None else topic in s.numbering
            if holds_root and not responsible:
                self.membership.hand_over(now, topic)
                if topic in s.recovering:
                    self.end_recovery(now, topic)
            elif responsible and tree is not None and not tree.is_root:
                self.membership.become_root(now, tree)

    def _check_parent(self, now: float, tree: TopicTree) -> None:
        cfg = self.s.config
        if tree.is_root:
            return
        if tree.parent is None:
            if tree.joining_since is not None and now - tree.joining_since >= cfg.join_timeout:
                self.membership.send_join(now, tree)
            return
        silent = now - tree.parent_heard > cfg.parent_timeout
        looping = not tree.path_current and \
            now - tree.attached_at > LOOP_SUSPICION * cfg.parent_timeout
        if silent or looping:
            self.membership.rejoin(now, tree)

    def _check_children(self, now: float, tree: TopicTree) -> None:
        s = self.s
        for edge in list(tree.children.values()):
            if now - edge.last_sent < s.config.heartbeat_interval:
                continue  # it got an event (or a heartbeat) recently
            if edge.unanswered >= s.config.missed_heartbeats:
                self.membership.lose_child(tree, edge.ref.id)
                if s.trees.get(tree.topic) is not tree:
                    return
            else:
                s.heartbeat(now, tree, edge)

    # -- heartbeat messages -----------------------------------------------------------------

    def on_heartbeat(self, now: float, hb: Heartbeat) -> None:
        s = self.s
        tree = s.trees.get(hb.topic)
        if tree is None or tree.parent is None or tree.parent.id != hb.parent.id:
            s.send(hb.parent, Leave(hb.topic, s.me))
            return
        tree.parent_heard = now
        if s.me.id in hb.path:
            self.membership.rejoin(now, tree)  # the parent is below this node: a loop
            return
        s.send(hb.parent, HeartbeatAck(hb.topic, s.me))
        tree.settled = hb.settled and hb.digest_version >= tree.digest_version
        if hb.digest_version < tree.digest_version:
            self.membership.resend_digest(tree)
        if tree.learn_path(hb.path, s.me.id):
            self.membership.announce_path(now, tree)
        self.ordering.on_sync(now, tree, hb.prev, hb.through)

    def on_heartbeat_ack(self, now: float, ack: HeartbeatAck) -> None:
        _, edge = self.s.child_edge(ack.topic, ack.child)
        if edge is not None:
            edge.unanswered = 0

    # -- sends that failed ----------------------------------------------------------------------

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        s = self.s
        if isinstance(msg, Publish | Publishes):
            self.publishing.on_unreachable(now, msg)
        elif isinstance(msg, Replicate):
            self.publishing.retention.waits.replica_unreachable(now, dest, msg)
        elif isinstance(msg, Event):
            self._lose_child_at(msg.body.topic, dest)
            handled = self.dissemination.memory.get(msg.body.topic, msg.body.msg_id)
            if msg.groups and handled is not None:
                self.dissemination.retry_groups(now, handled, msg.groups)
        elif isinstance(msg, Heartbeat | JoinAck | Disown | Fill | Events):
            self._lose_child_at(msg.topic, dest)  # (Events: plain copies, no group duty)
        elif isinstance(msg, Join):
            # A JOIN this full node pushed down to a child: place the joiner again.
            tree = self._lose_child_at(msg.topic, dest)
            if tree is not None and s.trees.get(msg.topic) is tree:
                self.membership.accept(now, tree, msg)
        elif isinstance(msg, DigestUpdate | HeartbeatAck | Pull):
            tree = s.trees.get(msg.topic)
            if tree is not None and tree.parent is not None and tree.parent.addr == dest:
                self.membership.rejoin(now, tree)

    def _lose_child_at(self, topic: str, addr: str) -> TopicTree | None:
        tree = self.s.trees.get(topic)
        edge = None if tree is None else tree.child_at(addr)
        if tree is not None and edge is not None:
            self.membership.lose_child(tree, edge.ref.id)
        return tree

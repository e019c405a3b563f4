"""``ScribeApp``: Scribe topic trees as a sans-IO application of the KBR host (Chord).

Application calls (from the daemon's API layer or a simulation scenario) and the KBR
up-calls come in; effects leave through the host: ``send_direct``/``route`` to peers,
``deliver_local`` (a :class:`DeliveredEvent` each, joined per subscription in a step's
``Deliver`` effect) to local subscriptions, ``notice`` (``Notice`` effects) and
``trace`` records of TRACES.md.

Notices: ``published`` (``topic``, ``msg_id``, ``seq``) when the topic's root has
numbered (and its replicas hold) a reliable event this node published (an unreliable
publish is answered by nobody: its publisher does not wait); ``expired`` (``sub``) when
a subscription's expiry passed and it ended; ``subscribed`` (``topic``, ``sub``) when a
new subscription is in effect: this node is the topic's root, or every edge from the
root down to it holds a digest that includes the subscription (``TopicTree.settled``),
so each matching event the root numbers from then on reaches it. (Before that, an event
may be pruned upstream by a digest that does not include it yet.) A ``subscribed`` trace
record (``topic``, ``sub``; beyond TRACES.md) marks that moment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from chord.kbr import KbrHost, NodeRef
from matching import parse
from overlay.core.messages import Message
from overlay.core.pubsub import (
    AttrValue,
    Capabilities,
    NewEvent,
    PublishOutcome,
    check_group,
    check_topic,
    check_unsubscribe_reason,
    expiry_time,
)
from scribe.config import ScribeConfig
from scribe.consumer_members import DurableMembers
from scribe.consumer_messages import (
    ConsumerAck,
    ConsumerAttach,
    ConsumerAttached,
    ConsumerDeliver,
    ConsumerDetach,
    ConsumerFetch,
    ConsumerQuery,
    ConsumerReport,
    ConsumerSync,
    check_name,
)
from scribe.consumer_root import ConsumerRoots
from scribe.consumer_values import ConsumerConfig
from scribe.dissemination import Dissemination
from scribe.durability import NoteRange, RestoredConsumer, RestoredLog
from scribe.membership import Membership
from scribe.messages import (
    AnycastBack,
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
    ReplayFill,
    ReplayRequest,
    RootHandover,
    TreeInfo,
)
from scribe.misrouted import Misrouted
from scribe.ordering import Ordering
from scribe.part_links import PartLinks
from scribe.publish import Publishing
from scribe.publish_messages import (
    Publish,
    PublishAck,
    Publishes,
    PublishRefused,
    ReplicaSync,
    Replicate,
    ReplicateAck,
    ReplicateAcks,
    Restore,
)
from scribe.repair import Repair
from scribe.replay import Replays
from scribe.restarted import Restarted
from scribe.root_pulls import RootPulls
from scribe.state import TICK, ScribeState
from scribe.subscriptions import Subscription


class ScribeApp:
    """One node's Scribe: plug it into a KBR host (``host.local``, ``host.rng`` ...)."""

    #: Scribe retains and numbers a topic's events, serves anycast groups, and says
    #: when a subscription is in effect (``subscribed``).
    capabilities = Capabilities(replay=True, groups=True, settles=True, numbered=True,
                                durable=True)

    def __init__(self, host: KbrHost, config: ScribeConfig | None = None) -> None:
        # The parts talk through interfaces given at construction: membership tells the
        # node of tree events (TreeEvents) and dissemination hands plain copies to the
        # sequence (Sequence); PartLinks implements both by delegating to the part that
        # owns each, so no part is wired to another after it was built.
        self.state = ScribeState(host, config or ScribeConfig())
        links = PartLinks(self)
        self.membership = Membership(self.state, events=links)
        self.dissemination = Dissemination(self.state, sequence=links)
        self.publishing = Publishing(self.state, self.membership, self.dissemination,
                                     release=links.release)
        retention = self.publishing.retention
        self.consumers = ConsumerRoots(self.state, retention.log, retention.durability,
                                       retention.replicas_of, self._publish_dead_letter,
                                       self.membership.claim_root)
        self.members = DurableMembers(self.state)
        self.ordering = o = Ordering(self.state, self.dissemination.handle, retention.log,
                                     retention.waits.released_through,
                                     self.dissemination.from_root,
                                     self.dissemination.matching_ahead)
        self.root_pulls = RootPulls(self.state, retention.log, retention.waits.released_through,
                                    retention.copies)
        self.repair = Repair(self.state, self.membership, self.dissemination, self.publishing,
                             o, self.root_pulls)
        self.misrouted = Misrouted()
        #: Topic -> new subscriptions not in effect yet (see the ``subscribed`` notice).
        self._settling: dict[str, set[int]] = {}
        self.replays = Replays(self.state, self.dissemination, retention.log,
                               retention.waits.released_through)
        self.restarted = Restarted(self.state, retention, self.membership, self.consumers)
        m, d, r = self.membership, self.dissemination, self.repair
        self._direct: dict[type[Message], Callable[[float, Any], None]] = {
            Event: d.on_event,
            Events: d.on_events,
            AnycastBack: d.on_anycast_back,
            JoinAck: m.on_join_ack,
            DigestUpdate: m.on_digest,
            Leave: m.on_leave,
            Disown: m.on_disown,
            Join: m.on_join_pushed,
            Heartbeat: r.on_heartbeat,
            HeartbeatAck: r.on_heartbeat_ack,
            Publish: self.publishing.on_direct,
            Publishes: self.publishing.on_direct,
            PublishAck: self.publishing.on_ack,
            PublishRefused: self.publishing.on_refused,
            Replicate: retention.copies_in.on_replicate,
            ReplicateAck: retention.on_replicate_ack,
            ReplicateAcks: retention.on_replicate_acks,
            ReplicaSync: retention.copies_in.on_replica_sync,
            Pull: o.on_pull,
            Fill: o.on_fill,
            Restore: self.root_pulls.on_restore,
            ReplayFill: self.replays.on_fill,
            ConsumerAttach: lambda now, m: self.consumers.on_attach(now, m, routed=False),
            ConsumerDetach: lambda now, m: self.consumers.on_detach(now, m, routed=False),
            ConsumerAck: lambda now, m: self.consumers.on_ack(now, m, routed=False),
            ConsumerFetch: lambda now, m: self.consumers.on_fetch(now, m, routed=False),
            ConsumerSync: self.consumers.on_sync,
            ConsumerAttached: self.members.on_attached,
            ConsumerDeliver: self.members.on_deliver,
            ConsumerQuery: lambda now, m: self.consumers.on_query(now, m, routed=False),
            ConsumerReport: self.members.on_report,
        }

    @property
    def config(self) -> ScribeConfig:
        return self.state.config

    def subscribe(self, now: float, topic: str, filter_text: str, sub_id: int,
                  expiry: float | None = None, group: str | None = None,
                  replay_last: int | None = None, replay_since: int | None = None) -> None:
        """Start local subscription ``sub_id`` (a handle the caller chose, unique on this
        node). ``expiry``: seconds of life from ``now`` (None: until unsubscribed).
        ``group``: share the topic's events with the group's other members.

        Raises ``matching.FilterSyntaxError`` for a bad filter, ``ValueError`` for a bad
        topic, group or expiry, ``DuplicateSubscriptionError`` for a handle in use.
        ``replay_last``/``replay_since``: first deliver the last N matching events the
        root retains, or those from that seq on (:mod:`scribe.replay`).
        """
        s = self.state
        check_topic(topic)
        if group is not None:
            check_group(group)
        replay = replay_last is not None or replay_since is not None
        if replay and (group is not None or (replay_last is not None and replay_since is not None)
                       or min(x for x in (replay_last, replay_since) if x is not None) < 0):
            raise ValueError("replay takes either last >= 0 or since_seq >= 0, and not for a "
                             "group subscription")
        sub = Subscription(sub_id, topic, filter_text, parse(filter_text), group,
                           expiry_time(now, expiry))
        s.subs.add(sub)
        s.trace("subscribe", topic=topic, sub=sub_id, filter=filter_text,
                expiry=None if expiry is None else float(expiry), group=group)
        self._schedule_expiry(sub)
        self.membership.local_change(now, topic)
        if replay:
            self.replays.hold(now, sub, replay_last, replay_since)
        self._settling.setdefault(topic, set()).add(sub_id)
        self._announce_in_effect(now)

    def unsubscribe(self, now: float, sub_id: int, reason: str = "client") -> None:
        """End a local subscription (a durable one: detach it from its consumer). Raises
        ``UnknownSubscriptionError``."""
        check_unsubscribe_reason(reason)
        if sub_id in self.members.subs:
            self.members.detach(now, sub_id)
            return
        s = self.state
        sub = s.subs.remove(sub_id)
        s.timers.cancel(("expire", sub_id))
        s.trace("unsubscribe", topic=sub.topic, sub=sub_id, reason=reason)
        settling = self._settling.get(sub.topic)
        if settling is not None:
            settling.discard(sub_id)
            if not settling:
                del self._settling[sub.topic]
        self.membership.local_change(now, sub.topic)

    def renew(self, now: float, sub_id: int, expiry: float | None) -> None:
        """Give a subscription ``expiry`` more seconds from ``now`` (None: no end).
        Raises ``UnknownSubscriptionError``."""
        sub = self.state.subs.get(sub_id)
        sub.expires_at = expiry_time(now, expiry)
        self._schedule_expiry(sub)

    def publish(self, now: float, topic: str, attrs: Mapping[str, AttrValue],
                payload: bytes = b"", msg_id: str | None = None,
                ts: float | None = None, reliable: bool = True,
                ttl: float | None = None) -> str:
        """Publish an event; returns its msg_id (``msg_id`` if given, else a fresh random
        one). ``ts``: publish time to carry (default: the wall clock at ``now``);
        ``ttl``: seconds after ``ts`` it may be delivered. Reliable: a ``published``
        notice follows once the root numbered it and its replicas hold it (until then
        the event is sent again every ``publish_retry``). Raises ``ValueError``
        for bad input."""
        msg_id = self.publishing.publish(now, topic, attrs, payload, msg_id, ts, reliable, ttl)
        if self._settling:  # as after a delivery: this node may have become the root
            self._announce_in_effect(now)
        return msg_id

    def publish_many(self, now: float, events: Sequence[NewEvent]) -> list[PublishOutcome]:
        """Publish ``events``, in order, as :meth:`publish` one by one would, in one step
        (a run of one topic's events is numbered, retained and sent down together): per
        event its msg_id, or the error refusing it."""
        outcomes = self.publishing.publish_many(now, events)
        if self._settling:  # as after a delivery: this node may have become the root
            self._announce_in_effect(now)
        return outcomes

    def _announce_in_effect(self, now: float) -> None:
        """A ``subscribed`` notice for each new subscription that is in effect now; one
        that asked for a replay asks the root for it now (scribe.replay)."""
        s = self.state
        for topic in list(self._settling):
            tree = s.trees.get(topic)
            if tree is None or not (tree.is_root or (tree.parent is not None and tree.settled)):
                continue
            for sub_id in sorted(self._settling.pop(topic)):
                s.trace("subscribed", topic=topic, sub=sub_id)
                s.host.notice("subscribed", topic=topic, sub=sub_id)
                self.replays.in_effect(now, sub_id)

    # -- durable consumers (scribe.consumers) ---------------------------------------------------

    def durable_subscribe(self, now: float, topic: str, name: str, sub_id: int,
                          filter_text: str = "", config: ConsumerConfig | None = None) -> None:
        """Attach local subscription ``sub_id`` to durable consumer ``name`` of ``topic``
        (created with ``config`` and ``filter_text`` at its root if it does not exist).
        Its events come as deliveries with their attempt (pushed), or in ``fetched``
        notices (``pull``). Raises ValueError for a bad topic or name,
        ``matching.FilterSyntaxError`` for a bad filter."""
        check_topic(topic)
        check_name(name)
        parse(filter_text)
        self.members.attach(now, sub_id, topic, name, config or ConsumerConfig(), filter_text)

    def durable_ack(self, now: float, sub_id: int, op: str, msg_ids: tuple[str, ...],
                    delay: float = 0.0) -> None:
        """``ack``, ``nak`` (again after ``delay``) or ``term`` events of ``sub_id``."""
        self.members.ack(now, sub_id, op, msg_ids, delay)

    def durable_fetch(self, now: float, sub_id: int, fetch_id: int, count: int,
                      wait: float) -> None:
        """Ask for up to ``count`` events (a ``fetched`` notice answers, within ``wait``)."""
        self.members.fetch(now, sub_id, fetch_id, count, wait)

    def durable_unsubscribe(self, now: float, sub_id: int) -> None:
        self.members.detach(now, sub_id)

    def consumers_query(self, now: float, query_id: int, topic: str, name: str | None = None,
                        delete: bool = False) -> None:
        """Ask ``topic``'s root for its durable consumers (``name``: that one), deleting
        ``name`` first with ``delete``; a ``consumers`` notice answers (none when the
        root cannot be reached: the caller bounds its wait)."""
        check_topic(topic)
        if name is not None:
            check_name(name)
        self.members.query(now, query_id, topic, name, delete)

    def _publish_dead_letter(self, now: float, topic: str, attrs: Mapping[str, AttrValue],
                             payload: bytes) -> None:
        self.publishing.publish(now, topic, attrs, payload, reliable=True)

    def status(self) -> dict[str, Any]:
        """Topics this node is in, with role, parent, depth and children (API ``status``)."""
        s = self.state
        return {topic: {"role": str(s.role(tree)),
                        "parent": None if tree.parent is None else s.hex(tree.parent.id),
                        "depth": tree.depth, "children": len(tree.children)}
                for topic, tree in sorted(s.trees.items())}

    def logs(self) -> dict[str, dict[str, Any]]:
        """The topic logs this node retains (API ``status``'s ``logs``)."""
        return self.publishing.retention.logs()

    def tree_info(self, topic: str) -> TreeInfo:
        """This node's place in ``topic``'s tree (answer to a :class:`TreeQuery`)."""
        s = self.state
        tree = s.trees.get(topic)
        subs = s.subs.topic(topic)
        count = 0 if subs is None else len(subs)
        if tree is None or not tree.attached:
            return TreeInfo(topic, s.host.local, None, None, None, (), count)
        return TreeInfo(topic, s.host.local, str(s.role(tree)), tree.parent, tree.depth,
                        tuple(edge.ref for edge in tree.children.values()), count)

    # -- KBR up-calls ----------------------------------------------------------------------------

    def forward(self, now: float, key: int, msg: Message, next_hop: NodeRef) -> Message | None:
        if isinstance(msg, Join):
            return self.membership.on_join_passing(now, msg)
        return msg

    def deliver(self, now: float, key: int, msg: Message, hops: int) -> None:
        if not self.state.host.is_responsible(key):
            # Delivered on the last hop's word alone (scribe.misrouted): wait until this
            # node knows it owns the key, or the ring routes the message elsewhere.
            given_up = self.misrouted.park(now, key, msg)
            self.state.wake(now)
            if given_up is not None and isinstance(given_up.msg, Publish) \
                    and not given_up.msg.reliable:
                body = given_up.msg.body
                self.state.trace("drop", topic=body.topic, msg_id=body.msg_id,
                                 reason="overload")
            return
        self._deliver(now, key, msg)
        if self._settling:
            self._announce_in_effect(now)

    def _deliver(self, now: float, key: int, msg: Message) -> None:
        if isinstance(msg, Join):
            self.membership.on_join_at_root(now, msg)
        elif isinstance(msg, Publish):
            self.publishing.on_publish(now, msg)
        elif isinstance(msg, RootHandover):
            self.membership.on_handover(now, msg)
        elif isinstance(msg, Pull):
            self.root_pulls.on_root_pull(now, msg)
        elif isinstance(msg, ReplayRequest):
            self.replays.at_root(now, msg)
        elif isinstance(msg, ConsumerAttach):
            self.consumers.on_attach(now, msg, routed=True)
        elif isinstance(msg, ConsumerAck):
            self.consumers.on_ack(now, msg, routed=True)
        elif isinstance(msg, ConsumerFetch):
            self.consumers.on_fetch(now, msg, routed=True)
        elif isinstance(msg, ConsumerDetach):
            self.consumers.on_detach(now, msg, routed=True)
        elif isinstance(msg, ConsumerQuery):
            self.consumers.on_query(now, msg, routed=True)
        elif isinstance(msg, ConsumerSync):
            self.consumers.on_sync(now, msg)  # a former root's, as the key moved away

    def on_direct(self, now: float, src: str, msg: Message) -> None:
        handler = self._direct.get(type(msg))
        if handler is not None:
            handler(now, msg)
            if self._settling:
                self._announce_in_effect(now)

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        if isinstance(msg, ConsumerAttach | ConsumerAck | ConsumerFetch | ConsumerDetach
                      | ConsumerQuery):
            self.members.on_unreachable(now, dest, msg)
        elif not isinstance(msg, ConsumerDeliver | ConsumerAttached | ConsumerSync
                            | ConsumerReport):
            # (A member's node gone: its lease runs out. A replica gone: the ring's.)
            self.repair.on_unreachable(now, dest, msg)

    def on_route_failed(self, now: float, key: int, msg: Message) -> None:
        if isinstance(msg, RootHandover):
            # A root's log and counter must reach the key's owner: lost, the events
            # it acknowledged (a stale root's, in a ring still settling) would never
            # reach the tree, and the owner could number others under their seqs.
            self.state.host.route(now, key, msg, ack=True)

    def update(self, now: float, node: NodeRef, joined: bool) -> None:
        s = self.state
        pred = s.host.predecessor()
        pred_id = None if pred is None else pred.id
        if pred_id != s.pred_id:
            s.pred_id, s.pred_changed_at = pred_id, now
            self._note_range(now)
        self.repair.check_ownership(now)
        if self.misrouted:
            self._retry_misrouted(now)
        if self._settling:
            self._announce_in_effect(now)

    def _note_range(self, now: float) -> None:
        """Persist the start of the key range this node owns, when it changed (a restart
        learns from it which keys were its own: scribe.standin)."""
        start = self.state.former.note(now, self.state.pred_id)
        if start is not None:
            self.publishing.retention.durability.write(NoteRange(start))

    def _retry_misrouted(self, now: float) -> None:
        """Handle parked messages whose key this node owns now; route the others that
        waited a heartbeat interval toward their key again."""
        host = self.state.host
        deliver, reroute = self.misrouted.take(now, self.config.heartbeat_interval,
                                               host.is_responsible)
        for item in deliver:
            self._deliver(now, item.key, item.msg)
        for item in reroute:
            host.route(now, item.key, item.msg)

    def on_timer(self, now: float) -> None:
        for name in self.state.timers.pop_due(now):
            if name == TICK:
                if self.state.former.persisted != self.state.pred_id:
                    self._note_range(now)  # a wider range withheld while the node waited
                if self.misrouted:
                    self._retry_misrouted(now)
                self.repair.tick(now)
                self.restarted.tick(now)
                if self.misrouted:
                    self.state.wake(now)
                self.replays.tick(now)
                if self._settling:
                    self._announce_in_effect(now)
                if self.replays:
                    self.state.wake(now)
                if self.members:
                    self.members.tick(now)  # every heartbeat interval: the leases
                    self.state.wake(now)
            elif isinstance(name, tuple) and name[0] == "expire":
                self._expire(now, name[1])
        if self.consumers:
            # Leases, ack waits, fetch waits and nak delays end at their own times.
            self.consumers.tick(now)
            self.state.wake(now)

    def next_deadline(self) -> float | None:
        own = self.state.timers.next_deadline()
        theirs = self.consumers.next_deadline() if self.consumers else None
        if own is None or theirs is None:
            return own if theirs is None else theirs
        return min(own, theirs)

    # -- storage ---------------------------------------------------------------------------------

    def on_synced(self, now: float, through: int) -> None:
        """The node's store synced its first ``through`` persists (scribe.durability)."""
        self.publishing.retention.waits.on_synced(now, through)

    def on_storage_failed(self, now: float, through: int, reason: str) -> None:
        """The store could not write the events of its persists up to ``through``."""
        self.publishing.retention.waits.on_storage_failed(now, through, reason)

    def restore(self, now: float, logs: list[RestoredLog], load_ms: float = 0.0,
                lost: bool = False, consumers: list[RestoredConsumer] | None = None,
                range_start: int | None = None) -> None:
        """Before joining: what the node's store kept from its last run (scribe.restarted)."""
        self.restarted.restore(now, logs, load_ms, lost, consumers, range_start)

    # -- expiry ----------------------------------------------------------------------------------

    def _schedule_expiry(self, sub: Subscription) -> None:
        if sub.expires_at is None:
            self.state.timers.cancel(("expire", sub.sub_id))
        else:
            self.state.timers.set(("expire", sub.sub_id), sub.expires_at)

    def _expire(self, now: float, sub_id: int) -> None:
        if sub_id in self.state.subs:
            self.state.host.notice("expired", sub=sub_id)
            self.unsubscribe(now, sub_id, reason="expired")

"""Publishing: the publisher's node sends the event to the topic's root, which numbers it.

The first event of a topic is routed through the DHT toward the topic's key; the root's
answer (:class:`PublishAck`) tells the publisher's node the root's address, and later
events go there in one hop. A cached root that cannot be reached is forgotten and the
event routed again; a cached node that is no longer the root routes it on itself.

A reliable event stays with the publisher's node until the root's acknowledgement,
which comes once the root's replicas hold it (:mod:`scribe.retention`); without one
within ``publish_retry`` it is routed to the topic's key again with the same msg_id,
across root failures, and the (possibly new) root numbers it once. A root that cannot
store it refuses it instead (:class:`PublishRefused`, see :mod:`scribe.durability`): the
publisher's node stops retrying and tells its application (a ``refused`` notice).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

from chord.kbr import NodeRef
from overlay.core.errors import LocalProtocolError
from overlay.core.pubsub import AttrValue, NewEvent, PublishOutcome
from scribe.dissemination import Dissemination
from scribe.durability import Durability
from scribe.membership import Membership
from scribe.publish_messages import Publish, PublishAck, Publishes, PublishRefused, Restore
from scribe.retention import Retention
from scribe.root_pulls import restore_after
from scribe.root_waits import Release
from scribe.state import ScribeState
from scribe.wire_records import EventBody, message_runs, numbered_run


class Publishing:
    def __init__(self, state: ScribeState, membership: Membership,
                 dissemination: Dissemination, release: Release) -> None:
        """``release``: sends an event the root numbered down the tree (and to the
        topic's durable consumers)."""
        self.s = state
        self.membership = membership
        self.dissemination = dissemination
        self.retention = Retention(state, self._acknowledged, self._refused,
                                   release,
                                   Durability(state.host, state.config.durable),
                                   dissemination.matching_ahead)
        #: Topic -> its root as last acknowledged, least recently used first.
        self.roots: OrderedDict[str, NodeRef] = OrderedDict()
        #: Topic -> publishes held at a root that is recovering the topic (by msg_id, in
        #: arrival order; see ``ScribeState.start_recovery``).
        self.deferred: dict[str, dict[str, Publish]] = {}
        #: (topic, msg_id) -> reliable events not acknowledged yet: the message, when it
        #: was accepted and when it was last sent.
        self.unacked: dict[tuple[str, str], tuple[Publish, float, float]] = {}

    def publish(self, now: float, topic: str, attrs: Mapping[str, AttrValue],
                payload: bytes = b"", msg_id: str | None = None,
                ts: float | None = None, reliable: bool = True,
                ttl: float | None = None) -> str:
        """Accept an event from the local application; returns its msg_id."""
        outcome = self.publish_many(
            now, (NewEvent(topic, attrs, payload, msg_id, ts, reliable, ttl),))[0]
        if not isinstance(outcome, str):
            raise outcome
        return outcome

    def publish_many(self, now: float, events: Sequence[NewEvent]) -> list[PublishOutcome]:
        """Accept events from the local application, in order: per event its msg_id, or
        the error refusing it. Events in a row of one topic and reliability (with
        distinct msg_ids) go toward the root as one run: at the root, one step numbers,
        retains, persists and sends them down."""
        outcomes: list[PublishOutcome] = []
        run: list[EventBody] = []
        run_ids: set[str] = set()
        run_reliable = False
        for ev in events:
            try:
                body = self._body(now, ev)
            except (ValueError, LocalProtocolError) as exc:
                outcomes.append(exc)
                continue
            outcomes.append(body.msg_id)
            if run and (body.topic != run[0].topic or ev.reliable != run_reliable
                        or body.msg_id in run_ids):
                self._toward_root(now, run, run_reliable)
                run, run_ids = [], set()
            self._accept(now, body, ev.reliable)
            run.append(body)
            run_ids.add(body.msg_id)
            run_reliable = ev.reliable
        if run:
            self._toward_root(now, run, run_reliable)
        return outcomes

    def _body(self, now: float, ev: NewEvent) -> EventBody:
        """The event as it travels (checked: ValueError or LocalProtocolError)."""
        s = self.s
        msg_id = ev.msg_id
        if msg_id is None:
            msg_id = format(s.host.rng.getrandbits(128), "032x")
        return EventBody(ev.topic, msg_id, None, dict(ev.attrs), bytes(ev.payload), s.me_hex,
                         s.wall(now) if ev.ts is None else float(ev.ts),
                         None if ev.ttl is None else float(ev.ttl))

    def _accept(self, now: float, body: EventBody, reliable: bool) -> None:
        """Record the publish; a reliable one waits for the root's acknowledgement."""
        s = self.s
        s.trace("publish", topic=body.topic, msg_id=body.msg_id, attrs=body.attrs,
                size=len(body.payload))
        if reliable:
            self.unacked[(body.topic, body.msg_id)] = (Publish(body, s.me, reliable), now, now)
            s.wake(now)

    def retry(self, now: float) -> None:
        """Send again, through the DHT, every reliable event unacknowledged for too long;
        give up (a ``drop`` record, reason ``expired``) on one past ``publish_give_up``."""
        s = self.s
        cfg = s.config
        for key, (msg, accepted, sent) in list(self.unacked.items()):
            topic = msg.body.topic
            if accepted + cfg.publish_give_up <= now:
                del self.unacked[key]
                s.trace("drop", topic=topic, msg_id=msg.body.msg_id, reason="expired")
            elif sent + cfg.publish_retry <= now:
                self.roots.pop(topic, None)  # the cached root may be the problem
                self.unacked[key] = (msg, accepted, now)
                s.host.route(now, s.mid(topic), msg)

    def _toward_root(self, now: float, bodies: Sequence[EventBody], reliable: bool) -> None:
        """A run of new events of one topic from this node's application."""
        s = self.s
        topic = bodies[0].topic
        root = self.roots.get(topic)
        if root is not None and root.id != s.me.id:
            if len(bodies) == 1:
                s.send(root, self._message(bodies[0], reliable))
                return
            for run in message_runs(list(bodies), s.config.sizes):
                s.send(root, Publishes(topic, tuple(run), s.me, reliable))
            return
        key = s.mid(topic)
        if s.host.is_responsible(key):
            # The key is ours: no route to start (nor its record). This node knows its
            # root, so an unreliable event needs no acknowledgement to itself.
            self.at_root(now, bodies, s.me, reliable, direct=True)
        else:
            for body in bodies:
                s.host.route(now, key, self._message(body, reliable))

    def _message(self, body: EventBody, reliable: bool) -> Publish:
        """The Publish carrying a new event of this node's application (a reliable one's
        is the one kept for retries)."""
        held = self.unacked.get((body.topic, body.msg_id)) if reliable else None
        return held[0] if held is not None else Publish(body, self.s.me, reliable)

    def on_publish(self, now: float, msg: Publish) -> None:
        """``deliver`` up-call: a Publish reached the node responsible for its key."""
        self.at_root(now, (msg.body,), msg.origin, msg.reliable)

    def at_root(self, now: float, bodies: Sequence[EventBody], origin: NodeRef,
                reliable: bool, direct: bool = False) -> None:
        """Events of one topic with distinct msg_ids (``bodies``, from ``origin``'s
        application) at the node responsible for the topic's key. ``direct``: ``origin``
        knows this node is the root (it sent the events here as its cached root, or it is
        this node)."""
        s = self.s
        topic = bodies[0].topic
        retention = self.retention
        tree = s.trees.get(topic)
        # Claiming the root role again changes nothing once this node numbers the topic,
        # has a counter for it and is its tree's root; an event of a busy topic then
        # skips the calls that would find exactly that. (Replica copies are adopted when
        # the node starts numbering: any that come later are another root's.)
        if (topic not in s.seq or topic not in s.numbering
                or (tree is not None and not tree.is_root)):
            self.membership.claim_root(now, topic)
        fresh: list[EventBody] = []
        for body in bodies:
            seq = retention.numbered(topic, body.msg_id)
            if seq is None:
                fresh.append(body)
            elif not retention.waits.also_waiting(topic, body.msg_id, origin):
                # A retried publish: same number, not sent down again.
                log = retention.log(topic)
                assert log is not None  # it numbered the event
                retention.waits.answer(log.events[seq][1], origin)
        if not fresh:
            return
        if topic in s.recovering:
            # Maybe a root failed with every copy of its counter: numbering from 1 would
            # reuse numbers members hold. Wait for their positions (JOINs, catch-ups).
            deferred = self.deferred.setdefault(topic, {})
            for body in fresh:
                deferred.setdefault(body.msg_id, Publish(body, origin, reliable))
            return
        if reliable and retention.durability.refusing(now):
            # The store is failing: numbering the events would only waste their seqs.
            for body in fresh:
                retention.waits.refuse(topic, body.msg_id, origin, "the root's store is failing")
            return
        first = s.seq.get(topic, 0) + 1
        log = retention.log(topic)
        numbered = numbered_run(fresh, first, log.before(first) if log is not None else None)
        s.seq[topic] = first + len(numbered) - 1
        if retention.keep(now, numbered, origin, reliable):
            # An unreliable event's acknowledgement only teaches its origin where the
            # root is: one that came straight here knows (one message less per event).
            if reliable or not direct:
                for body in numbered:
                    retention.waits.answer(body, origin)
            retention.waits.release_ready(now, topic, numbered)

    def number_deferred(self, now: float, topic: str, owner: bool) -> None:
        """The topic's recovery ended: number the publishes held meanwhile, or (``owner``
        false: the key moved away meanwhile) route them on to the key's owner."""
        for msg in self.deferred.pop(topic, {}).values():
            if owner:
                self.on_publish(now, msg)
            else:
                self.s.host.route(now, self.s.mid(topic), msg)

    def on_claim(self, now: float, topic: str, fresh: bool) -> None:
        """This node numbers ``topic`` (it owns the key); ``fresh``: it starts to. Only
        then are its replica copies the former root's log: copies that come while it
        numbers are another root's (two roots for one key), taken in by a merge only."""
        retention = self.retention
        if fresh:
            retention.adopt_replica(now, topic)
        if topic in retention.restored or now < retention.lost_until \
                or (fresh and self._lacks_copies(topic)):
            self._gather_from_replicas(now, topic)
        self.s.start_recovery(now, topic)

    def _lacks_copies(self, topic: str) -> bool:
        """The former root numbered events whose copies did not reach this replica (the
        root failed first): past the last one held, or in a gap that the event after it
        names (:meth:`Retained.lacks_copies`). Fresh events among them were never
        acknowledged, but a merge's moved ones were (under their old numbers, which the
        tree has passed): another replica may hold them."""
        log = self.retention.log(topic)
        counter = self.s.seq.get(topic, 0)
        return counter > 0 if log is None else log.lacks_copies(counter)

    def _gather_from_replicas(self, now: float, topic: str) -> None:
        """A restarted node claims a topic it loaded from its own log: that log may have
        lost its tail (not synced, or damaged and dropped) while the replicas kept it.
        Ask them for what they hold beyond this node's log (:class:`Restore`, answered
        with replica syncs that join the root's buffer) and recover meanwhile: publishes
        and pulls wait, replays are asked again."""
        s, retention = self.s, self.retention
        retention.restored.discard(topic)
        holds = restore_after(retention.log(topic))
        replicas = retention.replicas_of(topic)
        for replica in replicas:
            s.send(replica, Restore(topic, s.me, holds))
        if replicas:
            s.recover_until(now, topic, now + 2 * s.config.replica_timeout)

    def on_direct(self, now: float, msg: Publish | Publishes) -> None:
        """Events sent straight to this node as the topic's cached root (one, or a run)."""
        s = self.s
        bodies = msg.bodies if isinstance(msg, Publishes) else (msg.body,)
        key = s.mid(bodies[0].topic)
        if s.host.is_responsible(key):
            self.at_root(now, bodies, msg.origin, msg.reliable, direct=True)
        else:
            for single in _singles(msg):
                s.host.route(now, key, single)

    def on_ack(self, now: float, ack: PublishAck) -> None:
        s = self.s
        self.roots[ack.topic] = ack.root
        self.roots.move_to_end(ack.topic)
        while len(self.roots) > s.config.root_cache_size:
            self.roots.popitem(last=False)
        self._acknowledged(ack.topic, ack.msg_id, ack.seq)

    def _acknowledged(self, topic: str, msg_id: str, seq: int) -> None:
        """The root (and its replicas) hold the event: a reliable publish is answered
        (an acknowledgement of an unreliable one only teaches the root's address, see
        :meth:`on_ack`, and one for a publish answered already is not passed on)."""
        if self.unacked.pop((topic, msg_id), None) is not None:
            self.s.trace("publish_ack", topic=topic, msg_id=msg_id, seq=seq)
            self.s.host.notice("published", topic=topic, msg_id=msg_id, seq=seq)

    def on_refused(self, now: float, msg: PublishRefused) -> None:
        self._refused(msg.topic, msg.msg_id, msg.reason)

    def _refused(self, topic: str, msg_id: str, reason: str) -> None:
        """The root cannot store a reliable publish: it is not retried (the application
        is told, and may publish it again with the same msg_id)."""
        if self.unacked.pop((topic, msg_id), None) is not None:
            self.s.trace("drop", topic=topic, msg_id=msg_id, reason="storage_error")
            self.s.host.notice("refused", topic=topic, msg_id=msg_id,
                               code="storage_error", reason=reason)

    def on_unreachable(self, now: float, msg: Publish | Publishes) -> None:
        """The cached root is gone: forget it and route the events through the DHT."""
        singles = _singles(msg)
        topic = singles[0].body.topic
        self.roots.pop(topic, None)
        key = self.s.mid(topic)
        for single in singles:
            self.s.host.route(now, key, single)


def _singles(msg: Publish | Publishes) -> list[Publish]:
    """The events of ``msg`` as single publishes (to be routed on their own)."""
    return msg.each() if isinstance(msg, Publishes) else [msg]

"""Durable consumers at their topic's root: the registry that carries out what each
:class:`~scribe.consumers.Consumer` decides (docs/DESIGN.md, Durable consumers).

Members' nodes send :class:`ConsumerAttach` toward the topic's key, and again every
heartbeat interval: an attachment is a lease, and a member whose node stops renewing it
(crashed, cut off) is detached after ``LEASE_INTERVALS`` intervals, its events going to
the others. The root offers every event it sends down the tree to the topic's consumers;
deliveries and fetch answers go straight to the members' nodes (:class:`ConsumerDeliver`,
at most a message's worth each), dead letters are published to the consumer's
dead-letter topic. A consumer whose state changed is persisted (``SaveConsumer``) and
copied to the root's replicas (:class:`ConsumerSync`) at the next tick; a node that
becomes the topic's root resumes from those copies (what was in flight goes again).

A new consumer starts with every event its topic's root still retains (a work queue
gets the tasks published before its first worker attached).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chord.kbr import NodeRef
from matching import Filter, FilterSyntaxError, parse
from overlay.core.limits import batches
from overlay.core.pubsub import AttrValue
from scribe.consumer_hosted import Hosted
from scribe.consumer_messages import (
    MAX_REPORTED,
    ConsumerAck,
    ConsumerAttach,
    ConsumerAttached,
    ConsumerDeliver,
    ConsumerDetach,
    ConsumerFetch,
    ConsumerQuery,
    ConsumerReport,
    ConsumerSync,
    report_cost,
)
from scribe.consumer_values import (
    Action,
    ConsumerError,
    DeadLetter,
    Deliver,
    FetchAnswer,
    Member,
    Progress,
    Record,
)
from scribe.consumers import Consumer
from scribe.durability import DeleteConsumer, Durability, SaveConsumer
from scribe.ordering import RootLog
from scribe.state import ScribeState
from scribe.wire_records import MAX_BATCH, MAX_REASON, EventBody, message_runs

#: Heartbeat intervals a member's attachment lasts without being renewed.
LEASE_INTERVALS = 3.5
#: Seconds at most between a consumer's change (an acknowledgement, say) and its
#: progress reaching the root's store and its replicas: a crash of them all within it
#: may deliver the change's events again (docs/API.md, Durable consumers).
FLUSH_DELAY = 0.05
FLUSH = "consumers_flush"
#: What a member of a deleted consumer is told.
DELETED = "the durable consumer was deleted"

#: Publishes an event (the dead letters): (now, topic, attrs, payload).
PublishEvent = Callable[[float, str, Mapping[str, AttrValue], bytes], None]
#: The nodes holding this root's copies of a topic (Retention.replicas_of).
ReplicasOf = Callable[[str], list[NodeRef]]
#: Makes this node the topic's root (Membership.claim_root).
Claim = Callable[[float, str], None]

Key = tuple[str, str]


class ConsumerRoots:
    def __init__(self, state: ScribeState, root_log: RootLog, durability: Durability,
                 replicas_of: ReplicasOf, publish: PublishEvent, claim: Claim) -> None:
        self.s = state
        self.root_log = root_log
        self.durability = durability
        self.replicas_of = replicas_of
        self.publish = publish
        self.claim = claim
        self.hosted: dict[Key, Hosted] = {}
        #: Copies of consumers this node holds for their root: key -> (progress, filter).
        self.copies: dict[Key, tuple[Progress, str]] = {}
        #: Topic -> its consumers' names here (the release path asks per event).
        self._by_topic: dict[str, set[str]] = {}
        #: Consumers deleted lately: the members attached then, and until when their
        #: attachments (renewals already on their way) are refused rather than creating
        #: the consumer anew.
        self._deleted: dict[Key, tuple[frozenset[Member], float]] = {}

    def __bool__(self) -> bool:
        return bool(self.hosted or self._deleted)

    # -- at the root -------------------------------------------------------------------------

    def on_attach(self, now: float, msg: ConsumerAttach, routed: bool) -> None:
        if not self._here(now, msg.topic, msg, routed):
            return
        key = (msg.topic, msg.name)
        member = Member(msg.member.addr, msg.sub)
        deleted = self._deleted.get(key)
        if deleted is not None and member in deleted[0]:
            self.s.send(msg.member, ConsumerAttached(msg.topic, msg.name, msg.sub, self.s.me,
                                                     DELETED, "deleted"))
            return
        hosted = self.hosted.get(key)
        error = None
        code = "invalid"
        if hosted is None:
            try:
                hosted = self._create(now, key, msg)
            except (ConsumerError, FilterSyntaxError) as exc:
                error = str(exc)[:MAX_REASON]
        elif hosted.consumer.config != msg.settings or hosted.filter_text != msg.filter:
            error = "the consumer exists with other settings or another filter"
            code = "conflict"
        if hosted is None or error is not None:
            self.s.send(msg.member, ConsumerAttached(msg.topic, msg.name, msg.sub, self.s.me,
                                                     error, code))
            return
        fresh = member not in hosted.leases
        hosted.leases[member] = now + LEASE_INTERVALS * self.s.config.heartbeat_interval
        if fresh:
            self.s.send(msg.member, ConsumerAttached(msg.topic, msg.name, msg.sub, self.s.me))
            if now < hosted.gathering_until:
                hosted.waiting.add(member)  # it gets events once the copies are gathered
            else:
                self._carry_out(now, hosted, hosted.consumer.attach(now, member))
        self.s.wake(now)

    def on_detach(self, now: float, msg: ConsumerDetach, routed: bool) -> None:
        hosted = self._hosted_for(now, msg, routed)
        if hosted is not None:
            member = Member(msg.member.addr, msg.sub)
            hosted.leases.pop(member, None)
            if not hosted.forget(member):
                self._carry_out(now, hosted, hosted.consumer.detach(now, member))

    def on_ack(self, now: float, msg: ConsumerAck, routed: bool) -> None:
        hosted = self._hosted_for(now, msg, routed)
        if hosted is None:
            return
        consumer, member = hosted.consumer, Member(msg.member.addr, msg.sub)
        log = self.root_log(msg.topic)
        for msg_id in msg.msg_ids:
            seq = None if log is None else log.by_msg.get(msg_id)
            if seq is None:
                continue  # retention dropped it: nothing to acknowledge any more
            try:
                if msg.op == "ack":
                    actions = consumer.ack(now, member, seq)
                elif msg.op == "nak":
                    actions = consumer.nak(now, member, seq, msg.delay)
                else:
                    actions = consumer.term(now, member, seq)
            except ConsumerError:
                continue  # late (redelivered to another member meanwhile), or twice
            self._carry_out(now, hosted, actions)

    def on_fetch(self, now: float, msg: ConsumerFetch, routed: bool) -> None:
        hosted = self._hosted_for(now, msg, routed)
        if hosted is None:
            return
        if Member(msg.member.addr, msg.sub) in hosted.waiting:
            hosted.held_fetches.append(msg)  # answered once the gathering is over
            return
        self._fetch(now, hosted, msg)

    def _fetch(self, now: float, hosted: Hosted, msg: ConsumerFetch) -> None:
        try:
            # One answer is one message: at most a message's worth of events.
            actions = hosted.consumer.fetch(now, Member(msg.member.addr, msg.sub),
                                            msg.fetch_id, min(msg.count, MAX_BATCH), msg.wait,
                                            self.s.config.sizes.batch_bytes)
        except ConsumerError:
            return  # not attached (its lease ran out): it attaches again, then fetches
        self._carry_out(now, hosted, actions)

    def offer(self, now: float, body: EventBody) -> None:
        """The root sent ``body`` down the tree: its topic's consumers get it too."""
        for name in self._by_topic.get(body.topic, ()):
            hosted = self.hosted[(body.topic, name)]
            self._carry_out(now, hosted, hosted.consumer.offer(now, body))

    def tick(self, now: float) -> None:
        """Expire leases, run the consumers' clocks, persist and copy what changed."""
        for key, (_, until) in list(self._deleted.items()):
            if until <= now:
                del self._deleted[key]
        for (topic, name), hosted in list(self.hosted.items()):
            for member, until in list(hosted.leases.items()):
                if until <= now:
                    del hosted.leases[member]
                    if not hosted.forget(member):  # one still waiting was never attached
                        self._carry_out(now, hosted, hosted.consumer.detach(now, member))
            if hosted.resume_from is not None and now >= hosted.gathering_until:
                hosted = self._take_newer(now, (topic, name), hosted, hosted.resume_from)
            if hosted.resume_from is None:
                if hosted.waiting and now >= hosted.gathering_until:
                    for member in sorted(hosted.waiting, key=lambda m: (m.node, m.sub)):
                        self._carry_out(now, hosted, hosted.consumer.attach(now, member))
                    hosted.waiting.clear()
                    held, hosted.held_fetches = hosted.held_fetches, []
                    for fetch in held:
                        self._fetch(now, hosted, fetch)
                deadline = hosted.consumer.next_deadline()
                if deadline is not None and deadline <= now:
                    self._carry_out(now, hosted, hosted.consumer.tick(now))
            if hosted.dirty:
                hosted.dirty = False
                # While it gathers, what it resumes from (not the consumer as the log
                # here shows it so far): its replicas answer with theirs if further.
                progress = hosted.resume_from if hosted.resume_from is not None \
                    else hosted.consumer.progress()
                self.durability.write(SaveConsumer(topic, name, progress, hosted.filter_text))
                wire = tuple(progress.to_wire())
                for replica in self.replicas_of(topic):
                    self.s.send(replica, ConsumerSync(topic, name, self.s.me, wire,
                                                      hosted.filter_text))

    def next_deadline(self) -> float | None:
        """The soonest of the consumers' own deadlines (ack waits, fetch waits, nak
        delays). Leases are coarse: the maintenance tick, every heartbeat interval while
        a consumer is hosted, expires them."""
        times = [d for h in self.hosted.values() if (d := h.consumer.next_deadline()) is not None]
        times += [h.gathering_until for h in self.hosted.values()
                  if h.waiting or h.resume_from is not None]
        return min(times) if times else None

    def on_query(self, now: float, msg: ConsumerQuery, routed: bool) -> None:
        """Report ``msg.topic``'s consumers to the asker (deleting the one named first,
        for a delete): as many as one message holds, by name."""
        if not self._here(now, msg.topic, msg, routed):
            return
        names = sorted(self._by_topic.get(msg.topic, ()))
        if msg.name is not None:
            names = [msg.name] if msg.name in names else []
        reports = [self.hosted[(msg.topic, name)].report(name) for name in names]
        if msg.delete:
            for name in names:
                self.delete(now, msg.topic, name)
        sent = next(batches(reports, _report_cost, self.s.config.sizes.batch_bytes,
                            MAX_REPORTED), [])
        self.s.send(msg.asker, ConsumerReport(msg.topic, msg.query_id, tuple(sent),
                                              len(sent) < len(reports)))

    def delete(self, now: float, topic: str, name: str) -> bool:
        """End consumer ``name`` of ``topic`` here and at the replicas; its members are
        told (their subscriptions end)."""
        hosted = self.hosted.pop((topic, name), None)
        if hosted is None:
            return False
        self._by_topic[topic].discard(name)
        self.durability.write(DeleteConsumer(topic, name))
        for replica in self.replicas_of(topic):
            self.s.send(replica, ConsumerSync(topic, name, self.s.me, None, ""))
        for member in hosted.leases:
            self.s.host.send_direct(member.node, ConsumerAttached(
                topic, name, member.sub, self.s.me, DELETED, "deleted"))
        self._deleted[(topic, name)] = (
            frozenset(hosted.leases),
            now + 2 * LEASE_INTERVALS * self.s.config.heartbeat_interval)
        self.s.trace("consumer", topic=topic, durable=name, op="delete", member=None,
                     sub=None)
        return True

    def reports(self) -> dict[str, list[dict[str, Any]]]:
        """The consumers this node is root for, per topic (API ``status``'s
        ``consumers``)."""
        found: dict[str, list[dict[str, Any]]] = {}
        for (topic, name), hosted in sorted(self.hosted.items()):
            found.setdefault(topic, []).append(hosted.report(name))
        return found

    # -- as a replica, and taking the root role -----------------------------------------------

    def on_sync(self, now: float, msg: ConsumerSync) -> None:
        """A root's copy of a consumer. At a replica: kept, unless the replica's own copy
        is further along (the root resumed from an older one, e.g. its own disk after a
        restart while another root went on): then that copy goes back to the root. At
        the root: such a copy, taken if it is further along than the consumer here."""
        key = (msg.topic, msg.name)
        if msg.progress is None:
            self.copies.pop(key, None)
            self.durability.write(DeleteConsumer(msg.topic, msg.name))
            return
        progress = Progress.from_wire(list(msg.progress))
        hosted = self.hosted.get(key)
        if hosted is not None:
            if hosted.resume_from is not None:
                if _further(progress, hosted.resume_from):
                    hosted.resume_from = progress  # resumed from when the gathering ends
            elif _further(progress, hosted.consumer.progress()):
                self._take_newer(now, key, hosted, progress)
            return
        held = self.copies.get(key)
        if held is not None and _further(held[0], progress):
            self.s.send(msg.root, ConsumerSync(msg.topic, msg.name, self.s.me,
                                               tuple(held[0].to_wire()), held[1]))
            return
        self.copies[key] = (progress, msg.filter)
        self.durability.write(SaveConsumer(msg.topic, msg.name, progress, msg.filter))

    def _take_newer(self, now: float, key: Key, hosted: Hosted, progress: Progress) -> Hosted:
        """Host ``key`` from ``progress`` instead, its leases and members kept (what was in
        flight here goes again); the consumer now hosted."""
        try:
            newer = self._resume(key, progress, hosted.filter_text)
        except FilterSyntaxError:
            hosted.resume_from = None
            return hosted
        newer.leases, newer.waiting = hosted.leases, hosted.waiting
        newer.held_fetches = hosted.held_fetches
        newer.gathering_until = hosted.gathering_until
        attached = [m for m in hosted.leases if m not in hosted.waiting]
        for member in sorted(attached, key=lambda m: (m.node, m.sub)):
            self._carry_out(now, newer, newer.consumer.attach(now, member))
        self._flush_soon(now)
        return newer

    def hand_over(self, now: float, topic: str) -> None:
        """``topic``'s key moved away: the new owner hosts its consumers. Each goes there
        as its progress (routed to the key: the new owner takes it, or answers with the
        newer copy it holds), and stays here as a copy, as at a replica. Members renew
        their attachments at the new owner; what was in flight here goes again."""
        for name in sorted(self._by_topic.pop(topic, ())):
            hosted = self.hosted.pop((topic, name))
            progress = hosted.consumer.progress()
            self.copies[(topic, name)] = (progress, hosted.filter_text)
            self.durability.write(SaveConsumer(topic, name, progress, hosted.filter_text))
            self.s.host.route(now, self.s.mid(topic), ConsumerSync(
                topic, name, self.s.me, tuple(progress.to_wire()), hosted.filter_text))

    def restore(self, topic: str, name: str, progress: Progress, filter_text: str) -> None:
        """A consumer a store loaded at start: held as a copy until this node is root."""
        self.copies[(topic, name)] = (progress, filter_text)

    def on_claim(self, now: float, topic: str) -> None:
        """This node became ``topic``'s root: resume the consumers it holds copies of."""
        for key in [k for k in self.copies if k[0] == topic and k not in self.hosted]:
            progress, filter_text = self.copies.pop(key)
            try:
                hosted = self._resume(key, progress, filter_text)
            except FilterSyntaxError:
                continue  # checked where it was made: a damaged copy
            self._gather(now, hosted, progress)

    # -- steps ----------------------------------------------------------------------------------

    def _here(self, now: float, topic: str, msg: ConsumerAttach | ConsumerDetach | ConsumerAck
              | ConsumerFetch | ConsumerQuery, routed: bool) -> bool:
        """Whether this node serves ``topic``'s consumers: it is the root, or it owns the
        key (a routed message) and becomes it. A direct message to a former root goes on
        toward the key."""
        s = self.s
        if topic in s.numbering:
            return True
        if routed:
            self.claim(now, topic)
            return topic in s.numbering
        s.host.route(now, s.mid(topic), msg)
        return False

    def _hosted_for(self, now: float, msg: ConsumerDetach | ConsumerAck | ConsumerFetch,
                    routed: bool) -> Hosted | None:
        if not self._here(now, msg.topic, msg, routed):
            return None
        return self.hosted.get((msg.topic, msg.name))

    def _event_log(self, topic: str) -> Callable[[int, float], EventBody | None]:
        def event(seq: int, now: float) -> EventBody | None:
            log = self.root_log(topic)
            held = None if log is None else log.events.get(seq)
            if held is None:
                return None
            body = held[1]
            if body.ttl is not None and self.s.expired(now, body):
                self.s.trace("drop", topic=topic, msg_id=body.msg_id, reason="too_old")
                return None
            return body
        return event

    def _create(self, now: float, key: Key, msg: ConsumerAttach) -> Hosted:
        """A new consumer: every event the root retains is pending (resuming from
        nothing, the floor goes up to the first one held). At a node whose key range
        changed lately it may not be new: the former root's copy may be on its way
        (``hand_over``), so it gathers first."""
        fresh = Progress(msg.settings, 0, (), (), 0)
        hosted = self._resume(key, fresh, msg.filter)
        if now < self.s.takeover_until() or key[0] in self.s.recovering:
            self._gather(now, hosted, fresh)
        return hosted

    def _gather(self, now: float, hosted: Hosted, progress: Progress) -> None:
        """``hosted`` was resumed from ``progress`` as this node became its root: its
        replicas (or its former root) may answer with a newer copy, and the root's log
        may still be arriving. Until ``replica_timeout`` from now (or the end of the
        topic's recovery: a stand-in's wait for the owner's return among them) members
        wait, and then the consumer resumes again from the furthest progress known."""
        topic = hosted.consumer.topic
        hosted.gathering_until = max(now + self.s.config.replica_timeout,
                                     self.s.recovering.get(topic, now))
        hosted.resume_from = progress
        self._flush_soon(now)  # its copy goes to the replicas (they answer if further)

    def _resume(self, key: Key, progress: Progress, filter_text: str) -> Hosted:
        """Host the consumer ``progress`` describes, with the root's log offered again
        (FilterSyntaxError for a filter that does not parse)."""
        topic, name = key
        wanted = parse(filter_text)
        log = self.root_log(topic)
        events = [] if log is None else [body for _, (_, body) in log.events.items()]
        consumer = Consumer.resume(topic, name, progress, self._event_log(topic),
                                   _wants(wanted), events)
        hosted = self.hosted[key] = Hosted(consumer, filter_text)
        self._by_topic.setdefault(topic, set()).add(name)
        return hosted

    def _carry_out(self, now: float, hosted: Hosted, actions: list[Action]) -> None:
        if not actions:
            return
        s, consumer = self.s, hosted.consumer
        hosted.dirty = True
        pushes: dict[Member, list[tuple[EventBody, int]]] = {}
        for action in actions:
            if isinstance(action, Deliver):
                pushes.setdefault(action.member, []).append((action.body, action.attempt))
            elif isinstance(action, FetchAnswer):
                self._send(action.member, consumer, list(action.events), action.fetch_id)
            elif isinstance(action, DeadLetter):
                self._dead_letter(now, consumer, action)
            elif isinstance(action, Record):
                s.trace(action.ev, **dict(action.fields))
        for member, events in pushes.items():
            self._send(member, consumer, events, None)
        self._flush_soon(now)

    def _flush_soon(self, now: float) -> None:
        """Persist and copy the changed consumers within FLUSH_DELAY (the tick does), and
        keep the maintenance tick going for the leases."""
        s = self.s
        if FLUSH not in s.timers:
            s.timers.set(FLUSH, now + min(FLUSH_DELAY, s.config.heartbeat_interval))
        s.wake(now)

    def _send(self, member: Member, consumer: Consumer, events: list[tuple[EventBody, int]],
              fetch_id: int | None) -> None:
        """``events`` to ``member``'s node, a message's worth at a time (a fetch answer's
        parts all carry its id; the member's node hands them on as they come)."""
        attempt_of = {id(body): attempt for body, attempt in events}
        runs = message_runs([body for body, _ in events], self.s.config.sizes)
        for run in runs:
            if not run and fetch_id is None:
                continue
            self.s.host.send_direct(member.node, ConsumerDeliver(
                consumer.topic, consumer.name, member.sub, tuple(run),
                tuple(attempt_of[id(body)] for body in run), fetch_id))

    def _dead_letter(self, now: float, consumer: Consumer, letter: DeadLetter) -> None:
        body = letter.body
        if letter.topic is None:
            self.s.trace("drop", topic=body.topic, msg_id=body.msg_id, reason="dead_letter")
            return
        attrs = {**body.attrs, "dead_topic": body.topic, "dead_msg_id": body.msg_id,
                 "dead_attempts": letter.attempts, "dead_consumer": consumer.name}
        self.publish(now, letter.topic, attrs, body.payload)


def _report_cost(report: dict[str, Any]) -> int:
    return report_cost(report["durable"], report["filter"])


def _further(one: Progress, other: Progress) -> bool:
    """Whether ``one`` has got further than ``other`` (more of the topic done)."""
    return (one.ack_floor, len(one.done), one.offered) > \
        (other.ack_floor, len(other.done), other.offered)


def _wants(wanted: Filter) -> Callable[[EventBody], bool]:
    def matches(body: EventBody) -> bool:
        return wanted.matches(body.attrs)
    return matches


__all__ = ["LEASE_INTERVALS", "ConsumerRoots"]

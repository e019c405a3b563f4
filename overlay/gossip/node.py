"""``GossipNode``: the unstructured mode's sans-IO core.

One node: a peer sampling view (:mod:`~overlay.gossip.hyparview` or a full view), one
dissemination strategy (:mod:`~overlay.gossip.strategies`), optional selective routing
(:mod:`~overlay.gossip.selective`), the events it holds, and its local subscriptions.

Application calls (the daemon's API layer, or a simulation scenario), each taking
``now`` on the driver's clock:

- ``start(now, seeds)``: begin; ``seeds`` are addresses to join through (``hyparview``)
  or the whole membership (``full`` view, shared, not copied);
- ``subscribe(now, topic, filter_text, sub_id, expiry=None)``,
  ``unsubscribe(now, sub_id, reason="client")``, ``renew(now, sub_id, expiry)``;
- ``publish(now, topic, attrs, payload=b"", msg_id=None, ts=None) -> msg_id``;
- ``status() -> dict``.

Effects: ``Send``; ``Deliver`` (a step's DeliveredEvents per matching local subscription);
``Notice`` kinds ``published`` (``topic``, ``msg_id``, ``seq`` None: the event is accepted
at once, nobody numbers it) and ``expired`` (``sub``); ``Trace`` records of TRACES.md:
``subscribe``, ``unsubscribe``, ``publish``, ``forward``, ``recv`` (with ``dup``),
``deliver``, ``repair`` (kind ``digest``), ``drop`` (reason ``ttl``). ``hop`` counts
transmissions from the publisher's node.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import lru_cache
from typing import Any

from matching import parse
from overlay.core.effects import Trace
from overlay.core.errors import LocalProtocolError
from overlay.core.ids import DEFAULT_ID_BITS, format_id, hash_id
from overlay.core.messages import Message
from overlay.core.protocol import CoreBase
from overlay.core.pubsub import (
    AttrValue,
    Capabilities,
    DeliveredEvent,
    NewEvent,
    PublishOutcome,
    check_topic,
    check_unsubscribe_reason,
    expiry_time,
    publish_each,
)
from overlay.core.timers import Timers
from overlay.gossip.config import GossipConfig
from overlay.gossip.digests import DigestRepair
from overlay.gossip.hyparview import HyParView
from overlay.gossip.messages import (
    Digest,
    Event,
    EventBody,
    Feedback,
    Interest,
    Repair,
    Request,
    Rumor,
)
from overlay.gossip.sampling import FullView, PeerSampler
from overlay.gossip.selective import InterestRouting
from overlay.gossip.store import EventStore, HeldEvent
from overlay.gossip.strategies import make_strategy
from overlay.gossip.subscriptions import Subscription, Subscriptions

#: Timer names: the node's round, forgetting old events, batched interest adverts.
ROUND = "round"
EXPIRE = "expire_events"
ADVERTS = "adverts"


class NotStartedError(LocalProtocolError):
    """An application call that needs peers came before ``start``."""


@lru_cache(maxsize=1 << 16)
def node_hex(address: str, bits: int = DEFAULT_ID_BITS) -> str:
    """A node's id as TRACES.md writes it: the hash of its advertised address."""
    return format_id(hash_id(address, bits), bits)


class GossipNode(CoreBase):
    #: Nothing is retained or numbered, there are no groups, and a subscription is in
    #: effect as soon as it is made.
    capabilities = Capabilities(replay=False, groups=False, settles=False, numbered=False,
                                durable=False)

    def __init__(self, address: str, rng: random.Random, config: GossipConfig | None = None,
                 bits: int = DEFAULT_ID_BITS) -> None:
        super().__init__(address)
        self.rng = rng
        self.config = config = config or GossipConfig()
        self.bits = bits
        self.node_hex = node_hex(address, bits)
        self.timers = Timers()
        self.subs = Subscriptions()
        self.store = EventStore(config.memory, config.digest_window, config.max_events)
        self.interest = InterestRouting(
            config.selective, self.node_hex, lambda peer: node_hex(peer, bits)
        ) if config.selective else None
        self._adverts_refreshed = 0.0
        self.peers: PeerSampler = (
            FullView(address, rng) if config.view == "full"
            else HyParView(address, rng, config.hyparview, self.send, self._neighbour_changed))
        self.repair = DigestRepair(self)
        self.strategy = make_strategy(self, config.strategy)
        self.started = False
        #: Rounds run at times ``phase + k * round_interval`` (a random phase per node,
        #: or 0 with aligned rounds), and only while the view or the strategy has
        #: periodic work: ten thousand idle nodes cost no events.
        self._phase = 0.0
        s = self.strategy
        self._handlers: dict[type[Message], Callable[[float, str, Any], None]] = {
            Event: s.on_event, Rumor: s.on_rumor, Feedback: s.on_feedback,
            Digest: self.repair.on_digest, Request: self.repair.on_request,
            Repair: self.repair.on_repair, Interest: self._on_interest,
        }

    # -- application calls ---------------------------------------------------------------------

    def start(self, now: float, seeds: Sequence[str]) -> None:
        """Begin: join through ``seeds`` (hyparview), or take them as the membership (full)."""
        if self.started:
            raise LocalProtocolError("the node is already started")
        self.started = True
        self._phase = 0.0 if self.config.aligned_rounds \
            else self.rng.uniform(0, self.config.round_interval)
        self.peers.start(now, seeds)
        self._wake(now)
        self._schedule_adverts(now)

    def subscribe(self, now: float, topic: str, filter_text: str, sub_id: int,
                  expiry: float | None = None, group: str | None = None,
                  replay_last: int | None = None, replay_since: int | None = None) -> None:
        """Start local subscription ``sub_id`` (a handle the caller chose, unique on this
        node) to the events of ``topic`` that match ``filter_text`` (``""``: all of them).
        ``expiry``: seconds of life from ``now`` (None: until unsubscribed). Groups and
        replay are not served here (``capabilities``): asking for them is a ValueError.

        Raises ``matching.FilterSyntaxError`` for a bad filter, ``ValueError`` for a bad
        topic or expiry, ``DuplicateSubscriptionError`` for a handle in use.
        """
        if group is not None:
            raise ValueError("groups are not served in unstructured mode")
        if replay_last is not None or replay_since is not None:
            raise ValueError("replay is not served in unstructured mode: no root retains "
                             "a topic's events there")
        check_topic(topic)
        sub = Subscription(sub_id, topic, filter_text, parse(filter_text),
                           expiry_time(now, expiry))
        self.subs.add(sub)
        self.trace("subscribe", topic=topic, sub=sub_id, filter=filter_text,
                   expiry=None if expiry is None else float(expiry))
        self._schedule_expiry(sub)
        self._local_interest_changed(now, topic)

    def unsubscribe(self, now: float, sub_id: int, reason: str = "client") -> None:
        """End a local subscription; ``reason`` is ``client``, ``expired`` or ``disconnect``.
        Raises ``UnknownSubscriptionError``."""
        check_unsubscribe_reason(reason)
        sub = self.subs.remove(sub_id)
        self.timers.cancel(("expire", sub_id))
        self.trace("unsubscribe", topic=sub.topic, sub=sub_id, reason=reason)
        self._local_interest_changed(now, sub.topic)

    def renew(self, now: float, sub_id: int, expiry: float | None) -> None:
        """Give a subscription ``expiry`` more seconds from ``now`` (None: no end).
        Raises ``UnknownSubscriptionError``."""
        sub = self.subs.get(sub_id)
        sub.expires_at = expiry_time(now, expiry)
        self._schedule_expiry(sub)

    def publish(self, now: float, topic: str, attrs: Mapping[str, AttrValue],
                payload: bytes = b"", msg_id: str | None = None,
                ts: float | None = None, reliable: bool = True,
                ttl: float | None = None) -> str:
        """Publish an event; returns its msg_id (``msg_id`` if given, else a fresh random
        one; publishing a msg_id this node holds again does nothing). ``ts``: publish time
        to carry (default ``now``). ``reliable`` changes nothing here: with no root, the
        ``published`` notice comes once this node holds the event and spreads it, either
        way. ``ttl`` is not served (``capabilities.durable``). Raises ``ValueError`` for
        bad input, ``NotStartedError`` before ``start``."""
        if not self.started:
            raise NotStartedError("start the node before publishing")
        if ttl is not None:
            raise ValueError("ttl is not served in unstructured mode")
        if msg_id is None:
            msg_id = format(self.rng.getrandbits(128), "032x")
        body = EventBody(topic, msg_id, dict(attrs), bytes(payload), self.node_hex,
                         now if ts is None else float(ts))
        if msg_id not in self.store:
            self.trace("publish", topic=topic, msg_id=msg_id, attrs=body.attrs,
                       size=len(body.payload))
            held = HeldEvent(body, 0, now)
            self._hold(held)
            self.strategy.publish(now, held)
            self._wake(now)
        self.notice("published", topic=topic, msg_id=msg_id, seq=None)
        return msg_id

    def publish_many(self, now: float, events: Sequence[NewEvent]) -> list[PublishOutcome]:
        """``events`` as :meth:`publish` takes them, one by one."""
        return publish_each(self, now, events)

    def status(self) -> dict[str, Any]:
        """Node id, strategy, view, subscriptions and held events (API ``status``)."""
        return {"node": self.node_hex, "address": self.address, "mode": "unstructured",
                "strategy": self.config.strategy.name, "peers": self.peers.status(),
                "subscriptions": len(self.subs), "topics": self.subs.topics(),
                "events_held": len(self.store)}

    # -- driver inputs ---------------------------------------------------------------------------

    def on_synced(self, now: float, through: int) -> None:
        """Nothing to wait for: the unstructured mode persists nothing (no root retains
        a topic's events there)."""

    def on_storage_failed(self, now: float, through: int, reason: str) -> None:
        """Never called: nothing is persisted."""

    def on_message(self, now: float, src: str, msg: Message) -> None:
        self.peers.note_traffic(src)
        handler = self._handlers.get(type(msg))
        if handler is not None:
            handler(now, src, msg)
            self._wake(now)
        elif self.peers.on_message(now, src, msg):
            self._schedule_adverts(now)

    def on_timer(self, now: float) -> None:
        for name in self.timers.pop_due(now):
            if name == ROUND:
                self._round(now)
            elif name == EXPIRE:
                self._expire_events(now)
            elif name == ADVERTS:
                self._send_adverts()
            elif isinstance(name, tuple) and name[0] == "expire":
                self._expire(now, name[1])

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        self.peers.on_unreachable(now, dest)
        self.strategy.on_unreachable(now, dest, msg)
        self._schedule_adverts(now)

    def next_deadline(self) -> float | None:
        return self.timers.next_deadline()

    # -- what strategies use -------------------------------------------------------------------

    def send(self, dest: str, msg: Message) -> None:
        self.peers.note_traffic(dest)
        super().send(dest, msg)

    def accept(self, now: float, src: str, body: EventBody, hop: int,
               guided: bool) -> tuple[HeldEvent, bool]:
        """Take in a copy of an event from ``src``: trace it; a first copy is held and
        delivered locally. Returns the held event and whether this copy was the first."""
        held = self.store.get(body.msg_id)
        self._effects.append(Trace("recv", {
            "topic": body.topic, "msg_id": body.msg_id, "from": node_hex(src, self.bits),
            "hop": hop, "dup": held is not None}))
        if held is not None:
            return held, False
        held = HeldEvent(body, hop, now, guided, src)
        self._hold(held)
        return held, True

    def routed(self, held: HeldEvent) -> frozenset[str]:
        """With selective routing, the neighbours the interest routes lead an event to
        from here (:meth:`InterestRouting.route` for the whole radius, given where it
        came from): digests offer it only to them."""
        interest = self.interest
        assert interest is not None
        if held.routed_epoch != interest.epoch:
            body = held.body
            held.routed = frozenset(interest.route(
                self.peers.neighbours(), body.topic, body.attrs, interest.config.radius - 1,
                held.came_from))
            held.routed_epoch = interest.epoch
        return held.routed

    def choose(self, body: EventBody, guided: bool, count: int | None,
               exclude: Collection[str], keep_going: bool = False, budget: int | None = None,
               came_from: str | None = None) -> tuple[list[str], bool]:
        """Neighbours to send an event to (``count`` random ones, None: all) and whether
        that copy is *guided* (sent along links whose interest matches).

        Without selective routing: any neighbours. With it and a hop ``budget`` (the hops
        a copy may still make after the neighbour; flooding and pbcast): the neighbours
        the interest routes lead to (:meth:`InterestRouting.route`), all of them (they
        replace the random choice of pbcast's first phase), none when no interest within
        reach may match; ``came_from`` is the neighbour the event came from.

        With selective routing and no budget: only neighbours through which the event
        may match; when there are none, a guided event has reached the end of its
        interest path and stops (unless ``keep_going``), an unguided one goes where the
        strategy would send it anyway: an uninterested region is crossed, not cut off.
        """
        if self.interest is None:
            if count is None:
                return [p for p in self.peers.neighbours() if p not in exclude], False
            return self.peers.sample(count, exclude), False
        candidates = [p for p in self.peers.neighbours() if p not in exclude]
        if budget is not None:
            return self.interest.route(candidates, body.topic, body.attrs, budget,
                                       came_from), True
        targets = self.interest.narrow(candidates, body.topic, body.attrs)
        if targets:
            guided = True
        elif guided and not keep_going:
            return [], True
        else:
            targets, guided = candidates, False
        if count is not None and count < len(targets):
            targets = self.rng.sample(targets, count)
        return targets, guided

    def trace_forward(self, dest: str, body: EventBody, hop: int) -> None:
        self._effects.append(Trace("forward", {
            "topic": body.topic, "msg_id": body.msg_id, "to": node_hex(dest, self.bits),
            "hop": hop}))

    def trace_drop(self, body: EventBody, reason: str) -> None:
        self.trace("drop", topic=body.topic, msg_id=body.msg_id, reason=reason)

    def trace_repair(self, topic: str, msg_id: str, src: str) -> None:
        self._effects.append(Trace("repair", {
            "topic": topic, "msg_id": msg_id, "from": node_hex(src, self.bits),
            "kind": "digest"}))

    # -- internals -------------------------------------------------------------------------------

    def _hold(self, held: HeldEvent) -> None:
        forgotten = self.store.add(held)
        if forgotten:
            self.strategy.forget(forgotten)
        if EXPIRE not in self.timers:
            self.timers.set(EXPIRE, held.first_seen + self.config.memory)
        body = held.body
        for sub in self.subs.matching(body.topic, body.attrs):
            self.trace("deliver", topic=body.topic, msg_id=body.msg_id, sub=sub.sub_id,
                       hop=held.hop, seq=None, dup=False)
            self.deliver(sub.sub_id, DeliveredEvent(body.topic, body.msg_id, None, body.attrs,
                                                    body.payload, body.publisher, body.ts,
                                                    held.hop))

    def _wake(self, now: float) -> None:
        """Schedule the next round if there is periodic work and none is scheduled."""
        if ROUND in self.timers or not (self.peers.wants_rounds or self.strategy.wants_rounds()):
            return
        interval = self.config.round_interval
        due = self._phase + (math.floor((now - self._phase) / interval) + 1) * interval
        # Rounding can put ``due`` on ``now`` itself (when ``now`` is a round time):
        # the next round is then one interval later, never at once again.
        if due <= now:
            due += interval
        self.timers.set(ROUND, due)

    def _round(self, now: float) -> None:
        self.repair.forget_asked(now)
        self.peers.on_round(now)
        self.strategy.on_round(now)
        interest = self.interest
        if interest is not None and \
                now - self._adverts_refreshed >= interest.config.refresh_interval:
            self._adverts_refreshed = now
            interest.resend()
        self._wake(now)
        self._schedule_adverts(now)

    def _expire_events(self, now: float) -> None:
        forgotten = self.store.expire(now)
        if forgotten:
            self.strategy.forget(forgotten)
        oldest = self.store.oldest()
        if oldest is not None:
            self.timers.set(EXPIRE, oldest.first_seen + self.config.memory)

    def _neighbour_changed(self, peer: str, added: bool) -> None:
        if self.interest is not None:
            self.interest.neighbour_changed(peer, added)

    def _on_interest(self, now: float, src: str, msg: Interest) -> None:
        # Adverts from a peer that is not (or no longer) a neighbour are stale: ignored.
        if self.interest is not None and src in self.peers.neighbours():
            self.interest.heard_from(src, msg)
            self._schedule_adverts(now)

    def _local_interest_changed(self, now: float, topic: str) -> None:
        if self.interest is not None:
            self.interest.set_local(topic, self.subs.summary(
                topic, self.interest.config.max_filters))
            self._schedule_adverts(now)

    def _schedule_adverts(self, now: float) -> None:
        if self.interest is not None and self.interest.dirty and self.started:
            self.timers.set_if_absent(ADVERTS, now + self.interest.config.advert_delay)

    def _send_adverts(self) -> None:
        if self.interest is None:
            return
        for peer, advert in self.interest.adverts(self.peers.neighbours()):
            self.send(peer, advert)

    def _schedule_expiry(self, sub: Subscription) -> None:
        if sub.expires_at is None:
            self.timers.cancel(("expire", sub.sub_id))
        else:
            self.timers.set(("expire", sub.sub_id), sub.expires_at)

    def _expire(self, now: float, sub_id: int) -> None:
        if sub_id in self.subs:
            self.notice("expired", sub=sub_id)
            self.unsubscribe(now, sub_id, reason="expired")

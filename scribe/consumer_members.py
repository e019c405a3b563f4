"""Durable consumers on a member's node: the local subscriptions attached to a durable
consumer (scribe.consumer_root), their lease, their acknowledgements and fetches.

Each attached subscription sends :class:`ConsumerAttach` toward its topic's key, and
again every heartbeat interval (the lease the root keeps); the root's
:class:`ConsumerAttached` says where it is, so acknowledgements and fetches go straight
there (toward the key again when that root cannot be reached). Events arrive in
:class:`ConsumerDeliver` messages: pushed ones are handed to the subscription as they
come, with their attempt; a fetch's answer is handed over whole in a ``fetched`` notice
(the API answers the fetch with it).
"""

from __future__ import annotations

from dataclasses import dataclass

from chord.kbr import NodeRef
from overlay.core.limits import batches
from overlay.core.messages import Message
from overlay.core.pubsub import DeliveredEvent, UnknownSubscriptionError
from scribe.consumer_messages import (
    MAX_ACK_IDS,
    ConsumerAck,
    ConsumerAttach,
    ConsumerAttached,
    ConsumerDeliver,
    ConsumerDetach,
    ConsumerFetch,
    ConsumerQuery,
    ConsumerReport,
)
from scribe.consumer_values import ConsumerConfig
from scribe.state import ScribeState


@dataclass
class DurableSub:
    """A local subscription attached to durable consumer ``name`` of ``topic``."""

    topic: str
    name: str
    config: ConsumerConfig
    filter_text: str
    #: The consumer's root as it last said (None: route toward the key).
    root: NodeRef | None = None
    #: The root refused the attachment: why.
    refused: str | None = None


class DurableMembers:
    def __init__(self, state: ScribeState) -> None:
        self.s = state
        self.subs: dict[int, DurableSub] = {}

    def __bool__(self) -> bool:
        return bool(self.subs)

    def attach(self, now: float, sub_id: int, topic: str, name: str, config: ConsumerConfig,
               filter_text: str) -> None:
        self.subs[sub_id] = DurableSub(topic, name, config, filter_text)
        self._renew(now, sub_id)
        self.s.wake(now)

    def detach(self, now: float, sub_id: int) -> None:
        durable = self.subs.pop(sub_id, None)
        if durable is not None:
            self._to_root(now, durable, ConsumerDetach(durable.topic, durable.name, self.s.me,
                                                       sub_id))

    def ack(self, now: float, sub_id: int, op: str, msg_ids: tuple[str, ...],
            delay: float = 0.0) -> None:
        """``op`` on ``msg_ids``, in as many messages as their bytes need. Raises
        UnknownSubscriptionError, ValueError (a consumer without ``ack``)."""
        durable = self.get(sub_id)
        if not durable.config.ack:
            raise ValueError(f"consumer {durable.name!r} does not take acknowledgements: "
                             "it was made with ack false")
        for run in batches(msg_ids, _msg_id_cost, self.s.config.sizes.batch_bytes, MAX_ACK_IDS):
            self._to_root(now, durable, ConsumerAck(durable.topic, durable.name, self.s.me,
                                                    sub_id, op, tuple(run), delay))

    def fetch(self, now: float, sub_id: int, fetch_id: int, count: int, wait: float) -> None:
        """Raises UnknownSubscriptionError, ValueError (not a pull consumer)."""
        durable = self.get(sub_id)
        if not durable.config.pull:
            raise ValueError(f"consumer {durable.name!r} pushes its events: fetch is for "
                             "pull consumers")
        self._to_root(now, durable, ConsumerFetch(durable.topic, durable.name, self.s.me,
                                                  sub_id, fetch_id, count, wait))

    def query(self, now: float, query_id: int, topic: str, name: str | None,
              delete: bool) -> None:
        """Ask ``topic``'s root about its consumers; a ``consumers`` notice answers."""
        self.s.host.route(now, self.s.mid(topic),
                          ConsumerQuery(topic, self.s.me, query_id, name, delete))

    def on_report(self, now: float, msg: ConsumerReport) -> None:
        self.s.host.notice("consumers", query_id=msg.query_id, topic=msg.topic,
                           consumers=[dict(item) for item in msg.consumers], more=msg.more)

    def get(self, sub_id: int) -> DurableSub:
        durable = self.subs.get(sub_id)
        if durable is None:
            raise UnknownSubscriptionError(sub_id)
        return durable

    def tick(self, now: float) -> None:
        """Renew every attachment's lease."""
        for sub_id in list(self.subs):
            self._renew(now, sub_id)

    def on_attached(self, now: float, msg: ConsumerAttached) -> None:
        durable = self.subs.get(msg.sub)
        if durable is None or (durable.topic, durable.name) != (msg.topic, msg.name):
            return
        durable.root = msg.root
        durable.refused = msg.error
        if msg.error is None:
            # In effect: events of the consumer may come from now on (the API's
            # subscribe reply waits for this, as for a tree's ``subscribed``).
            self.s.host.notice("subscribed", topic=msg.topic, sub=msg.sub)
        else:
            del self.subs[msg.sub]
            self.s.host.notice("consumer_refused", sub=msg.sub, code=msg.code,
                               error=msg.error)

    def on_deliver(self, now: float, msg: ConsumerDeliver) -> None:
        durable = self.subs.get(msg.sub)
        if durable is None or (durable.topic, durable.name) != (msg.topic, msg.name):
            return  # detached meanwhile: the root gives them to others after ack_wait
        events = [DeliveredEvent(b.topic, b.msg_id, b.seq, b.attrs, b.payload, b.publisher,
                                 b.ts, 1, attempt)
                  for b, attempt in zip(msg.events, msg.attempts, strict=True)]
        if msg.fetch_id is not None:
            self.s.host.notice("fetched", sub=msg.sub, fetch_id=msg.fetch_id, events=events)
            return
        for event in events:
            self.s.trace("deliver", topic=event.topic, msg_id=event.msg_id, sub=msg.sub,
                         hop=1, seq=event.seq, dup=event.attempt > 1, durable=durable.name)
            self.s.host.deliver_local(msg.sub, event)

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        """The root cannot be reached: forget it, and send ``msg`` toward the key."""
        for durable in self.subs.values():
            if durable.root is not None and durable.root.addr == dest:
                durable.root = None
        topic = getattr(msg, "topic", None)
        if isinstance(topic, str):
            self.s.host.route(now, self.s.mid(topic), msg)

    def _renew(self, now: float, sub_id: int) -> None:
        durable = self.subs[sub_id]
        if durable.refused is not None:
            return
        self._to_root(now, durable, ConsumerAttach(
            durable.topic, durable.name, self.s.me, sub_id, tuple(durable.config.to_wire()),
            durable.filter_text))

    def _to_root(self, now: float, durable: DurableSub, msg: Message) -> None:
        if durable.root is not None:
            self.s.send(durable.root, msg)
        else:
            self.s.host.route(now, self.s.mid(durable.topic), msg)


def _msg_id_cost(msg_id: str) -> int:
    """Bytes a msg_id takes in an acknowledgement (its text and CBOR header)."""
    return len(msg_id) + 2


__all__ = ["DurableMembers", "DurableSub"]

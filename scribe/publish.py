"""Publishing: the publisher's node sends the event to the topic's root, which numbers it.

The first event of a topic is routed through the DHT toward the topic's key; the root's
answer (:class:`PublishAck`) tells the publisher's node the root's address, and later
events go there in one hop. A cached root that cannot be reached is forgotten and the
event routed again; a cached node that is no longer the root routes it on itself.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace

from chord.kbr import NodeRef
from scribe.dissemination import Dissemination
from scribe.membership import Membership
from scribe.messages import AttrValue, EventBody, Publish, PublishAck, check_topic
from scribe.state import ScribeState


class Publishing:
    def __init__(self, state: ScribeState, membership: Membership,
                 dissemination: Dissemination) -> None:
        self.s = state
        self.membership = membership
        self.dissemination = dissemination
        #: Topic -> its root as last acknowledged, least recently used first.
        self.roots: OrderedDict[str, NodeRef] = OrderedDict()

    def publish(self, now: float, topic: str, attrs: Mapping[str, AttrValue],
                payload: bytes = b"", msg_id: str | None = None,
                ts: float | None = None) -> str:
        """Accept an event from the local application; returns its msg_id."""
        s = self.s
        check_topic(topic)
        if msg_id is None:
            msg_id = format(s.host.rng.getrandbits(128), "032x")
        body = EventBody(topic, msg_id, None, dict(attrs), bytes(payload), s.me_hex,
                         now if ts is None else float(ts))
        s.trace("publish", topic=topic, msg_id=msg_id, attrs=body.attrs, size=len(payload))
        self._toward_root(now, Publish(body, s.me))
        return msg_id

    def _toward_root(self, now: float, msg: Publish) -> None:
        s = self.s
        root = self.roots.get(msg.body.topic)
        if root is None or root.id == s.me.id:
            s.host.route(now, s.mid(msg.body.topic), msg)
        else:
            s.send(root, msg)

    def at_root(self, now: float, msg: Publish) -> None:
        """``deliver`` up-call: this node is responsible for the topic's key."""
        s = self.s
        topic = msg.body.topic
        self.membership.claim_root(now, topic)
        seq = s.seq.get(topic, 0) + 1
        s.seq[topic] = seq
        body = replace(msg.body, seq=seq)
        if msg.origin.id == s.me.id:
            s.host.notice("published", topic=topic, msg_id=body.msg_id, seq=seq)
        else:
            s.send(msg.origin, PublishAck(topic, body.msg_id, seq, s.me))
        self.dissemination.from_root(now, body)

    def on_direct(self, now: float, msg: Publish) -> None:
        """An event sent straight to this node as the topic's cached root."""
        s = self.s
        key = s.mid(msg.body.topic)
        if s.host.is_responsible(key):
            self.at_root(now, msg)
        else:
            s.host.route(now, key, msg)

    def on_ack(self, now: float, ack: PublishAck) -> None:
        s = self.s
        self.roots[ack.topic] = ack.root
        self.roots.move_to_end(ack.topic)
        while len(self.roots) > s.config.root_cache_size:
            self.roots.popitem(last=False)
        s.host.notice("published", topic=ack.topic, msg_id=ack.msg_id, seq=ack.seq)

    def on_unreachable(self, now: float, msg: Publish) -> None:
        """The cached root is gone: forget it and route the event through the DHT."""
        self.roots.pop(msg.body.topic, None)
        self.s.host.route(now, self.s.mid(msg.body.topic), msg)

"""Replay: a new subscription first gets what the topic's root still retains.

``subscribe(..., replay_last=N)`` or ``replay_since=S`` (API.md ``replay``) holds the
subscription's live events back and, once the subscription is in effect (the tree
carries its filter from the root down: every event numbered from then on reaches it),
sends a :class:`ReplayRequest` toward the topic's key. Asked any sooner, the root's
answer could end before the first live event the subscription gets, and the events
between would reach it neither way. The root answers with the matching retained events
up to what it has sent down the tree (:class:`ReplayFill`); the subscription gets them
in seq order, then the live events that came meanwhile, none twice (each subscription
remembers the last seq it was given). A request without an answer is sent again every
two heartbeat intervals, and given up ``publish_give_up`` after the subscribe (the live
events then flow on), also when the subscription never came into effect.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from matching import FilterSyntaxError, parse
from scribe.dissemination import Dissemination, HandledEvent
from scribe.messages import ReplayFill, ReplayRequest
from scribe.ordering import Released, RootLog
from scribe.state import ScribeState
from scribe.stream import Retained
from scribe.subscriptions import Subscription
from scribe.wire_records import EventBody, message_runs


@dataclass
class PendingReplay:
    request: ReplayRequest
    first_sent: float
    last_sent: float
    #: Parts of the answers received so far, by (through, parts) of their answer.
    parts: dict[tuple[int, int], dict[int, tuple[EventBody, ...]]] = field(
        default_factory=dict)


class Replays:
    def __init__(self, state: ScribeState, dissemination: Dissemination, root_log: RootLog,
                 released: Released) -> None:
        self.s = state
        self.dissemination = dissemination
        self.root_log = root_log
        self.released = released
        self.pending: dict[int, PendingReplay] = {}
        #: Subscriptions waiting to be in effect before they ask: sub -> its request, and
        #: since when.
        self.held: dict[int, tuple[ReplayRequest, float]] = {}

    def __bool__(self) -> bool:
        return bool(self.pending or self.held)

    def hold(self, now: float, sub: Subscription, last: int | None,
             since_seq: int | None) -> None:
        """``sub`` wants a replay: hold its live events back until it has had it."""
        sub.replay_queue = []
        self.held[sub.sub_id] = (ReplayRequest(sub.topic, self.s.me, sub.sub_id,
                                               sub.filter_text, last, since_seq), now)
        self.s.wake(now)

    def in_effect(self, now: float, sub_id: int) -> None:
        """Subscription ``sub_id`` is in effect: ask the root for its replay, if it wants
        one."""
        held = self.held.pop(sub_id, None)
        if held is None or sub_id not in self.s.subs:
            return
        request, since = held
        self.pending[sub_id] = PendingReplay(request, since, now)
        self.s.host.route(now, self.s.mid(request.topic), request)
        self.s.wake(now)

    def tick(self, now: float) -> None:
        s = self.s
        for sub_id, (_, since) in list(self.held.items()):
            if sub_id not in s.subs:
                del self.held[sub_id]
            elif now - since >= s.config.publish_give_up:  # never in effect: live flows
                del self.held[sub_id]
                self._release(now, s.subs.get(sub_id), ())
        for sub_id, pending in list(self.pending.items()):
            if sub_id not in s.subs:
                del self.pending[sub_id]
            elif now - pending.first_sent >= s.config.publish_give_up:
                self._finish(now, s.subs.get(sub_id), ())
            elif now - pending.last_sent >= 2 * s.config.heartbeat_interval:
                pending.last_sent = now
                s.host.route(now, s.mid(pending.request.topic), pending.request)

    def at_root(self, now: float, msg: ReplayRequest) -> None:
        """``deliver`` up-call: answer from the retained events, if this is the root."""
        s = self.s
        if msg.topic in s.recovering:
            return  # gathering what members and replicas hold: the requester asks again
        log = self.root_log(msg.topic)
        if log is None:
            if msg.topic not in s.numbering:
                return  # not the root (yet): the requester asks again
            log = Retained()
        try:
            wanted = parse(msg.filter)
        except FilterSyntaxError:
            return  # checked where it was subscribed: a peer sent garbage
        through = self.released(msg.topic)
        first = 0 if msg.since_seq is None else msg.since_seq - 1
        matching = [body for body in log.between(first, through, len(log))
                    if wanted.matches(body.attrs)]
        if msg.last is not None:
            matching = matching[-msg.last:] if msg.last else []
        runs = message_runs(matching, s.config.sizes)
        for part, run in enumerate(runs):
            s.send(msg.requester, ReplayFill(msg.topic, msg.sub, s.me, through, tuple(run),
                                             part, len(runs)))

    def on_fill(self, now: float, fill: ReplayFill) -> None:
        s = self.s
        pending = self.pending.get(fill.sub)
        if pending is None or fill.sub not in s.subs:
            return
        # Parts of one answer share its ``through``; an answer to a repeated request may
        # be cut differently, so parts are never mixed across answers.
        parts = pending.parts.setdefault((fill.through, fill.parts), {})
        parts[fill.part] = fill.events
        if len(parts) == fill.parts:
            self._finish(now, s.subs.get(fill.sub),
                         tuple(body for part in sorted(parts) for body in parts[part]))

    def _finish(self, now: float, sub: Subscription, events: tuple[EventBody, ...]) -> None:
        del self.pending[sub.sub_id]
        self._release(now, sub, events)

    def _release(self, now: float, sub: Subscription, events: tuple[EventBody, ...]) -> None:
        """Deliver the replayed ``events``, then the live ones held meanwhile."""
        tree = self.s.trees.get(sub.topic)
        hop = tree.depth if tree is not None and tree.depth is not None else 0
        queued = sub.replay_queue or []
        sub.replay_queue = None
        for body in events:
            self.dissemination.deliver_to(now, sub, HandledEvent(body, hop), replay=True)
        for handled in sorted(queued, key=lambda h: h.body.seq or 0):
            self.dissemination.deliver_to(now, sub, handled)


__all__ = ["PendingReplay", "Replays"]

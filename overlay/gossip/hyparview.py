"""HyParView peer sampling (Leitão, Pereira and Rodrigues, DSN 2007), sans-IO.

Each node keeps a small symmetric *active* view, its neighbours (events travel along
these links), and a larger *passive* view of backup peers, refreshed every round by a
shuffle: a random walk that carries a sample of both views and comes back with a sample
of the passive view of the node where it ends.

- Join: the newcomer links to a seed; the seed announces it with random walks
  (``ForwardJoin``) to its other neighbours; where a walk ends the node links to the
  newcomer, and at step ``passive_walk`` the newcomer is also noted as a backup.
- Healing: a neighbour reported unreachable (every quiet link is tested by a heartbeat
  each round) is dropped, and a random backup is asked to link; the request has high
  priority, so it cannot be refused, when no neighbour is left. A node with empty views
  joins again through its seeds.
- A full active view makes room by disconnecting a random neighbour, which becomes a
  backup on both sides.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence
from typing import Any

from overlay.core.messages import Message
from overlay.gossip.config import HyParViewConfig
from overlay.gossip.messages import (
    Disconnect,
    ForwardJoin,
    Heartbeat,
    Join,
    Link,
    NeighbourReply,
    NeighbourRequest,
    Shuffle,
    ShuffleReply,
)
from overlay.gossip.sampling import ChangeFn, SendFn, sample_from


class HyParView:
    wants_rounds = True

    def __init__(self, address: str, rng: random.Random, config: HyParViewConfig,
                 send: SendFn, changed: ChangeFn) -> None:
        self.address = address
        self.rng = rng
        self.config = config
        self._send = send
        self._changed = changed
        # Dicts as insertion-ordered sets: random choices stay deterministic for a seed.
        self.active: dict[str, None] = {}
        self.passive: dict[str, None] = {}
        self.seeds: list[str] = []
        #: Neighbour requests awaiting an answer: address -> time it counts as refused.
        self._requests: dict[str, float] = {}
        #: Backups that refused a request since the last round (not asked again before).
        self._refused: set[str] = set()
        #: Neighbours something was sent to or heard from since the last round: no
        #: heartbeat needed (one live direction per round tests a link).
        self._busy: set[str] = set()
        #: Passive entries sent in this node's last shuffle (replaced first by the reply).
        self._shuffled_out: tuple[str, ...] = ()
        self._handlers: dict[type[Message], Callable[[float, str, Any], None]] = {
            Join: self._on_join, ForwardJoin: self._on_forward_join, Link: self._on_link,
            NeighbourRequest: self._on_neighbour_request,
            NeighbourReply: self._on_neighbour_reply, Disconnect: self._on_disconnect,
            Shuffle: self._on_shuffle, ShuffleReply: self._on_shuffle_reply,
            Heartbeat: self._on_heartbeat,
        }

    # -- the PeerSampler interface ---------------------------------------------------------

    def start(self, now: float, seeds: Sequence[str]) -> None:
        self.seeds = [seed for seed in seeds if seed != self.address]
        self._join()

    def neighbours(self) -> list[str]:
        return list(self.active)

    def sample(self, count: int, exclude: Collection[str] = ()) -> list[str]:
        return sample_from(self.rng, list(self.active), count, exclude)

    def on_round(self, now: float) -> None:
        for peer, deadline in list(self._requests.items()):
            if deadline <= now:
                # No answer: most likely gone; do not keep it as a backup.
                del self._requests[peer]
                self.passive.pop(peer, None)
        self._refused.clear()
        if not self.active and not self.passive and not self._requests:
            self._join()
        self._fill(now)
        self._shuffle()
        for peer in self.active:
            if peer not in self._busy:
                self._send(peer, Heartbeat())
        self._busy.clear()

    def on_message(self, now: float, src: str, msg: Message) -> bool:
        handler = self._handlers.get(type(msg))
        if handler is None:
            return False
        handler(now, src, msg)
        return True

    def on_unreachable(self, now: float, dest: str) -> None:
        self.passive.pop(dest, None)
        was_requested = self._requests.pop(dest, None) is not None
        if dest in self.active:
            del self.active[dest]
            self._changed(dest, False)
        elif not was_requested:
            return
        self._fill(now)

    def note_traffic(self, peer: str) -> None:
        self._busy.add(peer)

    def status(self) -> dict[str, Any]:
        return {"view": "hyparview", "active": list(self.active), "passive": len(self.passive)}

    # -- handlers ----------------------------------------------------------------------------

    def _on_join(self, now: float, src: str, msg: Join) -> None:
        self._add_active(src)
        for peer in self.active:
            if peer != src:
                self._send(peer, ForwardJoin(src, self.config.active_walk))

    def _on_forward_join(self, now: float, src: str, msg: ForwardJoin) -> None:
        joiner = msg.joiner
        if joiner == self.address:
            return
        onward = [peer for peer in self.active if peer not in (src, joiner)]
        if msg.ttl == 0 or len(self.active) <= 1 or not onward:
            if joiner not in self.active:
                self._add_active(joiner)
                self._send(joiner, Link())
            return
        if msg.ttl == self.config.passive_walk:
            self._add_passive(joiner)
        self._send(self.rng.choice(onward), ForwardJoin(joiner, msg.ttl - 1))

    def _on_link(self, now: float, src: str, msg: Link) -> None:
        self._add_active(src)

    def _on_neighbour_request(self, now: float, src: str, msg: NeighbourRequest) -> None:
        accept = msg.high_priority or src in self.active or \
            len(self.active) < self.config.active_size
        if accept:
            self._add_active(src)
        self._send(src, NeighbourReply(accept))

    def _on_neighbour_reply(self, now: float, src: str, msg: NeighbourReply) -> None:
        if self._requests.pop(src, None) is None:
            return  # an answer that came after its time-out
        if msg.accepted:
            self._add_active(src)
        else:
            self._refused.add(src)
            self._fill(now)

    def _on_disconnect(self, now: float, src: str, msg: Disconnect) -> None:
        if src in self.active:
            del self.active[src]
            self._changed(src, False)
            self._add_passive(src)
            self._fill(now)

    def _on_shuffle(self, now: float, src: str, msg: Shuffle) -> None:
        if msg.origin == self.address:
            return
        onward = [peer for peer in self.active if peer not in (src, msg.origin)]
        if msg.ttl > 1 and onward:
            self._send(self.rng.choice(onward), Shuffle(msg.origin, msg.peers, msg.ttl - 1))
            return
        reply = tuple(sample_from(self.rng, list(self.passive), len(msg.peers), ()))
        self._send(msg.origin, ShuffleReply(reply))
        self._integrate(msg.peers, reply)

    def _on_shuffle_reply(self, now: float, src: str, msg: ShuffleReply) -> None:
        self._integrate(msg.peers, self._shuffled_out)

    def _on_heartbeat(self, now: float, src: str, msg: Heartbeat) -> None:
        if src in self.active:
            return
        # The sender counts this node as a neighbour: agree if there is room, else say no,
        # so that neither side keeps a one-way link.
        if len(self.active) < self.config.active_size:
            self._add_active(src)
        else:
            self._send(src, Disconnect())

    # -- views -------------------------------------------------------------------------------

    def _join(self) -> None:
        if not self.seeds:
            return
        contact = self.rng.choice(self.seeds)
        # Linked at once: if the seed is dead, on_unreachable drops it and the next round
        # joins through another seed.
        self._add_active(contact)
        self._send(contact, Join())

    def _add_active(self, peer: str) -> None:
        if peer == self.address or peer in self.active:
            return
        if len(self.active) >= self.config.active_size:
            victim = self.rng.choice(list(self.active))
            del self.active[victim]
            self._changed(victim, False)
            self._send(victim, Disconnect())
            self._add_passive(victim)
        self.passive.pop(peer, None)
        self.active[peer] = None
        self._changed(peer, True)

    def _add_passive(self, peer: str, replace_first: Collection[str] = ()) -> None:
        if peer == self.address or peer in self.active or peer in self.passive:
            return
        if len(self.passive) >= self.config.passive_size:
            preferred = [p for p in replace_first if p in self.passive]
            victim = self.rng.choice(preferred or list(self.passive))
            del self.passive[victim]
        self.passive[peer] = None

    def _integrate(self, peers: Sequence[str], sent: Collection[str]) -> None:
        for peer in peers:
            self._add_passive(peer, sent)

    def _fill(self, now: float) -> None:
        """Ask random backups to link until requests in flight could fill the active view."""
        while len(self.active) + len(self._requests) < self.config.active_size:
            candidates = [p for p in self.passive
                          if p not in self._requests and p not in self._refused]
            if not candidates:
                return
            peer = self.rng.choice(candidates)
            self._requests[peer] = now + self.config.request_timeout
            self._send(peer, NeighbourRequest(high_priority=not self.active))

    def _shuffle(self) -> None:
        if not self.active:
            return
        cfg = self.config
        target = self.rng.choice(list(self.active))
        passive = tuple(sample_from(self.rng, list(self.passive), cfg.shuffle_passive, ()))
        active = sample_from(self.rng, list(self.active), cfg.shuffle_active, (target,))
        self._shuffled_out = passive
        self._send(target, Shuffle(self.address, (self.address, *active, *passive),
                                   cfg.shuffle_walk))

"""Keeping the ring right: join, stabilize/notify, check_predecessor, fix_fingers, and
merge probes after partitions.

A node that takes a closer predecessor tells the one it replaces (``successor_hint``):
that node learns of its new successor at once instead of at its next stabilize. Without
this, concurrent joins leave strands of nodes that the ring absorbs one node per
stabilize period (a 500-node ring joining at 10 nodes/s with 5 s periods kept 26 nodes
outside the ring's cycle a minute after the last join; with it, none are left).

check_predecessor pings only a predecessor that has been silent for longer than its
longest stabilize period: a live predecessor stabilizes with us that often anyway.
Periods are drawn around their configured interval (``config.jitter``) from the node's
random source, so nodes started together drift apart instead of stabilizing in lockstep.
At most one stabilize, one ping and one finger lookup are in flight at a time.

Merge probes (not in the original protocol, which can stay split for ever once a
partition has made each side a consistent ring of its own): every ``merge_interval``
a node picks a remembered former member (one that failed to answer in the last
``remember_for`` seconds), or a seed when it is alone, and looks up its own successor
*through that node*. If the answer lies between us and our successor, the other ring is
reachable again and we adopt it as successor; stabilize and notify then zip the two
rings into one. Either way we notify the node found, so that the other ring learns of
us too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chord.kbr import NodeRef
from chord.messages import GetNeighbours, Neighbours, Notify, Ping, Pong, SuccessorHint
from chord.ring import in_open, node_id

if TYPE_CHECKING:
    from chord.node import ChordNode

STABILIZE = "stabilize"
FIX_FINGERS = "fix_fingers"
CHECK_PREDECESSOR = "check_predecessor"
MERGE = "merge"
JOIN = "join"
PERIODIC = (STABILIZE, FIX_FINGERS, CHECK_PREDECESSOR, MERGE)


class Maintenance:
    def __init__(self, node: ChordNode) -> None:
        self.node = node
        #: Former members worth a merge probe: address -> when to forget it.
        self.remembered: dict[str, float] = {}
        self.next_finger = 0
        #: Just joined: look the fingers up one after another, not one per period.
        self.filling = False
        self._finger_busy = False
        self._stabilize_busy = False
        self._ping_busy = False
        self._join_attempts = 0
        #: This node created the ring after its seeds gave no member (``bootstrap_rounds``):
        #: it keeps probing them, so that a second ring created the same way merges in.
        self.bootstrapped = False

    # -- timers ----------------------------------------------------------------------------

    def start(self, now: float) -> None:
        for name in PERIODIC:
            self._schedule(now, name)

    def stop(self) -> None:
        for name in (*PERIODIC, JOIN):
            self.node.timers.cancel(name)

    def _period(self, name: str) -> float:
        cfg = self.node.config
        interval = {STABILIZE: cfg.stabilize_interval, FIX_FINGERS: cfg.fix_fingers_interval,
                    CHECK_PREDECESSOR: cfg.check_predecessor_interval,
                    MERGE: cfg.merge_interval}[name]
        return interval * (1.0 + cfg.jitter * (2.0 * self.node.rng.random() - 1.0))

    def _schedule(self, now: float, name: str) -> None:
        self.node.timers.set(name, now + self._period(name))

    def on_timer(self, now: float, name: str) -> None:
        if name == JOIN:
            self.try_join(now)
            return
        self._schedule(now, name)
        if not self.node.in_ring:
            return
        if name == STABILIZE:
            self.stabilize(now)
        elif name == FIX_FINGERS:
            if not self._finger_busy:
                self._fix_finger(now)
        elif name == CHECK_PREDECESSOR:
            self.check_predecessor(now)
        elif name == MERGE:
            self.probe_merge(now)

    # -- join ------------------------------------------------------------------------------

    def try_join(self, now: float) -> None:
        """Look our successor up through the next seed; on failure, try again later."""
        node = self.node
        seed = node.seeds[self._join_attempts % len(node.seeds)]
        self._join_attempts += 1
        via = NodeRef(node_id(seed, node.bits), seed)
        node.lookups.start(now, (node.local.id + 1) % node.ring_size,
                           lambda t, owner, _hops: self._joined(t, owner), verify=True, via=via)

    def _joined(self, now: float, successor: NodeRef | None) -> None:
        node = self.node
        if node.joined or node.leaving or node.left:
            return
        if successor is None or successor.addr == node.address:
            if self._may_bootstrap():
                self.bootstrapped = True
                node.became_member(now)
                return
            node.timers.set(JOIN, now + node.config.join_retry)
            return
        node.successors.replace([successor])
        self.filling = True
        node.became_member(now)
        self.stabilize_soon(now)  # at once: learn the new successor's list and notify it
        self._fix_finger(now)

    def _may_bootstrap(self) -> bool:
        """After ``bootstrap_rounds`` failed attempts, at least one through each seed,
        when no seed answered as a member of a ring and one at least answered that it is
        in none (the others unreachable): whether this node's id is the lowest of its own
        and its seeds' (the one node of the set that creates the ring, so that they do
        not each create one). A seed in a ring never lets it: a join that fails past it
        (a lossy network, a ring in repair) is tried again, not replaced by a ring of
        one that would own every key."""
        node = self.node
        rounds = node.config.bootstrap_rounds
        if rounds == 0 or self._join_attempts < max(rounds, len(node.seeds)):
            return False
        answers = [node.lookups.seed_answers.get(seed) for seed in node.seeds]
        return None not in answers and "member" not in answers and \
            "not_in_ring" in answers and \
            node.local.id < min(node_id(seed, node.bits) for seed in node.seeds)

    # -- stabilize and notify ----------------------------------------------------------------

    def stabilize_soon(self, now: float) -> None:
        deadline = self.node.timers.deadline(STABILIZE)
        if deadline is None or deadline > now:
            self.node.timers.set(STABILIZE, now)

    def stabilize(self, now: float) -> None:
        node = self.node
        if self._stabilize_busy:
            return
        successor = node.successors.first()
        if successor is None:
            # Alone: a node that notified us is the rest of the ring (SIGCOMM fig. 7,
            # where n.successor = n and x = n.predecessor).
            if node.pred is not None:
                node.successors.replace([node.pred])
            return
        self._stabilize_busy = True
        node.calls.call(now, successor.addr, GetNeighbours, Neighbours,
                        lambda t, answer: self._stabilized(t, successor, answer),
                        lambda t: self._stabilize_failed(t))

    def _stabilize_failed(self, now: float) -> None:
        self._stabilize_busy = False  # the successor is gone from the tables already

    def _stabilized(self, now: float, successor: NodeRef, answer: Neighbours) -> None:
        self._stabilize_busy = False
        node = self.node
        if node.successors.first() != successor or not node.in_ring:
            return  # the successor changed meanwhile; a new stabilize is due
        x = answer.predecessor
        if x is not None and x.id != node.local.id and \
                in_open(x.id, node.local.id, successor.id, node.ring_size):
            node.successors.replace([x, successor, *answer.successors])
        else:
            node.successors.adopt(successor, answer.successors)
        first = node.successors.first()
        if first is not None and (first != successor or x != node.local):
            # (A successor that already names us its predecessor needs no notify.)
            node.send(first.addr, Notify(node.local))

    def on_get_neighbours(self, now: float, src: str, msg: GetNeighbours) -> None:
        node = self.node
        if node.in_ring:  # a node on its way out stays silent: the asker moves on
            node.send(src, Neighbours(msg.rid, node.pred, tuple(node.successors)))

    def on_notify(self, now: float, src: str, msg: Notify) -> None:
        node = self.node
        candidate = msg.node
        if not node.in_ring or candidate.id == node.local.id or candidate.id >= node.ring_size:
            return
        pred = node.pred
        if pred is None or in_open(candidate.id, pred.id, node.local.id, node.ring_size):
            node.set_predecessor(now, candidate)
            if pred is not None and pred.addr != candidate.addr:
                node.send(pred.addr, SuccessorHint(candidate))
        if not node.successors:
            node.successors.replace([candidate])  # a ring of two forms

    def on_successor_hint(self, now: float, src: str, msg: SuccessorHint) -> None:
        node = self.node
        hint = msg.node
        successor = node.successors.first()
        if node.in_ring and successor is not None and hint.id < node.ring_size and \
                in_open(hint.id, node.local.id, successor.id, node.ring_size):
            node.successors.insert(hint)  # a new successor: the node stabilizes soon

    # -- check_predecessor ---------------------------------------------------------------------

    def check_predecessor(self, now: float) -> None:
        node = self.node
        pred = node.pred
        if pred is None or self._ping_busy:
            return
        cfg = node.config
        if now - node.pred_heard <= cfg.stabilize_interval * (1.0 + cfg.jitter):
            return  # its stabilize reached us within its longest period: it is alive
        self._ping_busy = True
        node.calls.call(now, pred.addr, Ping, Pong, lambda t, _pong: self._pinged(),
                        lambda t: self._pinged())  # a failure already cleared the predecessor

    def _pinged(self) -> None:
        self._ping_busy = False

    def on_ping(self, now: float, src: str, msg: Ping) -> None:
        self.node.send(src, Pong(msg.rid))

    # -- fix_fingers ---------------------------------------------------------------------------

    def _fix_finger(self, now: float) -> None:
        node = self.node
        if not node.in_ring:
            self.filling = False
            return
        i = self.next_finger
        self._finger_busy = True
        node.lookups.start(now, node.fingers.starts[i],
                           lambda t, owner, hops: self._finger_found(t, i, owner, hops),
                           verify=False)

    def _finger_found(self, now: float, i: int, owner: NodeRef | None, hops: int) -> None:
        self._finger_busy = False
        node = self.node
        if owner is None:
            self.filling = False
            return
        following, _ = node.fingers.settle(i, owner)
        self.next_finger = following % node.bits
        # Answers from our own tables cost nothing: go on at once, as while filling.
        if following < node.bits and (self.filling or hops == 0):
            self._fix_finger(now)
        elif following >= node.bits:
            self.filling = False

    # -- merge probes ------------------------------------------------------------------------

    def remember(self, now: float, addr: str) -> None:
        """``addr`` failed us: keep it as a merge candidate (its first failure counts, so
        a node that stays dead is forgotten ``remember_for`` seconds after)."""
        cfg = self.node.config
        if addr in self.remembered or cfg.remember_max == 0:
            return
        if len(self.remembered) >= cfg.remember_max:
            del self.remembered[next(iter(self.remembered))]
        self.remembered[addr] = now + cfg.remember_for

    def probe_merge(self, now: float) -> None:
        node = self.node
        for addr, forget_at in list(self.remembered.items()):
            if forget_at <= now:
                del self.remembered[addr]
        # Seeds are probed only by a node left alone, or one that created its ring for
        # want of a member among them: in a ring, its neighbours' failures fill
        # ``remembered`` when a partition cuts it off.
        alone = not node.successors or self.bootstrapped
        candidates = list(self.remembered) or (node.seeds if alone else [])
        if not candidates:
            return
        addr = candidates[node.rng.randrange(len(candidates))]
        via = NodeRef(node_id(addr, node.bits), addr)
        node.lookups.start(now, (node.local.id + 1) % node.ring_size,
                           lambda t, owner, _hops: self._probed(t, addr, owner),
                           verify=False, via=via)

    def _probed(self, now: float, addr: str, found: NodeRef | None) -> None:
        node = self.node
        if found is None or not node.in_ring:
            return
        self.remembered.pop(addr, None)  # it answered: no longer a stranger
        if found.addr == node.address:
            return
        successor = node.successors.first()
        if successor is None or in_open(found.id, node.local.id, successor.id, node.ring_size):
            node.successors.insert(found)  # a new successor: stabilize soon notifies it
        elif found != successor:
            node.send(found.addr, Notify(node.local))

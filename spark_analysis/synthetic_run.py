"""Synthetic traces, the run: nodes, topic trees, subscriptions and events as records."""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Callable
from pathlib import Path

from spark_analysis.synthetic_model import (
    BAD_FILTERS,
    FILTERS,
    REGIONS,
    SYMBOLS,
    Attrs,
    Spec,
    Sub,
    TraceWriter,
    Tree,
)


class Run:
    def __init__(self, spec: Spec, out: Path) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        width = (spec.id_bits + 3) // 4
        ids = sorted({f"{self.rng.getrandbits(spec.id_bits):0{width}x}" for _ in range(spec.nodes)})
        self.ids = ids
        self.width = width
        self.w = TraceWriter(spec, out, ids, self.rng)
        self.head = f',"run":"{spec.run}"'
        self.topics = [f"topic-{i}" for i in range(spec.topics)]
        self.gossip = set(self.topics[spec.topics - spec.gossip_topics :])
        self.trees: dict[str, Tree] = {}
        self.subs: dict[str, list[Sub]] = {t: [] for t in self.topics}
        self.next_sid = [0] * len(ids)
        self.seq = dict.fromkeys(self.topics, 0)
        self.msg = 0
        self.sched: list[tuple[float, int, Callable[[float], None]]] = []
        self.sched_n = 0

    # -- records ---------------------------------------------------------------------

    def rec(self, ts: float, node: int, ev: str, body: str) -> None:
        self.w.add(
            ts, node, f'{{"ts":{ts:.6f},"node":"{self.ids[node]}","ev":"{ev}"{self.head}{body}}}'
        )

    def lat(self) -> float:
        return self.rng.uniform(0.002, 0.030)

    def at(self, ts: float, action: Callable[[float], None]) -> None:
        self.sched_n += 1
        heapq.heappush(self.sched, (ts, self.sched_n, action))

    def run_due(self, now: float) -> None:
        while self.sched and self.sched[0][0] <= now:
            ts, _, action = heapq.heappop(self.sched)
            action(ts)

    # -- setup -----------------------------------------------------------------------

    def subscribe(self, ts: float, topic: str, node: int) -> None:
        if not self.spec.filters:
            filt, text = 0, ""
        elif self.rng.random() < 0.03:
            filt = -1 - self.rng.randrange(len(BAD_FILTERS))
            text = BAD_FILTERS[-1 - filt]
        else:
            filt = self.rng.randrange(len(FILTERS))
            text = FILTERS[filt][0]
        sid = self.next_sid[node]
        self.next_sid[node] += 1
        s = Sub(node, sid, filt)
        self.subs[topic].append(s)
        expiry = "null" if self.rng.random() < 0.8 else f"{ts + 3600:.6f}"
        self.rec(
            ts,
            node,
            "subscribe",
            f',"topic":"{topic}","sub":{sid},"filter":{json.dumps(text)},"expiry":{expiry}',
        )
        if self.rng.random() < 0.15:  # some subscriptions end during the run
            self.at(ts + self.rng.uniform(5, 60), lambda t: self.unsubscribe(t, topic, s))

    def unsubscribe(self, ts: float, topic: str, s: Sub) -> None:
        if s.active:
            s.active = False
            reason = self.rng.choice(["client", "expired", "disconnect"])
            self.rec(
                ts, s.node, "unsubscribe", f',"topic":"{topic}","sub":{s.sid},"reason":"{reason}"'
            )

    def tree_record(self, ts: float, topic: str, node: int, parent: int | None, role: str) -> None:
        p = "null" if parent is None else f'"{self.ids[parent]}"'
        self.rec(ts, node, "tree", f',"topic":"{topic}","parent":{p},"role":"{role}"')

    def child_record(self, ts: float, topic: str, node: int, child: int, op: str) -> None:
        self.rec(ts, node, "child", f',"topic":"{topic}","child":"{self.ids[child]}","op":"{op}"')

    def build_tree(self, ts: float, topic: str) -> None:
        n = len(self.ids)
        root = self.rng.randrange(n)
        tree = Tree(root, {root: None}, {root: []})
        self.trees[topic] = tree
        self.tree_record(ts, topic, root, None, "root")
        members = [i for i in range(n) if i != root and self.rng.random() < 0.55]
        self.rng.shuffle(members)
        inside = [root]
        for node in members:
            ts += 0.001
            open_ = [m for m in inside if len(tree.children[m]) < 4] or inside
            parent = self.rng.choice(open_)
            tree.parent[node] = parent
            tree.children[node] = []
            tree.children[parent].append(node)
            inside.append(node)
            subscriber = self.rng.random() < 0.8
            self.tree_record(ts, topic, node, parent, "member" if subscriber else "forwarder")
            self.child_record(ts + 0.0005, topic, parent, node, "add")
            if subscriber:
                self.subscribe(ts, topic, node)
        if root not in members and self.rng.random() < 0.7:
            self.subscribe(ts, topic, root)
        outsiders = [i for i in range(n) if i not in tree.parent]
        if len(outsiders) >= 3 and topic == self.topics[0]:
            # Faults the depth computation must survive: a member whose parent is not
            # in the tree, and two members that name each other as parent.
            a, b, c = outsiders[:3]
            ghost = f"{self.rng.getrandbits(self.spec.id_bits):0{self.width}x}"
            self.rec(ts, a, "tree", f',"topic":"{topic}","parent":"{ghost}","role":"forwarder"')
            self.tree_record(ts, topic, b, c, "forwarder")
            self.tree_record(ts, topic, c, b, "forwarder")

    def move(self, ts: float, topic: str) -> None:
        """A member changes parent (a repair), never to one of its own descendants."""
        tree = self.trees[topic]
        depth = self.depths(tree)
        movable = [m for m in tree.parent if tree.parent[m] is not None]
        if not movable:
            return
        node = self.rng.choice(movable)
        options = [m for m in depth if depth[m] < depth[node] and m != tree.parent[node]]
        if not options:
            return
        old, new = tree.parent[node], self.rng.choice(options)
        assert old is not None
        tree.children[old].remove(node)
        tree.children[new].append(node)
        tree.parent[node] = new
        self.rec(
            ts,
            node,
            "repair",
            f',"topic":"{topic}","msg_id":null,"from":"{self.ids[old]}","kind":"rejoin"',
        )
        # Same instant, several records: order within the node's file decides.
        self.tree_record(ts, topic, node, new, "member")
        self.child_record(ts, topic, old, node, "remove")
        self.child_record(ts, topic, new, node, "add")

    def leave(self, ts: float, topic: str) -> None:
        """A leaf forwarder without subscriptions leaves the tree."""
        tree = self.trees[topic]
        subs = {s.node for s in self.subs[topic] if s.active}
        leaves = [
            m
            for m in tree.parent
            if tree.parent[m] is not None and not tree.children[m] and m not in subs
        ]
        if not leaves:
            return
        node = self.rng.choice(leaves)
        parent = tree.parent.pop(node)
        assert parent is not None
        tree.children[parent].remove(node)
        del tree.children[node]
        self.rec(ts, node, "tree_leave", f',"topic":"{topic}"')
        self.child_record(ts + 0.001, topic, parent, node, "remove")

    @staticmethod
    def depths(tree: Tree) -> dict[int, int]:
        out = {tree.root: 0}
        stack = [tree.root]
        while stack:
            n = stack.pop()
            for c in tree.children[n]:
                out[c] = out[n] + 1
                stack.append(c)
        return out

    def setup(self, ts: float) -> float:
        n = len(self.ids)
        for i in range(n):
            self.rec(
                ts + i * 0.001,
                i,
                "node_up",
                f',"addr":"10.0.{i // 250}.{i % 250 + 1}:7000","mode":"structured","version":1',
            )
        for i in range(n):
            self.rec(
                ts + 0.5, i, "ring", f',"succ":"{self.ids[(i + 1) % n]}","pred":"{self.ids[i - 1]}"'
            )
        ts += 1.0
        for topic in self.topics:
            if topic in self.gossip:
                for i in range(n):
                    if self.rng.random() < 0.5:
                        self.subscribe(ts + i * 0.001, topic, i)
            else:
                self.build_tree(ts, topic)
            ts += 1.0
        return ts

    # -- events ----------------------------------------------------------------------

    def attrs(self) -> tuple[Attrs, str]:
        r = self.rng
        a: Attrs = {
            "sym": r.choice(SYMBOLS),
            "price": round(r.uniform(0, 120), 2),
            "qty": r.randint(1, 10),
            "urgent": r.random() < 0.2,
        }
        if r.random() < 0.85:
            a["region"] = r.choice(REGIONS)
        if r.random() < 0.2:
            a["sensor.kind"] = r.choice(["temp", "rh"])
        if r.random() < 0.05:
            a["price"] = float(r.randint(40, 60))  # a float with no fraction: stays a float
        return a, json.dumps(a, separators=(",", ":"))

    def deliver(
        self,
        ts: float,
        topic: str,
        mid: str,
        node: int,
        hop: int,
        attrs: Attrs,
        by_node: dict[int, list[Sub]],
    ) -> None:
        r = self.rng
        for s in by_node.get(node, ()):
            if not s.active:
                if r.random() >= self.spec.p_false * 10:
                    continue
                matches = True
            else:
                matches = s.filt >= 0 and FILTERS[s.filt][1](attrs)
            if not matches:
                if s.filt >= 0 and r.random() < self.spec.p_false:
                    matches = True  # a delivery the filter should have stopped
                else:
                    continue
            if r.random() < self.spec.p_miss:
                continue
            t = ts + r.uniform(0.0001, 0.002)
            self.seq[topic] += 1
            body = (
                f',"topic":"{topic}","msg_id":"{mid}","sub":{s.sid},"hop":{hop},'
                f'"seq":{self.seq[topic]}'
            )
            self.rec(t, node, "deliver", body + ',"dup":false')
            if r.random() < self.spec.p_dup:
                dup = "true" if r.random() < 0.7 else "false"
                self.rec(t + r.uniform(0.001, 0.5), node, "deliver", body + f',"dup":{dup}')

    def event(self, ts: float) -> None:
        r = self.rng
        topic = r.choice(self.topics)
        pub = r.randrange(len(self.ids))
        self.msg += 1
        mid = f"{self.msg:016x}"
        a, text = self.attrs()
        self.rec(
            ts,
            pub,
            "publish",
            f',"topic":"{topic}","msg_id":"{mid}","attrs":{text},"size":{r.randint(16, 900)}',
        )
        by_node: dict[int, list[Sub]] = {}
        for s in self.subs[topic]:
            # An ended subscription is still listed, to receive the odd late (false)
            # delivery of an unsubscribe race.
            by_node.setdefault(s.node, []).append(s)
        if topic in self.gossip:
            self.gossip_event(ts, topic, mid, pub, a, by_node)
        else:
            self.tree_event(ts, topic, mid, pub, a, by_node)

    def send(
        self, ts: float, topic: str, mid: str, src: int, dst: int, hop: int, dup: bool
    ) -> float:
        t = ts + self.lat()
        self.rec(
            ts,
            src,
            "forward",
            f',"topic":"{topic}","msg_id":"{mid}","to":"{self.ids[dst]}","hop":{hop}',
        )
        self.rec(
            t,
            dst,
            "recv",
            f',"topic":"{topic}","msg_id":"{mid}",'
            f'"from":"{self.ids[src]}","hop":{hop},"dup":{"true" if dup else "false"}',
        )
        return t

    def tree_event(
        self, ts: float, topic: str, mid: str, pub: int, a: Attrs, by_node: dict[int, list[Sub]]
    ) -> None:
        r = self.rng
        tree = self.trees[topic]
        root = tree.root
        t = self.send(ts, topic, mid, pub, root, 0, False) if pub != root else ts
        seq = self.seq[topic] + 1
        self.rec(
            t + self.lat(), pub, "publish_ack", f',"topic":"{topic}","msg_id":"{mid}","seq":{seq}'
        )
        stack = [(root, t, 0)]
        while stack:
            node, tn, depth = stack.pop()
            self.deliver(tn, topic, mid, node, depth, a, by_node)
            for child in tree.children[node]:
                if r.random() < self.spec.p_loss:
                    # Sent but lost: the subtree misses the event; the child asks later.
                    self.rec(
                        tn,
                        node,
                        "forward",
                        f',"topic":"{topic}","msg_id":"{mid}",'
                        f'"to":"{self.ids[child]}","hop":{depth + 1}',
                    )
                    self.rec(
                        tn + 1.0,
                        child,
                        "repair",
                        f',"topic":"{topic}","msg_id":"{mid}",'
                        f'"from":"{self.ids[node]}","kind":"gap"',
                    )
                    continue
                stack.append(
                    (child, self.send(tn, topic, mid, node, child, depth + 1, False), depth + 1)
                )

    def gossip_event(
        self, ts: float, topic: str, mid: str, pub: int, a: Attrs, by_node: dict[int, list[Sub]]
    ) -> None:
        r = self.rng
        n = len(self.ids)
        # Most events spread to nearly everyone; some die out early (pbcast's bimodality).
        fanout, rounds = (3, 8) if r.random() > 0.12 else (1, 2)
        infected = {pub}
        self.deliver(ts, topic, mid, pub, 0, a, by_node)
        frontier = [(pub, ts)]
        for hop in range(1, rounds + 1):
            nxt = []
            for node, tn in frontier:
                for _ in range(fanout):
                    dst = r.randrange(n - 1)
                    dst += dst >= node
                    dup = dst in infected
                    t = self.send(tn, topic, mid, node, dst, hop, dup)
                    if not dup:
                        infected.add(dst)
                        self.deliver(t, topic, mid, dst, hop, a, by_node)
                        nxt.append((dst, t))
            frontier = nxt
            if not frontier:
                break
        if frontier and r.random() < 0.3:
            node, tn = frontier[0]
            self.rec(tn + 0.01, node, "drop", f',"topic":"{topic}","msg_id":"{mid}","reason":"ttl"')
        if r.random() < 0.1:
            src = r.randrange(n)
            self.rec(
                ts + 2.0,
                r.randrange(n),
                "repair",
                f',"topic":"{topic}","msg_id":null,"from":"{self.ids[src]}","kind":"digest"',
            )

    def lookup(self, ts: float) -> None:
        r = self.rng
        node = r.randrange(len(self.ids))
        key = f"{r.getrandbits(self.spec.id_bits):0{self.width}x}"
        hops = max(0, int(r.gauss(len(self.ids).bit_length() / 2, 1.2)))
        ok = "true" if r.random() < 0.97 else "false"
        self.rec(
            ts,
            node,
            "lookup",
            f',"key":"{key}","hops":{hops},"ok":{ok},"ms":{r.uniform(1, 40) * (hops + 1):.3f}',
        )

    def other_run(self, ts: float) -> None:
        node = self.rng.randrange(len(self.ids))
        self.w.add(
            ts,
            node,
            f'{{"ts":{ts:.6f},"node":"{self.ids[node]}","ev":"lookup",'
            f'"run":"other-run","key":"00","hops":99,"ok":false,"ms":1.0}}',
        )

    def late_subscribe(self, ts: float, topic: str) -> None:
        """A current tree member adds a subscription during the run."""
        members = list(self.trees[topic].parent)
        self.subscribe(ts, topic, self.rng.choice(members))

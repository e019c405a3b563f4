"""A plain-Python reading of trace files by TRACES.md's definitions (no Spark, no scribe).

It knows nothing of how the traces were made: it reads ``*.jsonl*`` files and computes
delivery ratio, false deliveries, duplicates, tree shape and cost the way the Spark
analysis defines them, so simulations can report figures that the protocol code did not
count itself. Two readings go beyond TRACES.md, both marked where they apply:

- anycast groups: a ``subscribe`` record may carry ``group``. For each event and each
  group with at least one active member whose filter matches, exactly one delivery to
  such a member is expected (one "group service"); a delivery to a second member of
  the group is a ``group_extra``, counted apart from false deliveries;
- ``live_only``: a subscription also ends at its node's ``node_down`` (TRACES.md counts
  a crashed node's subscriptions as expected receivers that were missed);
- a ``deliver`` record with ``replay: true`` (an event the subscription asked the root
  for) that was not expected is a ``replayed`` delivery, not a false one.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matching import Filter, FilterSyntaxError, parse


@dataclass(frozen=True)
class Sub:
    node: str
    sub: int
    topic: str
    filter: Filter | None  # None: the filter did not parse (it then matches nothing)
    group: str | None
    start: float
    end: float  # math.inf while active at the end of the trace

    def active_at(self, ts: float) -> bool:
        return self.start <= ts < self.end


def read_records(trace_dir: Path) -> list[dict[str, Any]]:
    """Every record of every node, in (ts, node, position in its files) order; lines that
    are not JSON objects with ``ts``/``node``/``ev`` (e.g. cut by a crash) are skipped."""
    keyed: list[tuple[float, str, int, dict[str, Any]]] = []
    for path in sorted(Path(trace_dir).glob("*.jsonl*"), key=_file_order):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict) and {"ts", "node", "ev"} <= record.keys():
                    keyed.append((float(record["ts"]), record["node"], len(keyed), record))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


def _file_order(path: Path) -> tuple[str, int]:
    # Rotated files (.jsonl.1, .2, ...) hold older records than the live .jsonl file.
    name, _, suffix = path.name.partition(".jsonl")
    return name, int(suffix[1:]) if suffix[1:].isdigit() else 1 << 30


class TraceCheck:
    """Reads a trace directory once; answers questions about it."""

    def __init__(self, trace_dir: Path, live_only: bool = False) -> None:
        self.records = read_records(trace_dir)
        self.by_ev: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record in self.records:
            self.by_ev[record["ev"]].append(record)
        self.down_at: dict[str, float] = {}
        for record in self.by_ev["node_down"]:
            self.down_at.setdefault(record["node"], record["ts"])
        self.subs = self._subscriptions(live_only)

    # -- subscriptions and expectations -------------------------------------------------------

    def _subscriptions(self, live_only: bool) -> dict[str, list[Sub]]:
        filters: dict[str, Filter | None] = {}
        ends: dict[tuple[str, int], list[float]] = defaultdict(list)
        for record in self.by_ev["unsubscribe"]:
            ends[(record["node"], record["sub"])].append(record["ts"])
        by_topic: dict[str, list[Sub]] = defaultdict(list)
        for record in self.by_ev["subscribe"]:
            text = record.get("filter")
            if text not in filters:
                filters[text] = _parse_or_none(text)
            start = record["ts"]
            key = (record["node"], record["sub"])
            end = min((ts for ts in ends[key] if ts >= start), default=math.inf)
            if live_only:
                end = min(end, self.down_at.get(record["node"], math.inf))
            by_topic[record["topic"]].append(Sub(record["node"], record["sub"], record["topic"],
                                                 filters[text], record.get("group"), start, end))
        return by_topic

    def publishes(self, after: float = -math.inf,
                  before: float = math.inf) -> list[dict[str, Any]]:
        """First ``publish`` record of each msg_id, published within [after, before)."""
        first: dict[str, dict[str, Any]] = {}
        for record in self.by_ev["publish"]:
            first.setdefault(record["msg_id"], record)
        return [p for p in first.values() if after <= p["ts"] < before]

    def delivery(self, after: float = -math.inf, before: float = math.inf) -> dict[str, Any]:
        """Delivery figures for the events published within [after, before)."""
        pubs = {p["msg_id"]: p for p in self.publishes(after, before)}
        expected: set[tuple[str, int, str]] = set()
        members: dict[tuple[str, str, int], str] = {}  # (msg, node, sub) -> group
        group_services: set[tuple[str, str]] = set()
        for msg_id, pub in pubs.items():
            for sub in self.subs.get(pub["topic"], ()):
                if sub.filter is None or not sub.active_at(pub["ts"]) or \
                        not sub.filter.matches(pub.get("attrs") or {}):
                    continue
                if sub.group is None:
                    expected.add((sub.node, sub.sub, msg_id))
                else:
                    members[(msg_id, sub.node, sub.sub)] = sub.group
                    group_services.add((msg_id, sub.group))
        seen: set[tuple[str, int, str]] = set()
        served: set[tuple[str, str]] = set()
        got = false = duplicates = group_extra = replayed = 0
        for record in self.by_ev["deliver"]:
            msg_id = record["msg_id"]
            if msg_id not in pubs:
                continue
            key = (record["node"], record["sub"], msg_id)
            if key in seen or record.get("dup"):
                duplicates += 1
                continue
            seen.add(key)
            group = members.get((msg_id, record["node"], record["sub"]))
            if key in expected:
                got += 1
            elif record.get("replay"):
                replayed += 1
            elif group is None:
                false += 1
            elif (msg_id, group) in served:
                group_extra += 1
            else:
                served.add((msg_id, group))
        wanted = len(expected) + len(group_services)
        return {
            "events": len(pubs),
            "expected": len(expected),
            "delivered": got,
            "group_services": len(group_services),
            "groups_served": len(served),
            "delivery_ratio": round((got + len(served)) / wanted, 6) if wanted else None,
            "false_deliveries": false,
            "replayed": replayed,
            "duplicates": duplicates,
            "group_extra": group_extra,
        }

    def reliability(self, only_lasting: bool = False) -> dict[str, Any]:
        """Issue 6's promise, checked: every event whose publish was acknowledged (a
        ``publish_ack`` record) reaches every plain subscription that was active when it
        was published, matches it, and sits on a node that did not crash; exactly once,
        and in seq order per subscription.

        A subscription is active from its ``subscribed`` record on (Scribe writes it when
        the subscription is in effect, which is when the API answers the subscribe: the
        tree carries its filter from the root down); one that never got there is
        counted in ``never_in_effect`` and expects nothing.

        ``only_lasting``: only subscriptions that never ended expect events (a run that
        unsubscribes, or whose subscriptions expire, while events are on their way).

        ``lost``: such (subscription, event) pairs with no delivery; ``duplicated``: pairs
        delivered more than once; ``out_of_order``: deliveries to a subscription whose seq
        is not above the one delivered to it before (over all events).
        """
        crashed = {r["node"] for r in self.by_ev["node_down"] if r.get("reason") == "crash"}
        acked = {r["msg_id"] for r in self.by_ev["publish_ack"]}
        published = self.publishes()
        pubs = {p["msg_id"]: p for p in published if p["msg_id"] in acked}
        in_effect: dict[tuple[str, int], float] = {}
        for record in self.by_ev["subscribed"]:
            in_effect.setdefault((record["node"], record["sub"]), record["ts"])
        never = sum(1 for subs in self.subs.values() for sub in subs if sub.group is None
                    and sub.node not in crashed and (sub.node, sub.sub) not in in_effect)
        expected: set[tuple[str, int, str]] = set()
        for msg_id, pub in pubs.items():
            for sub in self.subs.get(pub["topic"], ()):
                since = in_effect.get((sub.node, sub.sub), math.inf)
                if sub.group is None and sub.node not in crashed and sub.filter is not None \
                        and since <= pub["ts"] and (not only_lasting or sub.end == math.inf) \
                        and sub.filter.matches(pub.get("attrs") or {}):
                    expected.add((sub.node, sub.sub, msg_id))
        counts: Counter[tuple[str, int, str]] = Counter()
        last_seq: dict[tuple[str, int], int] = {}
        out_of_order = 0
        for record in self.by_ev["deliver"]:
            key = (record["node"], record["sub"], record["msg_id"])
            counts[key] += 1
            seq = record.get("seq")
            if seq is not None:
                if seq <= last_seq.get(key[:2], 0):
                    out_of_order += 1
                last_seq[key[:2]] = seq
        return {
            "published": len(published),
            "acknowledged": len(pubs),
            "expected": len(expected),
            "lost": sum(1 for key in expected if counts[key] == 0),
            "duplicated": sum(1 for key in expected if counts[key] > 1),
            "out_of_order": out_of_order,
            "never_in_effect": never,
        }

    # -- trees -----------------------------------------------------------------------------------

    def tree_members(self, at: float = math.inf) -> dict[str, dict[str, str | None]]:
        """Per topic, node -> parent as of time ``at``: each node's latest ``tree`` record,
        unless a ``tree_leave`` or its ``node_down`` came later."""
        state: dict[tuple[str, str], str | None] = {}
        for record in self.records:
            if record["ts"] > at:
                break
            ev = record["ev"]
            if ev == "tree":
                state[(record["topic"], record["node"])] = record.get("parent")
            elif ev == "tree_leave":
                state.pop((record["topic"], record["node"]), None)
            elif ev == "node_down":
                for key in [k for k in state if k[1] == record["node"]]:
                    del state[key]
        topics: dict[str, dict[str, str | None]] = defaultdict(dict)
        for (topic, node), parent in state.items():
            topics[topic][node] = parent
        return topics

    def trees(self, at: float = math.inf) -> dict[str, Any]:
        """Depth statistics over every member of every tree, roots per topic, and members
        whose parent chain does not reach a root (detached, or on a loop)."""
        depths: list[int] = []
        roots: dict[str, int] = {}
        detached = 0
        for topic, parents in self.tree_members(at).items():
            roots[topic] = sum(1 for parent in parents.values() if parent is None)
            for node in parents:
                depth = _depth(node, parents)
                if depth is None:
                    detached += 1
                else:
                    depths.append(depth)
        return {
            "topics": len(roots),
            "roots_per_topic_max": max(roots.values(), default=0),
            "topics_without_root": sum(1 for n in roots.values() if n == 0),
            "tree_nodes": len(depths) + detached,
            "detached": detached,
            "tree_depth_mean": round(statistics.fmean(depths), 3) if depths else None,
            "tree_depth_max": max(depths, default=None),
        }

    # -- cost and stress ---------------------------------------------------------------------------

    def cost(self, after: float = -math.inf, before: float = math.inf) -> dict[str, Any]:
        """Forwards of the events published within [after, before), per delivery."""
        pubs = {p["msg_id"] for p in self.publishes(after, before)}
        forwards = sum(1 for r in self.by_ev["forward"] if r["msg_id"] in pubs)
        deliveries = len({(r["node"], r["sub"], r["msg_id"])
                          for r in self.by_ev["deliver"] if r["msg_id"] in pubs})
        return {"forwards": forwards, "deliveries": deliveries,
                "forwards_per_delivery": round(forwards / deliveries, 4) if deliveries else None}

    def stress(self, at: float = math.inf) -> dict[str, Any]:
        """Per node up at time ``at``: children over all topics then, and forwards sent
        until then (nodes without any count as 0); the most children in one tree."""
        up = {r["node"] for r in self.by_ev["node_up"] if r["ts"] <= at}
        up -= {node for node, ts in self.down_at.items() if ts <= at}
        children: dict[tuple[str, str, str], bool] = {}
        for record in self.by_ev["child"]:
            if record["ts"] <= at:
                key = (record["node"], record["topic"], record["child"])
                children[key] = record["op"] == "add"
        per_node = Counter(node for (node, _, _), on in children.items() if on)
        per_tree = Counter((node, topic) for (node, topic, _), on in children.items() if on)
        forwards = Counter(r["node"] for r in self.by_ev["forward"] if r["ts"] <= at)
        return {"children": _spread(per_node[node] for node in up),
                "children_per_tree_max": max(per_tree.values(), default=0),
                "forwards": _spread(forwards[node] for node in up)}

    def last_time(self, evs: Iterable[str], after: float) -> float | None:
        """Time of the last record of one of ``evs`` written after ``after``."""
        wanted = set(evs)
        times = [r["ts"] for r in self.records if r["ev"] in wanted and r["ts"] > after]
        return max(times, default=None)


def _depth(node: str, parents: dict[str, str | None]) -> int | None:
    depth, seen = 0, {node}
    parent = parents[node]
    while parent is not None:
        if parent not in parents or parent in seen:
            return None
        seen.add(parent)
        parent = parents[parent]
        depth += 1
    return depth


def _spread(values: Iterable[int]) -> dict[str, float | int | None]:
    ordered = sorted(values)
    if not ordered:
        return {"nodes": 0, "mean": None, "p99": None, "max": None}
    return {"nodes": len(ordered), "mean": round(statistics.fmean(ordered), 3),
            "p99": ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)],
            "max": ordered[-1]}


def _parse_or_none(text: Any) -> Filter | None:
    if not isinstance(text, str):
        return None
    try:
        return parse(text)
    except FilterSyntaxError:
        return None

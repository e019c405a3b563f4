"""Unstructured publish/subscribe by gossip, in the simulator, measured from its traces.

Timeline: nodes start during ``join_window`` seconds (HyParView: each joins through a
random node started before it; full view: each is given the whole membership) and
views settle until ``warmup``; K subscriptions per topic start on random nodes during
``subscribe_window`` seconds with filters drawn from :data:`FILTER_MIX` (the structured
mode's mix: two empty filters in eight, equality, IN, ranges, LIKE, OR, NOT); after
``settle`` seconds P events are published from random nodes at random times over
``publish_window`` seconds (all at its start when it is 0), with random attributes;
the run ends ``drain`` seconds after the last publish.

Every figure of the summary is read back from the trace files by :class:`GossipTraces`
(plain Python), not taken from counters of the protocol code; only
``control_messages_per_node`` (peer sampling, feedback, digests, adverts, which have no
trace record) comes from the simulator's counters.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from matching import parse
from overlay.core.limits import DEFAULT_MAX_FRAME, SizeLimits
from overlay.core.records import TRACE_VERSION
from overlay.gossip.config import (
    STRATEGY_NAMES,
    AntiEntropyConfig,
    BlindCounterConfig,
    FloodConfig,
    GossipConfig,
    HyParViewConfig,
    PbcastConfig,
    RandomWalkConfig,
    RumorConfig,
    SelectiveConfig,
    StrategyConfig,
)
from overlay.gossip.node import GossipNode
from overlay.sim.engine import Simulator
from overlay.sim.network import NetworkConfig
from overlay.sim.workload import FILTER_MIX, random_event


@dataclass(frozen=True)
class GossipScenario:
    nodes: int = 200
    strategy: str = "flood"
    #: Per strategy: rumor peers per round (default 1), blind counter B (2), pbcast first
    #: phase (3; 0 = all neighbours), anti-entropy peers per round (1).
    fanout: int | None = None
    forward_limit: int = 2
    #: Rumor mongering: coin (``p_stop``) unless ``counter`` is given.
    p_stop: float = 0.5
    counter: int | None = None
    reset_counter: bool = False
    #: Hop limit of flooding (default 8), random walks (32) and pbcast's first phase (8).
    ttl: int | None = None
    walkers: int = 4
    anti_entropy: str = "push-pull"
    view: str = "hyparview"
    active_size: int = 5
    selective: bool = False
    radius: int = 8
    round_interval: float = 1.0
    aligned_rounds: bool = False
    loss: float = 0.0
    topics: int = 4
    subscribers: int = 12
    publishes: int = 50
    join_window: float = 5.0
    warmup: float = 15.0
    subscribe_window: float = 2.0
    settle: float = 3.0
    publish_window: float = 20.0
    drain: float = 30.0
    seed: int = 1
    #: Bytes of each event's payload, and the overlay's max_frame (the size model that
    #: bounds the messages carrying several events).
    payload_bytes: int = 7
    max_frame: int = DEFAULT_MAX_FRAME

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.topics < 1 or self.subscribers < 0 or self.publishes < 0:
            raise ValueError("nodes and topics must be >= 1, subscribers and publishes >= 0")
        if self.strategy not in STRATEGY_NAMES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGY_NAMES)}")

    def strategy_config(self) -> StrategyConfig:
        name, fanout, ttl = self.strategy, self.fanout, self.ttl
        if name == "flood":
            return FloodConfig(ttl=ttl or 8)
        if name == "random-walk":
            return RandomWalkConfig(walkers=self.walkers, ttl=ttl or 32)
        if name == "rumor":
            coin = self.counter is None
            return RumorConfig(fanout=fanout or 1, p_stop=self.p_stop if coin else None,
                               counter=self.counter, reset_counter=self.reset_counter)
        if name == "blind-counter":
            return BlindCounterConfig(fanout=fanout or 2, forward_limit=self.forward_limit)
        if name == "anti-entropy":
            return AntiEntropyConfig(mode=self.anti_entropy,  # type: ignore[arg-type]  # the scenario's fields are checked by its __post_init__
                                     fanout=fanout or 1)
        return PbcastConfig(fanout=3 if fanout is None else (fanout or None), ttl=ttl or 8)

    def gossip_config(self) -> GossipConfig:
        return GossipConfig(
            strategy=self.strategy_config(), view=self.view,  # type: ignore[arg-type]  # the scenario's fields are checked by its __post_init__
            hyparview=HyParViewConfig(active_size=self.active_size,
                                      passive_size=max(30, 6 * self.active_size)),
            selective=SelectiveConfig(radius=self.radius) if self.selective else None,
            round_interval=self.round_interval, aligned_rounds=self.aligned_rounds,
            sizes=SizeLimits(self.max_frame))

    @property
    def publish_from(self) -> float:
        return self.warmup + self.subscribe_window + self.settle

    @property
    def end(self) -> float:
        return self.publish_from + self.publish_window + self.drain


def addresses(count: int) -> list[str]:
    return [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}:7400" for i in range(count)]


def components(nodes: list[GossipNode], alive: set[str]) -> list[int]:
    """Sizes of the connected components of the survivors' active views (undirected)."""
    links: dict[str, set[str]] = {a: set() for a in alive}
    for node in nodes:
        if node.address in alive:
            for peer in node.peers.neighbours():
                if peer in alive:
                    links[node.address].add(peer)
                    links[peer].add(node.address)
    sizes, seen = [], set()
    for start in alive:
        if start in seen:
            continue
        seen.add(start)
        todo, size = deque([start]), 0
        while todo:
            size += 1
            for peer in links[todo.popleft()] - seen:
                seen.add(peer)
                todo.append(peer)
        sizes.append(size)
    return sorted(sizes, reverse=True)


def build(sim: Simulator, scenario: GossipScenario) -> list[GossipNode]:
    """Place and start the nodes (joins spread over ``join_window``)."""
    config = scenario.gossip_config()
    addrs = addresses(scenario.nodes)
    nodes = [GossipNode(a, sim.node_rng(a), config) for a in addrs]
    step = scenario.join_window / scenario.nodes
    for i, node in enumerate(nodes):
        sim.add_node(node, node.node_hex)
        # The full view shares one membership list; a HyParView node joins through a
        # random node that started before it.
        seeds = addrs if scenario.view == "full" else \
            ([addrs[sim.rng.randrange(i)]] if i else [])
        sim.at(i * step, lambda n=node, s=seeds: sim.invoke(
            n.address, lambda core, now: _start(core, now, s)))
    return nodes


def _start(node: GossipNode, now: float, seeds: list[str]) -> None:
    node.trace("node_up", addr=node.address, mode="unstructured", version=TRACE_VERSION)
    node.start(now, seeds)


def schedule_traffic(sim: Simulator, scenario: GossipScenario, nodes: list[GossipNode]) -> None:
    rng = sim.rng
    sub_id = 0
    for t in range(scenario.topics):
        for _ in range(scenario.subscribers):
            sub_id += 1
            node, text = rng.choice(nodes), rng.choice(FILTER_MIX)
            sim.at(scenario.warmup + rng.uniform(0, scenario.subscribe_window),
                   lambda n=node, s=sub_id, f=text, tp=f"topic-{t}": sim.invoke(
                       n.address, lambda core, now: core.subscribe(now, tp, f, s)))
    for _ in range(scenario.publishes):
        at = scenario.publish_from + rng.uniform(0, scenario.publish_window)
        node, topic = rng.choice(nodes), f"topic-{rng.randrange(scenario.topics)}"
        attrs = random_event(rng)
        payload = b"payload"[:scenario.payload_bytes].ljust(scenario.payload_bytes, b"\xa5")
        sim.at(at, lambda n=node, tp=topic, a=attrs, p=payload: sim.alive(n.address) and
               sim.invoke(n.address, lambda core, now: core.publish(now, tp, a, p)))


def run_gossip(scenario: GossipScenario, trace_dir: Path | None = None,
               run_id: str | None = None, check_wire: bool = True) -> dict[str, Any]:
    """Run the scenario; returns the summary (figures from the traces). ``check_wire``:
    every message crosses the codec and is held to ``max_frame``."""
    if trace_dir is None:
        with tempfile.TemporaryDirectory(prefix="gossip-sim-") as tmp:
            return run_gossip(scenario, Path(tmp), run_id, check_wire)
    started = time.perf_counter()
    sim = Simulator(scenario.seed, NetworkConfig(loss=scenario.loss), trace_dir=trace_dir,
                    run_id=run_id, check_wire=check_wire, max_frame=scenario.max_frame)
    nodes = build(sim, scenario)
    schedule_traffic(sim, scenario, nodes)
    sim.run(until=scenario.end)
    for node in nodes:
        if sim.alive(node.address):
            sim.invoke(node.address, lambda core, now: core.trace("node_down", reason="stop"))
    sim.close()
    summary: dict[str, Any] = {"mode": "unstructured", **asdict(scenario)}
    summary.update(GossipTraces(trace_dir).summary())
    event_types = {"gossip.event", "gossip.rumor", "gossip.repair"}
    control = sum(n for t, n in sim.stats.by_type.items() if t not in event_types)
    summary.update(control_messages_per_node=round(control / scenario.nodes, 3),
                   sim_events=sim.stats.events, wall_s=round(time.perf_counter() - started, 3))
    return summary


class GossipTraces:
    """Reads a run's ``*.jsonl*`` trace files and measures dissemination and delivery."""

    def __init__(self, trace_dir: Path) -> None:
        self.nodes: set[str] = set()
        self.publishes: dict[str, dict[str, Any]] = {}
        #: msg_id -> node -> time it first had the event (publish or first recv).
        self.reached: dict[str, dict[str, float]] = {}
        self.forwards = 0
        self.forwards_by_event: Counter[str] = Counter()
        self.deliveries: dict[tuple[str, int, str], float] = {}
        self.duplicate_deliveries = 0
        self.subs: dict[tuple[str, int], dict[str, Any]] = {}
        self.repairs = 0
        for path in sorted(trace_dir.glob("*.jsonl*")):
            with open(path) as fh:
                for line in fh:
                    self._read(json.loads(line))

    def _read(self, rec: dict[str, Any]) -> None:
        ev, node, ts = rec["ev"], rec["node"], rec["ts"]
        if ev == "recv":
            self.reached.setdefault(rec["msg_id"], {}).setdefault(node, ts)
        elif ev == "forward":
            self.forwards += 1
            self.forwards_by_event[rec["msg_id"]] += 1
        elif ev == "deliver":
            key = (node, rec["sub"], rec["msg_id"])
            if key in self.deliveries or rec["dup"]:
                self.duplicate_deliveries += 1
            else:
                self.deliveries[key] = ts
        elif ev == "publish":
            self.publishes[rec["msg_id"]] = rec
            self.reached.setdefault(rec["msg_id"], {})[node] = ts
        elif ev == "node_up":
            self.nodes.add(node)
        elif ev == "subscribe":
            self.subs[(node, rec["sub"])] = {**rec, "until": math.inf}
        elif ev == "unsubscribe":
            self.subs[(node, rec["sub"])]["until"] = ts
        elif ev == "repair":
            self.repairs += 1

    def spread(self, share: float = 0.99) -> dict[str, Any]:
        """Per event: share of nodes reached, and seconds until ``share`` of them were."""
        coverage, to_share = [], []
        need = math.ceil(share * len(self.nodes))
        for msg_id, pub in self.publishes.items():
            times = sorted(self.reached.get(msg_id, {}).values())
            coverage.append(len(times) / len(self.nodes))
            if len(times) >= need:
                to_share.append(times[need - 1] - pub["ts"])
        return {"coverage": coverage, "t_share": to_share}

    def expected(self) -> set[tuple[str, int, str]]:
        """(node, sub, msg_id) of every subscription active at publish time that matches."""
        filters = {text: parse(text) for text in {s["filter"] for s in self.subs.values()}}
        out = set()
        for msg_id, pub in self.publishes.items():
            for (node, sub_id), sub in self.subs.items():
                if sub["topic"] == pub["topic"] and sub["ts"] <= pub["ts"] < sub["until"] \
                        and filters[sub["filter"]].matches(pub["attrs"]):
                    out.add((node, sub_id, msg_id))
        return out

    def latencies(self) -> list[float]:
        return [ts - self.publishes[msg_id]["ts"]
                for (_, _, msg_id), ts in self.deliveries.items() if msg_id in self.publishes]

    def summary(self) -> dict[str, Any]:
        nodes, events = len(self.nodes), len(self.publishes)
        spread = self.spread()
        expected = self.expected()
        delivered = expected & set(self.deliveries)
        latencies = sorted(self.latencies())
        return {
            "events": events,
            "coverage": _mean(spread["coverage"]),
            "coverage_min": round(min(spread["coverage"]), 4) if events else None,
            "residue": None if not events else round(1 - sum(spread["coverage"]) / events, 5),
            "messages_per_node": round(self.forwards / nodes, 3) if nodes else None,
            "messages_per_node_per_event": round(self.forwards / nodes / events, 3)
            if nodes and events else None,
            "t99_s": _mean(spread["t_share"]),
            "t99_reached": len(spread["t_share"]),
            "expected_deliveries": len(expected),
            "delivery_ratio": round(len(delivered) / len(expected), 5) if expected else None,
            "false_deliveries": len(set(self.deliveries) - expected),
            "duplicate_deliveries": self.duplicate_deliveries,
            "messages_per_delivery": round(self.forwards / len(delivered), 3)
            if delivered else None,
            "latency_p50_s": _percentile(latencies, 0.5),
            "latency_p99_s": _percentile(latencies, 0.99),
            "repairs": self.repairs,
        }


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _percentile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4)


# -- the command line (``overlay sim --mode unstructured``) ---------------------------------


def add_gossip_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``overlay sim --mode unstructured`` (defaults: :class:`GossipScenario`).

    ``--nodes``, ``--seed``, ``--loss``, ``--topics``, ``--subscribers``, ``--publishes``
    and ``--trace-dir`` are the structured mode's options, shared."""
    d = GossipScenario()
    g = parser.add_argument_group("unstructured mode (gossip)")
    g.add_argument("--strategy", choices=STRATEGY_NAMES, default=d.strategy)
    g.add_argument("--fanout", type=int, help="rumor peers per round (1), blind counter B (2), "
                   "pbcast first-phase fanout (3; 0 = every neighbour), anti-entropy peers (1)")
    g.add_argument("--forward-limit", type=int, default=d.forward_limit,
                   help="blind counter F: receptions on which a node forwards")
    g.add_argument("--p-stop", type=float, default=d.p_stop,
                   help="rumor: probability of losing interest after an unneeded push (coin)")
    g.add_argument("--counter", type=int, help="rumor: lose interest after this many unneeded "
                   "pushes (counter; replaces --p-stop)")
    g.add_argument("--reset-counter", action="store_true",
                   help="rumor counter: count only consecutive unneeded pushes")
    g.add_argument("--ttl", type=int, help="hop limit: flood (8), random walk (32), pbcast (8)")
    g.add_argument("--walkers", type=int, default=d.walkers, help="random walk: walkers")
    g.add_argument("--anti-entropy", choices=("push", "pull", "push-pull"),
                   default=d.anti_entropy, help="anti-entropy direction")
    g.add_argument("--view", choices=("hyparview", "full"), default=d.view,
                   help="peer sampling: bounded HyParView view, or every node knows all")
    g.add_argument("--active-size", type=int, default=d.active_size,
                   help="HyParView active view (neighbours)")
    g.add_argument("--selective", action="store_true", help="selective routing by interests")
    g.add_argument("--radius", type=int, default=d.radius, help="interest advert radius (hops)")
    g.add_argument("--round-interval", type=float, default=d.round_interval)
    g.add_argument("--aligned-rounds", action="store_true",
                   help="every node's rounds in step (synchronous-round models)")
    g.add_argument("--publish-window", type=float, default=d.publish_window)
    g.add_argument("--drain", type=float, default=d.drain)


def scenario_from_args(args: argparse.Namespace) -> GossipScenario:
    """The scenario of parsed arguments (``--nodes``, ``--topics``, ``--subscribers``,
    ``--publishes``, ``--seed`` come from the structured mode's options when present)."""
    names = {f.name for f in fields(GossipScenario)}
    given = {k: v for k, v in vars(args).items() if k in names and v is not None}
    if not given.get("topics"):
        given.pop("topics", None)  # structured mode's 0 means "no pub/sub run"
    return GossipScenario(**given)


def run_gossip_simulation(args: argparse.Namespace) -> dict[str, Any]:
    trace_dir = getattr(args, "trace_dir", None)
    return run_gossip(scenario_from_args(args), Path(trace_dir) if trace_dir else None,
                      getattr(args, "run_id", None))

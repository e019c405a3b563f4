"""Publish/subscribe by flooding on a random graph, in the simulator.

N nodes, each linked to ``degree`` random others (links are symmetric); K subscriptions
per topic on random nodes with filters from :data:`FILTER_MIX`; P events published from
random nodes at random times with random attributes. Every node writes TRACES.md
records, which the Spark analysis reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from overlay.gossip.flood import FloodConfig, FloodNode
from overlay.sim.engine import Simulator
from overlay.sim.network import NetworkConfig

#: Filters drawn for subscriptions: empty ones, equality, ranges, LIKE, IN, OR, NOT.
FILTER_MIX = [
    "",
    "",
    "price > 50",
    "sym = 'ACME'",
    "sym IN ('ACME', 'INIT') AND price < 80",
    "region LIKE 'eu-%'",
    "urgent = TRUE OR price >= 95",
    "NOT (region LIKE 'us-%') AND qty BETWEEN 10 AND 500",
]
SYMBOLS = ["ACME", "INIT", "GLOBEX", "UMBRELLA"]
REGIONS = ["eu-west", "eu-north", "us-east", "ap-south"]


@dataclass(frozen=True)
class FloodScenario:
    nodes: int = 64
    degree: int = 4
    topics: int = 4
    subscribers: int = 12
    publishes: int = 200
    duration: float = 60.0
    ttl: int = 8
    loss: float = 0.0
    seed: int = 1


def random_event(rng: Any) -> dict[str, Any]:
    return {"sym": rng.choice(SYMBOLS), "price": round(rng.uniform(0, 100), 2),
            "qty": rng.randrange(1, 1000), "region": rng.choice(REGIONS),
            "urgent": rng.random() < 0.1}


def run_flood(scenario: FloodScenario, trace_dir: Path | None,
              run_id: str | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    sim = Simulator(scenario.seed, NetworkConfig(loss=scenario.loss), trace_dir=trace_dir,
                    run_id=run_id)
    rng = sim.rng
    addrs = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}:7400" for i in range(scenario.nodes)]
    nodes = [FloodNode(a, sim.node_rng(a), FloodConfig(ttl=scenario.ttl)) for a in addrs]
    for node in nodes:
        sim.add_node(node, node.node_hex)
        sim.invoke(node.address, lambda core, now: core.trace(
            "node_up", addr=core.address, mode="unstructured", version=1))
    for i, node in enumerate(nodes):
        for j in rng.sample(range(scenario.nodes), min(scenario.degree, scenario.nodes - 1)):
            if j != i and addrs[j] not in node.neighbours:
                node.neighbours.append(addrs[j])
                nodes[j].neighbours.append(node.address)
    sub_id = 0
    for t in range(scenario.topics):
        for _ in range(scenario.subscribers):
            sub_id += 1
            node = rng.choice(nodes)
            text = rng.choice(FILTER_MIX)
            sim.at(rng.uniform(0, 1), lambda n=node, s=sub_id, f=text, topic=f"topic-{t}":
                   sim.invoke(n.address, lambda core, now: core.subscribe(now, topic, f, s)))
    deliveries = 0

    def count(_addr: str, _effect: Any, _now: float) -> None:
        nonlocal deliveries
        deliveries += 1

    sim.on_deliver.append(count)
    window = max(scenario.duration - 12.0, 1.0)
    for _ in range(scenario.publishes):
        node, topic = rng.choice(nodes), f"topic-{rng.randrange(scenario.topics)}"
        attrs = random_event(rng)
        sim.at(2.0 + rng.uniform(0, window), lambda n=node, tp=topic, a=attrs: sim.invoke(
            n.address, lambda core, now: core.publish(now, tp, a, b"payload")))
    sim.run(until=scenario.duration)
    for node in nodes:
        sim.invoke(node.address, lambda core, now: core.trace("node_down", reason="stop"))
    sim.close()
    return {"nodes": scenario.nodes, "publishes": scenario.publishes,
            "subscriptions": sub_id, "deliveries": deliveries,
            "messages": sim.stats.messages_sent, "events": sim.stats.events,
            "wall_s": round(time.perf_counter() - started, 3)}

"""A publish/subscribe workload against running daemons, through their local APIs.

K subscriptions per topic on random nodes (filters from the simulations' mix, empty
filters included), then P events with random attributes published from random nodes at
a fixed rate. Every subscription's events are counted; what each should have received is
computed here by evaluating its filter (``matching``), independently of the overlay, so
the workload's own summary can be checked against the Spark analysis of the traces.
"""

from __future__ import annotations

import random
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import trio

from deploy.cluster import NodeEntry
from matching import parse
from overlay.client import AsyncClient, ClientError, Event, Subscription, connect
from overlay.sim.workload import FILTER_MIX, random_event


@dataclass(frozen=True)
class Workload:
    topics: int = 4
    subscribers: int = 6
    publishes: int = 400
    rate: float = 40.0
    seed: int = 1
    #: Seconds to wait for every subscriber to be in its topic's tree.
    join_timeout: float = 60.0
    #: Seconds after the last publish for the missing events to arrive.
    drain_timeout: float = 30.0


@dataclass
class SubscriptionRun:
    node: str
    topic: str
    filter: str
    sub: Subscription | None = None
    events: list[Event] = field(default_factory=list)
    expected: set[str] = field(default_factory=set)


async def run_workload(nodes: list[NodeEntry], workload: Workload,
                       progress: Any = print) -> dict[str, Any]:
    rng = random.Random(workload.seed)
    runs = [SubscriptionRun(rng.choice(nodes).name, f"topic-{t}", rng.choice(FILTER_MIX))
            for t in range(workload.topics) for _ in range(workload.subscribers)]
    async with AsyncExitStack() as stack:
        clients: dict[str, AsyncClient] = {}
        for node in nodes:
            clients[node.name] = await stack.enter_async_context(
                connect(node.api, client_name="main-job"))
        nursery = await stack.enter_async_context(trio.open_nursery())
        for run in runs:
            run.sub = await stack.enter_async_context(
                clients[run.node].subscribe(run.topic, run.filter))
            nursery.start_soon(_collect, run)
        progress(f"{len(runs)} subscriptions on {len({r.node for r in runs})} nodes; "
                 "waiting for them to be in their trees")
        await _wait_for_trees(clients, runs, workload.join_timeout)
        # Trees are formed; let the subtree summaries travel up to the roots.
        await trio.sleep(2.0)
        progress(f"publishing {workload.publishes} events at {workload.rate:g}/s")
        started = trio.current_time()
        failed = 0
        for i in range(workload.publishes):
            await trio.sleep_until(started + i / workload.rate)
            topic = f"topic-{rng.randrange(workload.topics)}"
            attrs = random_event(rng)
            publisher = rng.choice(nodes).name
            try:
                published = await clients[publisher].publish(topic, b"main-job", attrs=attrs)
            except ClientError as exc:
                failed += 1
                progress(f"publish {i} from {publisher} failed: {exc}")
                continue
            for run in runs:
                if run.topic == topic and parse(run.filter).matches(attrs):
                    run.expected.add(published.msg_id)
        publish_s = trio.current_time() - started
        with trio.move_on_after(workload.drain_timeout):
            while any(not r.expected <= {e.msg_id for e in r.events} for r in runs):
                await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    return _summary(runs, workload, failed, publish_s)


async def _collect(run: SubscriptionRun) -> None:
    assert run.sub is not None
    async for event in run.sub:
        run.events.append(event)


async def _wait_for_trees(clients: dict[str, AsyncClient], runs: list[SubscriptionRun],
                          timeout: float) -> None:
    """Until every subscriber's node is in its topic's tree (a parent, or the root)."""
    wanted = {(r.node, r.topic) for r in runs}
    with trio.fail_after(timeout):
        while wanted:
            for node, topic in list(wanted):
                tree = (await clients[node].status()).get("topics", {}).get(topic)
                if tree and (tree.get("parent") or tree.get("role") == "root"):
                    wanted.discard((node, topic))
            await trio.sleep(0.2)


def _summary(runs: list[SubscriptionRun], workload: Workload, failed: int,
             publish_s: float) -> dict[str, Any]:
    expected = sum(len(r.expected) for r in runs)
    delivered = duplicates = false = 0
    for run in runs:
        counts = Counter(e.msg_id for e in run.events)
        duplicates += sum(c - 1 for c in counts.values())
        false += sum(1 for m in counts if m not in run.expected)
        delivered += len(run.expected & set(counts))
    return {
        "subscriptions": len(runs), "publishes": workload.publishes,
        "publish_failures": failed, "publish_rate": round(workload.publishes / publish_s, 1),
        "expected_deliveries": expected, "delivered": delivered,
        "delivery_ratio": round(delivered / expected, 5) if expected else None,
        "false_deliveries": false, "duplicates": duplicates,
    }

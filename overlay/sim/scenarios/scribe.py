"""Scribe publish/subscribe on a ring, in the simulator, measured from its traces.

Timeline: the ring forms (until ``ring.ready_at``); K subscriptions per topic start on
random nodes during ``subscribe_window`` seconds, with filters drawn from the shared
workload's :data:`~overlay.sim.workload.FILTER_MIX` (which includes empty
filters) and, for a share ``groups`` of them, an anycast group ``g0``..``g{n-1}``; after
``settle`` seconds P events are published from random live nodes at random times
until ``drain`` seconds before the end, with random attributes. Optionally a share of
the nodes (among them the roots of some topics) crashes at ``crash_at``. The run goes
on past its planned end while nodes are still delivering what was published (waiting
for acknowledgements, repairing gaps), until ``drain`` seconds after (see ``_drain``).

Every figure of the summary comes from the trace files, read by
:mod:`overlay.sim.scenarios.trace_check`, not from counters of the protocol code.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from chord.node import ChordNode
from overlay.core.ids import hash_id
from overlay.sim.engine import Simulator
from overlay.sim.network import NetworkConfig
from overlay.sim.scenarios.chord import ChordScenario
from overlay.sim.scenarios.chord_world import ChordWorld
from overlay.sim.scenarios.trace_check import TraceCheck
from overlay.sim.workload import FILTER_MIX, random_event
from scribe import ScribeApp, ScribeConfig


class RingNode(Protocol):
    """A simulated node hosting a Scribe app (the KBR host as the simulator's core)."""

    address: str
    app: ScribeApp

    def is_responsible(self, key: int) -> bool: ...


class Ring(Protocol):
    """How the scenario gets a formed ring of nodes carrying Scribe apps."""

    #: Identifier bits of the ring.
    bits: int
    #: Simulated time by which the ring is formed and stable.
    ready_at: float

    def build(self, sim: Simulator, count: int,
              app_factory: Callable[[Any], ScribeApp]) -> list[RingNode]: ...

    def crash(self, sim: Simulator, node: RingNode) -> None:
        """Crash ``node`` (the ring's failure detection then takes its course)."""
        ...


@dataclass
class ChordRing:
    """A Chord ring as the Chord scenario forms it (its ``ChordWorld``): ``oracle``
    bootstrap installs correct tables at once; ``join`` lets node i join through a random
    earlier node at ``i * join_spacing`` seconds. Ready after the Chord scenario's warm-up
    (20 stabilize periods after the last join) unless ``warmup`` says otherwise."""

    bootstrap: str = "oracle"
    stabilize_interval: float = 5.0
    bits: int = 128
    successors: int = 8
    join_spacing: float = 0.1
    warmup: float | None = None
    ready_at: float = 0.0
    world: ChordWorld | None = None

    def build(self, sim: Simulator, count: int,
              app_factory: Callable[[Any], ScribeApp]) -> list[RingNode]:
        chord = ChordScenario(nodes=count, duration=math.inf, bootstrap=self.bootstrap,
                              stabilize_interval=self.stabilize_interval, bits=self.bits,
                              successors=self.successors, join_spacing=self.join_spacing,
                              warmup=self.warmup)
        self.ready_at = chord.ready_at
        self.world = world = ChordWorld(sim, chord.chord_config(), app_factory)
        if self.bootstrap == "oracle":
            return list(world.bootstrap_oracle(count))
        nodes = [world.spawn() for _ in range(count)]
        world.create(nodes[0])
        for i in range(1, count):
            seed = nodes[sim.rng.randrange(i)]
            sim.at(i * self.join_spacing, lambda n=nodes[i], s=seed: world.join(n, s))
        return list(nodes)

    def crash(self, sim: Simulator, node: RingNode) -> None:
        assert self.world is not None and isinstance(node, ChordNode)
        self.world.crash(node)


@dataclass(frozen=True)
class ScribeScenario:
    nodes: int = 200
    topics: int = 4
    subscribers: int = 50
    publishes: int = 200
    #: Share of subscriptions that belong to an anycast group.
    groups: float = 0.0
    #: Groups per topic that grouped subscriptions are spread over.
    group_names: int = 3
    max_children: int | None = None
    summaries: bool = True
    #: Share of nodes crashed at ``crash_at`` (0: none), the roots of ``crash_roots``
    #: topics among them.
    crash: float = 0.0
    crash_roots: int = 1
    #: Also crash that many successors of each crashed root (the nodes that would
    #: take its key over, and hold its replicas).
    crash_successors: int = 0
    crash_at: float | None = None
    #: Publish reliably (acknowledged once the root's replicas hold the event).
    reliable: bool = True
    #: Successors that hold the root's copies (ScribeConfig.replicas).
    replicas: int = 2
    subscribe_window: float = 5.0
    settle: float = 5.0
    #: Seconds of publishing, when ``duration`` does not set the end of the run.
    publish_window: float = 40.0
    drain: float = 10.0
    #: End of the run in simulated seconds (publishing stops ``drain`` before it).
    duration: float | None = None
    heartbeat_interval: float = 1.0
    #: Share of messages the network loses.
    loss: float = 0.0
    seed: int = 1

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.topics < 1 or self.subscribers < 0 or self.publishes < 0:
            raise ValueError("nodes and topics must be >= 1, subscribers and publishes >= 0")
        if not 0.0 <= self.groups <= 1.0 or not 0.0 <= self.crash < 1.0:
            raise ValueError("groups must be within [0, 1] and crash within [0, 1)")


def run_scribe(scenario: ScribeScenario, ring: Ring, trace_dir: Path | None = None,
               run_id: str | None = None) -> dict[str, Any]:
    """Run the scenario on ``ring``; returns the summary (figures from the traces)."""
    if trace_dir is None:
        with tempfile.TemporaryDirectory(prefix="scribe-sim-") as tmp:
            return run_scribe(scenario, ring, Path(tmp), run_id)
    started = time.perf_counter()
    sim = Simulator(scenario.seed, NetworkConfig(loss=scenario.loss), trace_dir=trace_dir,
                    run_id=run_id)
    config = ScribeConfig(summaries=scenario.summaries, max_children=scenario.max_children,
                          heartbeat_interval=scenario.heartbeat_interval,
                          parent_timeout=3.5 * scenario.heartbeat_interval,
                          replicas=scenario.replicas)
    nodes = ring.build(sim, scenario.nodes, lambda host: ScribeApp(host, config))
    timeline = _Timeline.of(scenario, ring.ready_at)
    skipped = SkippedCalls()
    crashed = _schedule(sim, scenario, ring, nodes, timeline, skipped)
    sim.run(until=timeline.publish_until)
    timeline = _drain(sim, nodes, timeline, config, scenario.drain)
    for node in nodes:
        if sim.alive(node.address):
            sim.invoke(node.address, lambda core, now: core.trace("node_down", reason="stop"))
    sim.close()
    summary = summarize(trace_dir, scenario, timeline, crashed)
    summary.update(messages=sim.stats.messages_sent, sim_events=sim.stats.events,
                   skipped_calls={"subscribe": skipped.subscribe, "publish": skipped.publish},
                   wall_s=round(time.perf_counter() - started, 3))
    return summary


def _drain(sim: Simulator, nodes: list[RingNode], timeline: _Timeline, config: ScribeConfig,
           drain: float) -> _Timeline:
    """Run from the end of publishing until ``drain`` seconds after the last moment some
    live node was still busy delivering what was published: a reliable publish waiting
    for its acknowledgement (a publisher retrying through loss), copies held behind a
    gap, a catch-up after re-joining, a member without a parent; at least until the
    planned end, at most until the publishers would have given up. A run that stopped
    at the planned end would cut off repairs of events the reliability check rightly
    expects."""
    step = config.heartbeat_interval
    give_up_by = timeline.publish_until + config.publish_give_up + step
    now, end = timeline.publish_until, timeline.end
    while now < end:
        now = min(now + step, end)
        sim.run(until=now)
        if now < give_up_by and any(sim.alive(node.address) and _busy(node.app)
                                    for node in nodes):
            end = max(end, now + drain)
    return replace(timeline, end=end)


def _busy(app: ScribeApp) -> bool:
    if app.publishing.unacked:
        return True
    for tree in app.state.trees.values():
        st = tree.stream
        if st.held or st.catch_up_after is not None or not tree.attached:
            return True
    return False


@dataclass(frozen=True)
class _Timeline:
    subscribe_at: float
    publish_from: float
    publish_until: float
    crash_at: float
    end: float

    @staticmethod
    def of(scenario: ScribeScenario, ready_at: float) -> _Timeline:
        publish_from = ready_at + scenario.subscribe_window + scenario.settle
        publish_until = publish_from + scenario.publish_window
        if scenario.duration is not None:
            publish_until = scenario.duration - scenario.drain
            if publish_until <= publish_from:
                raise ValueError(f"publishing starts at {publish_from:g} s (ring ready, "
                                 f"subscriptions made, settled) but must end by "
                                 f"{publish_until:g} s: raise the duration")
        crash_at = scenario.crash_at if scenario.crash_at is not None else \
            publish_from + (publish_until - publish_from) / 4
        return _Timeline(ready_at, publish_from, publish_until, crash_at,
                         publish_until + scenario.drain)


@dataclass
class SkippedCalls:
    """Application calls the scenario drew for a node that had crashed by then: they are
    not made (an application on a crashed host makes none), only counted."""

    subscribe: int = 0
    publish: int = 0

    def call(self, sim: Simulator, node: RingNode, kind: str,
             call: Callable[[Any, float], Any]) -> None:
        if not sim.alive(node.address):
            setattr(self, kind, getattr(self, kind) + 1)
            return
        sim.invoke(node.address, call)


def _schedule(sim: Simulator, scenario: ScribeScenario, ring: Ring, nodes: list[RingNode],
              timeline: _Timeline, skipped: SkippedCalls) -> list[RingNode]:
    rng = sim.rng
    sub_id = 0
    for t in range(scenario.topics):
        topic = f"topic-{t}"
        for _ in range(scenario.subscribers):
            sub_id += 1
            node = rng.choice(nodes)
            text = rng.choice(FILTER_MIX)
            group = f"g{rng.randrange(scenario.group_names)}" \
                if rng.random() < scenario.groups else None
            sim.at(timeline.subscribe_at + rng.uniform(0, scenario.subscribe_window),
                   lambda n=node, s=sub_id, f=text, g=group, tp=topic: skipped.call(
                       sim, n, "subscribe",
                       lambda core, now: core.app.subscribe(now, tp, f, s, group=g)))
    crashed = _crash_set(scenario, ring, nodes, rng)
    if crashed:
        sim.at(timeline.crash_at, lambda: [ring.crash(sim, node) for node in crashed])
    for _ in range(scenario.publishes):
        at = rng.uniform(timeline.publish_from, timeline.publish_until)
        topic = f"topic-{rng.randrange(scenario.topics)}"
        attrs = random_event(rng)
        publishers = nodes if at < timeline.crash_at else \
            [n for n in nodes if n not in crashed]
        node = rng.choice(publishers)
        sim.at(at, lambda n=node, tp=topic, a=attrs: skipped.call(
            sim, n, "publish", lambda core, now: core.app.publish(
                now, tp, a, b"payload", reliable=scenario.reliable)))
    return crashed


def _crash_set(scenario: ScribeScenario, ring: Ring, nodes: list[RingNode],
               rng: Any) -> list[RingNode]:
    count = round(scenario.crash * len(nodes))
    if count == 0:
        return []
    chosen: list[RingNode] = []
    by_id = sorted(nodes, key=_ring_id)
    for t in range(min(scenario.crash_roots, scenario.topics, count)):
        key = hash_id(f"topic-{t}", ring.bits)
        root = next(n for n in nodes if n.is_responsible(key))
        at = by_id.index(root)
        for k in range(scenario.crash_successors + 1):
            node = by_id[(at + k) % len(by_id)]
            if node not in chosen and len(chosen) < count:
                chosen.append(node)
    others = [n for n in nodes if n not in chosen]
    chosen += rng.sample(others, count - len(chosen))
    return chosen


def _ring_id(node: RingNode) -> int:
    local = getattr(node, "local", None)
    return local.id if local is not None else 0


def summarize(trace_dir: Path, scenario: ScribeScenario, timeline: _Timeline,
              crashed: list[RingNode]) -> dict[str, Any]:
    check = TraceCheck(trace_dir)
    delivery = check.delivery()
    summary: dict[str, Any] = {
        "nodes": scenario.nodes, "topics": scenario.topics,
        "subscriptions": scenario.topics * scenario.subscribers,
        "publishes": scenario.publishes, "summaries": scenario.summaries,
        "max_children": scenario.max_children, "groups": scenario.groups,
        **{k: delivery[k] for k in ("delivery_ratio", "false_deliveries", "duplicates",
                                    "group_extra", "expected", "group_services")},
        **check.trees(at=timeline.publish_until),
        "half_log2_n": round(0.5 * math.log2(scenario.nodes), 3),
        **check.cost(),
        "stress": check.stress(at=timeline.publish_until),
        "reliability": check.reliability(),
    }
    if crashed:
        live = TraceCheck(trace_dir, live_only=True)
        last = live.last_time(("tree", "repair", "child"), after=timeline.crash_at)
        repaired_at = timeline.crash_at if last is None else last
        after = live.delivery(after=repaired_at)
        summary.update(crashed=len(crashed), crash_at=timeline.crash_at,
                       repair_time=round(repaired_at - timeline.crash_at, 3),
                       events_after_repair=after["events"],
                       delivery_ratio_after_repair=after["delivery_ratio"],
                       false_after_repair=after["false_deliveries"],
                       duplicates_after_repair=after["duplicates"])
    return summary

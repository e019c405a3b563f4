"""Chord in the simulator: build a ring, issue lookups, fail nodes, summarize.

Timeline: the ring forms (``join``: node i joins through a random earlier node at
``i * join_spacing`` seconds; ``oracle``: correct tables at time 0), then warms up until
``warmup`` (default: 20 stabilize periods after the last join). Lookups for random keys
start at random times from random live nodes between the warm-up and ``drain`` seconds
before the end; one counts as ok when it returns the true owner, ``succ(key)`` over the
live nodes that completed their join, when it ends. Optional: a share ``crash`` of the
nodes fails at once at ``crash_at`` (the ring is checked every stabilize period until it
is correct again over the survivors; lookups are summarized before the failure, during
the repair, in its first stabilize period and after the repair); Poisson ``churn``: from
the warm-up on, nodes join and nodes fail, each at that rate per second (the paper's
section 6.5 experiment).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chord.config import ChordConfig
from chord.kbr import NodeRef
from overlay.core.effects import Notice
from overlay.sim.engine import Simulator
from overlay.sim.network import NetworkConfig
from overlay.sim.scenarios.chord_world import ChordWorld

BOOTSTRAPS = ("join", "oracle")


@dataclass(frozen=True)
class ChordScenario:
    nodes: int = 100
    duration: float = 300.0
    lookups: int = 0
    bootstrap: str = "join"
    #: Share of the live nodes that fail together at ``crash_at`` (0: none).
    crash: float = 0.0
    crash_at: float | None = None
    #: Joins per second and failures per second (each) from the warm-up on.
    churn: float = 0.0
    loss: float = 0.0
    #: Mean period of stabilize, fix_fingers and check_predecessor (the paper's
    #: experiments use 30 s; 5 s keeps a 1000-node run of 300 s within seconds of CPU).
    stabilize_interval: float = 5.0
    bits: int = 128
    successors: int = 8
    join_spacing: float = 0.1
    warmup: float | None = None
    drain: float = 10.0
    seed: int = 1

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.lookups < 0 or self.duration <= 0:
            raise ValueError("nodes must be >= 1, lookups >= 0 and duration > 0")
        if self.bootstrap not in BOOTSTRAPS:
            raise ValueError(f"bootstrap must be one of {', '.join(BOOTSTRAPS)}")
        if not 0.0 <= self.crash < 1.0 or self.churn < 0 or self.join_spacing <= 0:
            raise ValueError("crash must be within [0, 1), churn >= 0, join_spacing > 0")
        if self.crash and self.crash_at is None:
            raise ValueError("--crash needs --crash-at")
        if self.ready_at >= self.duration - self.drain:
            raise ValueError(f"the ring is ready at {self.ready_at:g} s, but lookups must end "
                             f"by {self.duration - self.drain:g} s: raise --duration")

    @property
    def ready_at(self) -> float:
        if self.warmup is not None:
            return self.warmup
        formed = (self.nodes - 1) * self.join_spacing if self.bootstrap == "join" else 0.0
        return formed + 20 * self.stabilize_interval

    def chord_config(self) -> ChordConfig:
        return ChordConfig(bits=self.bits, successors=self.successors,
                           merge_interval=10 * self.stabilize_interval,
                           ).with_maintenance_interval(self.stabilize_interval)


@dataclass
class LookupRecord:
    started: float
    origin: str
    ended: float | None = None
    hops: int = 0
    owner: NodeRef | None = None
    ok: bool = False


@dataclass
class _Run:
    scenario: ChordScenario
    sim: Simulator
    world: ChordWorld
    records: list[LookupRecord] = field(default_factory=list)
    crashed: int = 0
    repaired_at: float | None = None
    joins: int = 0
    failures: int = 0


def run_chord(scenario: ChordScenario, trace_dir: Path | None = None,
              run_id: str | None = None, check_wire: bool = False) -> dict[str, Any]:
    """Run the scenario; returns the summary (one JSON object)."""
    started = time.perf_counter()
    sim = Simulator(scenario.seed, NetworkConfig(loss=scenario.loss), trace_dir=trace_dir,
                    run_id=run_id, check_wire=check_wire)
    run = _Run(scenario, sim, ChordWorld(sim, scenario.chord_config()))
    sim.on_notice.append(lambda addr, notice, now: _lookup_ended(run, notice, now))
    _form_ring(run)
    _schedule_lookups(run)
    if scenario.crash:
        assert scenario.crash_at is not None
        sim.at(scenario.crash_at, lambda: _crash_many(run))
    if scenario.churn:
        _schedule_churn(run, scenario.ready_at)
    sim.run(until=scenario.duration)
    for node in run.world.live():
        sim.invoke(node.address, lambda core, now: core.trace("node_down", reason="stop"))
    sim.close()
    summary = summarize(run)
    summary["wall_s"] = round(time.perf_counter() - started, 3)
    return summary


def _form_ring(run: _Run) -> None:
    scenario, sim, world = run.scenario, run.sim, run.world
    if scenario.bootstrap == "oracle":
        world.bootstrap_oracle(scenario.nodes)
        return
    nodes = [world.spawn() for _ in range(scenario.nodes)]
    world.create(nodes[0])
    for i in range(1, len(nodes)):
        seed = nodes[sim.rng.randrange(i)]
        sim.at(i * scenario.join_spacing, lambda n=nodes[i], s=seed: world.join(n, s))


def _schedule_lookups(run: _Run) -> None:
    scenario, sim = run.scenario, run.sim
    end = scenario.duration - scenario.drain
    for _ in range(scenario.lookups):
        sim.at(sim.rng.uniform(scenario.ready_at, end), lambda: _start_lookup(run))


def _start_lookup(run: _Run) -> None:
    sim, world = run.sim, run.world
    members = world.live()
    if not members:
        return
    origin = members[sim.rng.randrange(len(members))]
    key = sim.rng.getrandbits(run.scenario.bits)
    tag = len(run.records)
    run.records.append(LookupRecord(sim.now, origin.address))
    sim.invoke(origin.address, lambda core, now: core.lookup(now, key, tag=tag))


def _lookup_ended(run: _Run, notice: Notice, now: float) -> None:
    if notice.kind != "lookup":
        return
    record = run.records[notice.data["tag"]]
    record.ended = now
    record.hops = notice.data["hops"]
    record.owner = notice.data["owner"]
    record.ok = record.owner is not None and record.owner == run.world.true_owner(
        notice.data["key"])


def _crash_many(run: _Run) -> None:
    sim, world = run.sim, run.world
    members = world.live()
    victims = sim.rng.sample(members, round(run.scenario.crash * len(members)))
    for node in victims:
        world.crash(node)
    run.crashed = len(victims)
    _watch_repair(run)


def _watch_repair(run: _Run) -> None:
    """Check the survivors' successors and predecessors every stabilize period."""
    if not run.world.errors(fingers=False, limit=1):
        run.repaired_at = run.sim.now
        return
    run.sim.at(run.sim.now + run.scenario.stabilize_interval, lambda: _watch_repair(run))


def _schedule_churn(run: _Run, start: float) -> None:
    sim, rate = run.sim, run.scenario.churn
    end = run.scenario.duration - run.scenario.drain

    def join_next(at: float) -> None:
        if at < end:
            sim.at(at, lambda: (_churn_join(run), join_next(at + sim.rng.expovariate(rate))))

    def fail_next(at: float) -> None:
        if at < end:
            sim.at(at, lambda: (_churn_fail(run), fail_next(at + sim.rng.expovariate(rate))))

    join_next(start + sim.rng.expovariate(rate))
    fail_next(start + sim.rng.expovariate(rate))


def _churn_join(run: _Run) -> None:
    members = run.world.live()
    if members:
        seed = members[run.sim.rng.randrange(len(members))]
        run.world.join(run.world.spawn(), seed)
        run.joins += 1


def _churn_fail(run: _Run) -> None:
    members = run.world.live()
    if len(members) > 1:
        run.world.crash(members[run.sim.rng.randrange(len(members))])
        run.failures += 1


# -- summary ---------------------------------------------------------------------------------


def lookup_stats(records: list[LookupRecord]) -> dict[str, Any]:
    """ok_rate over every lookup started; hops over those that returned an owner;
    ``no_owner``: lookups that ended without one (gave up)."""
    hops = sorted(r.hops for r in records if r.owner is not None)
    return {
        "lookups": len(records),
        "ok_rate": round(sum(r.ok for r in records) / len(records), 4) if records else None,
        "no_owner": sum(r.ended is not None and r.owner is None for r in records),
        "hops_mean": round(sum(hops) / len(hops), 3) if hops else None,
        "hops_p1": nearest_rank(hops, 0.01),
        "hops_p99": nearest_rank(hops, 0.99),
    }


def nearest_rank(ordered: list[int], q: float) -> int | None:
    if not ordered:
        return None
    return ordered[max(math.ceil(q * len(ordered)), 1) - 1]


def summarize(run: _Run) -> dict[str, Any]:
    scenario, world = run.scenario, run.world
    # A lookup whose origin failed before it ended has nobody left to answer to.
    orphaned = [r for r in run.records if r.ended is None and not run.sim.alive(r.origin)]
    records = [r for r in run.records if r not in orphaned]
    summary: dict[str, Any] = {"nodes": scenario.nodes, **lookup_stats(records)}
    summary.update(
        half_log2_n=round(0.5 * math.log2(scenario.nodes), 3) if scenario.nodes > 1 else 0.0,
        live_nodes=len(world.live()),
        ring_errors=len(world.errors(fingers=False, limit=10**9)),
        messages=run.sim.stats.messages_sent, sim_events=run.sim.stats.events,
        orphaned_lookups=len(orphaned))
    if scenario.crash:
        assert scenario.crash_at is not None
        repaired = run.repaired_at
        repair_s = None if repaired is None else round(repaired - scenario.crash_at, 3)
        summary.update(crashed=run.crashed, repair_s=repair_s)
        end_of_repair = repaired if repaired is not None else math.inf
        summary["before_crash"] = lookup_stats(
            [r for r in records if r.started < scenario.crash_at])
        summary["during_repair"] = lookup_stats(
            [r for r in records if scenario.crash_at <= r.started < end_of_repair])
        # Right after the failure: started within one (mean) stabilize period of it.
        first_end = min(scenario.crash_at + scenario.stabilize_interval, end_of_repair)
        summary["first_period"] = lookup_stats(
            [r for r in records if scenario.crash_at <= r.started < first_end])
        summary["after_repair"] = lookup_stats(
            [r for r in records if r.started >= end_of_repair])
    if scenario.churn:
        summary.update(churn_joins=run.joins, churn_failures=run.failures)
    return summary

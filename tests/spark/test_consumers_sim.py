"""Durable consumers end to end: a seeded simulation writes its traces through the
nodes' own tracer, the Spark job reads them, and its ``consumers`` section is checked
against a plain-Python reading of the same lines (tests/spark/consumer_oracle.py).

Four consumers of one topic, each showing one way an event goes: ``workers`` (a work
queue whose member on node 2 hangs, then its node crashes: its events are redelivered
to node 7), ``audit`` (acknowledges even tasks, ends every third, leaves the rest
unanswered: they are redelivered once, then dead-lettered and dropped, but for the two
whose ttl passes first, which are excluded), ``late`` (attaches after ten tasks were
published, which it gets all the same, and never answers task 30: still in flight when
the run ends, so lost), ``gone`` (acknowledges the first ten tasks only, and is
deleted with the rest pending).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from overlay.core.pubsub import DeliveredEvent
from overlay.core.storage import SyncPolicy
from overlay.sim.engine import Simulator
from overlay.sim.scenarios.chord_world import sim_address
from scribe.consumer_values import ConsumerConfig
from spark_analysis.analysis import run_analysis
from tests.scribe.test_durable_sim import World, place_nodes
from tests.spark import consumer_oracle, oracle

pytestmark = pytest.mark.spark

TOPIC, TASKS = "tasks", 40
#: name -> (member's node, sub, attach time, settings)
CONSUMERS = {
    "workers": (2, 1, 0.5, ConsumerConfig(ack=True, ack_wait=2.0, max_inflight=4)),
    "audit": (5, 3, 0.5, ConsumerConfig(ack=True, ack_wait=1.0, max_deliver=2)),
    "late": (9, 4, 9.05, ConsumerConfig(ack=True, ack_wait=60.0)),
    "gone": (4, 5, 0.5, ConsumerConfig(ack=True, ack_wait=60.0)),
}
#: Tasks 20 to 24 (published 10.0 to 10.4) may be delivered for 1.5 s: audit's odd ones
#: are past it when their second ack wait ends.
SHORT_LIVED, TTL = range(20, 25), 1.5
DETACH_GONE_AT, DELETE_GONE_AT = 10.45, 10.55
SECOND_WORKER = 7  # the other member of ``workers``
CRASH_AT = 10.0  # node 2 (a worker) crashes; it stops answering a second before


def answer(name: str, addr: str, task: int, now: float) -> str | None:
    """What the member does with ``task``: ``ack``, ``term`` or nothing (None)."""
    if name == "workers":
        return None if addr == sim_address(2) and now >= CRASH_AT - 1.0 else "ack"
    if name == "audit":
        return "ack" if task % 2 == 0 else ("term" if task % 3 == 1 else None)
    if name == "gone":
        return "ack" if task < 10 else None
    return None if task == 30 else "ack"


def simulate(traces: Path) -> None:
    world = World(Simulator(11, trace_dir=traces, sync=SyncPolicy("always")))
    place_nodes(world, 12)
    sim = world.sim
    members = {(sim_address(node), sub): name for name, (node, sub, _, _) in CONSUMERS.items()}
    members[(sim_address(SECOND_WORKER), 2)] = "workers"

    def on_deliver(addr: str, sub_id: int, event: DeliveredEvent, now: float) -> None:
        name = members.get((addr, sub_id))
        if name is None:
            return
        op = answer(name, addr, int(event.attrs["i"]), now)
        if op is not None:
            sim.at(now + 0.05, lambda: sim.alive(addr) and sim.invoke(
                addr, lambda core, t: core.app.durable_ack(t, sub_id, op, (event.msg_id,))))

    sim.on_deliver.append(on_deliver)
    for (addr, sub), name in members.items():
        at, config = CONSUMERS[name][2], CONSUMERS[name][3]
        sim.at(at, lambda a=addr, s=sub, n=name, c=config: sim.invoke(
            a, lambda core, now: core.app.durable_subscribe(now, TOPIC, n, s, "", c)))
    # Every task is published (none from the node that crashes).
    publishers = [a for a in sorted(world.nodes) if a != sim_address(2)]
    for i in range(TASKS):
        addr = publishers[(3 * i + 1) % len(publishers)]
        sim.at(8.0 + 0.1 * i, lambda a=addr, i=i: sim.alive(a) and sim.invoke(
            a, lambda core, now: core.app.publish(
                now, TOPIC, {"i": i}, b"task", f"{i + 1:032x}", reliable=True,
                ttl=TTL if i in SHORT_LIVED else None)))
    sim.at(CRASH_AT, lambda: sim.crash(sim_address(2)))
    # gone's member leaves first, so that no renewal of its lease makes it again.
    gone = sim_address(CONSUMERS["gone"][0])
    sim.at(DETACH_GONE_AT, lambda: sim.invoke(
        gone, lambda core, now: core.app.durable_unsubscribe(now, CONSUMERS["gone"][1])))
    sim.at(DELETE_GONE_AT, lambda: sim.invoke(
        gone, lambda core, now: core.app.consumers_query(now, 1, TOPIC, "gone", delete=True)))
    sim.run(until=30.0)
    sim.close()


def test_simulated_consumers_against_plain_python(spark: SparkSession, tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    simulate(traces)
    run_analysis(spark, str(traces), tmp_path / "out")
    summary: dict[str, Any] = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["bad_lines"] == 0, summary["bad_line_samples"]
    oracle.assert_summary_matches(summary, oracle.analyze(traces))  # the rest of it
    # A work queue's members each get a share: no delivery of theirs is a false one.
    assert summary["overall"]["false_deliveries"] == 0
    want = consumer_oracle.analyze(traces)
    assert want is not None
    oracle.assert_summary_matches(summary["consumers"], want)
    assert set(summary["consumers"]["per_consumer"][TOPIC]) == set(CONSUMERS)
    # The run shows what it was built to show, read off the summary.
    per = summary["consumers"]["per_consumer"][TOPIC]
    assert per["workers"]["redelivered"] > 0 and per["workers"]["lost"] == 0
    assert per["workers"]["acknowledged"] == TASKS and per["workers"]["members"] == 2
    odd_unanswered = [i for i in range(1, TASKS, 2) if i % 3 != 1]
    too_old = [i for i in odd_unanswered if i in SHORT_LIVED]  # 21 and 23
    assert per["audit"]["excluded"] == len(too_old) == 2
    assert per["audit"]["dead_lettered"] == len(odd_unanswered) - len(too_old)
    assert per["audit"]["terminated"] == sum(1 for i in range(1, TASKS, 2) if i % 3 == 1)
    assert per["audit"]["acknowledged"] == TASKS // 2 and per["audit"]["none_lost"]
    assert per["late"]["expected"] == TASKS and per["late"]["lost"] == 1
    assert per["gone"]["deleted_ts"] is not None and per["gone"]["acknowledged"] == 10
    assert per["gone"]["pending_at_delete"] > 0 and per["gone"]["lost"] == 0
    assert summary["consumers"]["overall"]["lost"] == 1
    assert "Durable consumers" in (tmp_path / "out" / "report.html").read_text()

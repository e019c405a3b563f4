"""Real daemons, real API: ``deploy.cluster`` starts five ``overlay daemon`` processes on
loopback (ports chosen by the kernel, reported through daemon.json); applications
subscribe with filters and publish through the local socket API.

Every wait is on a condition with a deadline; the cluster is torn down at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from deploy import cluster
from overlay.client import AsyncClient, BadFilter, Event, NotReady, Timeout, connect
from tests.integration.fast import running_cluster

pytestmark = pytest.mark.integration



@pytest.fixture
def ring(tmp_path: Path) -> Iterator[cluster.Inventory]:
    yield from running_cluster(tmp_path / "cluster", 5, timeout=60.0)


async def collect(sub: object, into: list[Event], until: trio.Event) -> None:
    async for event in sub:  # type: ignore[attr-defined]  # the client's subscription is an async iterator
        into.append(event)
        until.set()


async def publish_until_taken(api: str, topic: str, attrs: dict[str, object],
                              msg_id: str, deadline: float) -> int | None:
    """Publish with one msg_id until the root takes it (retries are idempotent)."""
    with trio.fail_after(deadline):
        while True:
            async with connect(api) as client:
                try:
                    return (await client.publish(topic, b"x", attrs=attrs,  # type: ignore[arg-type]  # attrs built from a dict of mixed value types
                                                 msg_id=msg_id)).seq
                except (NotReady, Timeout):
                    await trio.sleep(0.2)


def real(events: list[Event]) -> list[Event]:
    """The events that were not probes."""
    return [e for e in events if "probe" not in e.attrs]


async def test_filtered_events_reach_matching_subscribers_on_other_hosts(
        ring: cluster.Inventory) -> None:
    n = ring.nodes
    cheap: list[Event] = []
    every: list[Event] = []
    got_cheap, got_every = trio.Event(), trio.Event()
    async with connect(n[1].api) as c1, connect(n[3].api) as c3, connect(n[4].api) as pub:
        assert c1.hello["mode"] == "structured" and c1.hello["node"] == n[1].node
        with pytest.raises(BadFilter) as bad:
            async with c1.subscribe("prices", "price >"):
                pass
        assert bad.value.pos == 7
        async with c1.subscribe("prices", "price < 100") as s1, \
                c3.subscribe("prices", "") as s3, trio.open_nursery() as nursery:
            nursery.start_soon(collect, s1, cheap, got_cheap)
            nursery.start_soon(collect, s3, every, got_every)
            # Subscriptions take effect once their JOIN reached the tree (an event the
            # root numbered before that is not theirs): probe until both heard one.
            with trio.fail_after(30):
                probe = 0
                while not (got_cheap.is_set() and got_every.is_set()):
                    probe += 1
                    await pub.publish("prices", b"x", attrs={"price": 1, "probe": probe})
                    with trio.move_on_after(0.5):
                        await got_cheap.wait()
                        await got_every.wait()
            # A retried msg_id is numbered once, and not delivered again.
            seqs = {(await pub.publish("prices", b"x", attrs={"price": 1},
                                       msg_id="00" * 16)).seq for _ in range(3)}
            assert len(seqs) == 1, "a retried msg_id was numbered twice"
            for price in (150, 50, 250, 99):
                await pub.publish("prices", b"x", attrs={"price": price})
            with trio.fail_after(20):
                while len(real(every)) < 5 or len(real(cheap)) < 3:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    assert [e.attrs["price"] for e in real(cheap)] == [1, 50, 99]
    assert [e.attrs["price"] for e in real(every)] == [1, 150, 50, 250, 99]
    seq = [e.seq for e in every]
    assert seq == sorted(seq) and len(set(seq)) == len(seq), "in seq order, each once"
    assert {e.publisher for e in every} == {n[4].node}


async def test_events_flow_again_after_a_daemon_is_killed(ring: cluster.Inventory) -> None:
    n = ring.nodes
    received: list[Event] = []
    got = trio.Event()
    async with connect(n[2].api) as sub_client, connect(n[0].api) as pub, \
            sub_client.subscribe("alerts", "level >= 3") as sub, trio.open_nursery() as nursery:
        nursery.start_soon(collect, sub, received, got)
        with trio.fail_after(30):
            while not got.is_set():  # until the subscription is in the tree
                await pub.publish("alerts", b"x", attrs={"level": 5})
                with trio.move_on_after(0.5):
                    await got.wait()
        # Kill two daemons that are neither the subscriber's nor the publisher's.
        victims = cluster.kill(ring, names=[n[1].name, n[3].name])
        assert all(not cluster.pid_alive(v.pid) for v in victims)
        # The ring and the tree repair themselves: publish one event (retried with its
        # msg_id until acknowledged) and wait until the subscriber has it (a branch
        # being rebuilt catches up on it).
        probe = "22" * 16
        with trio.fail_after(45):
            while probe not in {e.msg_id for e in received}:
                with trio.move_on_after(1.0):
                    await publish_until_taken(n[0].api, "alerts", {"level": 4}, probe, 45)
                await trio.sleep(0.3)
        before = len(received)
        for i in range(5):
            await publish_until_taken(n[0].api, "alerts", {"level": 3 + i % 2},
                                      f"{i + 2:032x}", deadline=30)
        with trio.fail_after(30):
            while len({e.msg_id for e in received[before:]}) < 5:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    after = received[before:]
    assert {e.msg_id for e in after} == {f"{i + 2:032x}" for i in range(5)}
    assert len(after) == len({e.msg_id for e in after}), "an event was delivered twice"


def test_daemon_json_and_status_describe_each_node(ring: cluster.Inventory) -> None:
    for node in ring.nodes:
        info = json.loads((Path(node.state_dir) / "daemon.json").read_text())
        assert info["pid"] == node.pid and info["node"] == node.node
        assert os.path.isabs(info["api"]) and Path(info["api"]).exists()
        status = cluster.node_status(node)
        assert status is not None and status["ready"] is True
        assert status["address"] == node.address
    # Everyone's successor is the next node on the sorted ring.
    ordered = sorted(ring.nodes, key=lambda e: int(e.node, 16))
    for i, node in enumerate(ordered):
        status = cluster.node_status(node)
        assert status is not None
        assert status["successor"]["node"] == ordered[(i + 1) % len(ordered)].node


def overlay_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "overlay.cli", *args], capture_output=True,
                          text=True, timeout=60, check=False)


async def test_ring_and_tree_commands_show_the_live_overlay(ring: cluster.Inventory) -> None:
    n = ring.nodes
    members = {n[1].node, n[2].node, n[4].node}
    async with connect(n[1].api) as c1, connect(n[2].api) as c2, connect(n[4].api) as c4, \
            c1.subscribe("maps", ""), c2.subscribe("maps", "x > 1"), c4.subscribe("maps", ""):
        async def attached(client: AsyncClient) -> bool:
            tree = (await client.status())["topics"].get("maps", {})
            return tree.get("parent") is not None or tree.get("role") == "root"

        with trio.fail_after(30):  # until each subscriber's node is attached to the tree
            while not (await attached(c1) and await attached(c2) and await attached(c4)):
                await trio.sleep(0.1)
        walked = await trio.to_thread.run_sync(overlay_cli, "ring", "--api", n[3].api, "--json")
        tree = await trio.to_thread.run_sync(overlay_cli, "tree", "maps", "--api", n[0].api,
                                             "--json")
    assert walked.returncode == 0, walked.stderr
    order = [json.loads(line)["node"] for line in walked.stdout.splitlines()]
    assert order[0] == n[3].node and sorted(order) == sorted(e.node for e in n)
    start = sorted(order).index(order[0])
    assert order == sorted(order)[start:] + sorted(order)[:start]  # ring order from n3
    assert tree.returncode == 0, tree.stderr
    nodes = {r["node"]: r for r in map(json.loads, tree.stdout.splitlines())}
    (root,) = [r for r in nodes.values() if r["role"] == "root"]
    assert root["depth"] == 0 and root["parent"] is None
    assert {k for k, r in nodes.items() if r["subscriptions"]} == members
    for record in nodes.values():
        if record["parent"] is not None:
            assert nodes[record["parent"]]["depth"] == record["depth"] - 1
            assert record["node"] in nodes[record["parent"]]["children"]


def test_a_short_expiry_ends_the_subscription_after_its_reply(ring: cluster.Inventory) -> None:
    """The expiry clock starts at the subscribe reply: on a new topic whose tree takes a
    moment to carry the subscription, an expiry far shorter than that still ends the
    subscription only after the client was given its handle (API.md, subscribe)."""
    from overlay.client import BlockingClient

    n = ring.nodes
    for i in range(5):
        with BlockingClient.connect(n[i].api, timeout=20.0) as client:
            started = time.monotonic()
            sub = client.subscribe(f"fresh-expiry-{i}", expiry=0.05)
            replied = time.monotonic()
            assert client._events == []  # nothing came before the reply
            pushes = client.events()
            assert next(pushes) == sub  # the expired push, for the handle it was given
            # The daemon's clock starts when it writes the reply, which is after the
            # request was sent: measured from there (a loaded client may read the reply
            # late, then the push at once, so the time from the reply read says nothing).
            assert time.monotonic() - started >= 0.05
            assert replied - started < 10

"""Issue 6 on real daemons: twelve ``overlay daemon`` processes on loopback; the root of a
topic is killed with SIGKILL in the middle of a stream of reliable publishes. Every event
whose publish was acknowledged reaches every subscriber once, in seq order.

Every wait is on a condition with a deadline; the cluster is torn down at the end."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from deploy import cluster
from overlay.client import ConnectionLost, Event, NotReady, Timeout, connect
from overlay.core.ids import hash_id
from tests.integration.fast import running_cluster

pytestmark = pytest.mark.integration

TOPIC = "orders"
BEFORE_KILL = 15
TOTAL = 45


@pytest.fixture
def ring(tmp_path: Path) -> Iterator[cluster.Inventory]:
    yield from running_cluster(tmp_path / "cluster", 12, timeout=90.0)


def root_of(inventory: cluster.Inventory, topic: str) -> cluster.NodeEntry:
    """The node responsible for the topic's key: the first id at or after it."""
    key = hash_id(topic, len(inventory.nodes[0].node) * 4)
    ranked = sorted(inventory.nodes, key=lambda n: int(n.node, 16))
    return next((n for n in ranked if int(n.node, 16) >= key), ranked[0])


async def publish_acknowledged(api: str, msg_id: str, number: int) -> int:
    """Publish one reliable event until acknowledged (same msg_id on every try)."""
    with trio.fail_after(60):
        while True:
            try:
                async with connect(api) as client:
                    reply = await client.publish(TOPIC, b"x", attrs={"n": number},
                                                 msg_id=msg_id)
                    return reply.seq
            except (NotReady, Timeout, ConnectionLost):
                await trio.sleep(0.2)


async def test_no_acknowledged_event_is_lost_or_repeated_when_the_root_is_killed(
        ring: cluster.Inventory) -> None:
    root = root_of(ring, TOPIC)
    others = [n for n in ring.nodes if n.name != root.name]
    publisher, subscribers = others[0], others[1:5]
    received: dict[str, list[Event]] = {n.name: [] for n in subscribers}

    async def listen(node: cluster.NodeEntry, ready: trio.Event,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with connect(node.api) as client, client.subscribe(TOPIC, "") as sub:
            task_status.started()
            async for event in sub:
                received[node.name].append(event)
                ready.set()

    async with trio.open_nursery() as nursery:
        readiness = []
        for node in subscribers:
            ready = trio.Event()
            readiness.append(ready)
            await nursery.start(listen, node, ready)
        # Wait until every subscription is in the tree: probe (an event the root
        # numbered before a subscription joined is not that subscription's).
        with trio.fail_after(45):
            probe = 0
            while not all(r.is_set() for r in readiness):
                probe += 1
                await publish_acknowledged(publisher.api, f"ee{probe:030x}", -1)
                with trio.move_on_after(0.5):
                    for r in readiness:
                        await r.wait()
        acknowledged: list[str] = []
        for i in range(TOTAL):
            if i == BEFORE_KILL:
                [victim] = cluster.kill(ring, names=[root.name])
                assert not cluster.pid_alive(victim.pid)
            msg_id = f"{i + 1:032x}"
            await publish_acknowledged(publisher.api, msg_id, i)
            acknowledged.append(msg_id)
        with trio.fail_after(60):
            while any(not set(acknowledged) <= {e.msg_id for e in got}
                      for got in received.values()):
                await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    # A late subscriber asks the new root for the last five events it retains.
    replayed: list[Event] = []
    async with connect(publisher.api) as client, client.subscribe(TOPIC, "", last=5) as sub:
        with trio.fail_after(30):
            async for event in sub:
                replayed.append(event)
                if len(replayed) == 5:
                    break
    assert [e.msg_id for e in replayed] == acknowledged[-5:]
    for name, got in received.items():
        counts = Counter(e.msg_id for e in got)
        assert not [m for m, c in counts.items() if c > 1], f"{name}: delivered twice"
        seqs = [e.seq for e in got]
        assert seqs == sorted(seqs), f"{name}: out of seq order {seqs}"
        assert set(acknowledged) <= set(counts), f"{name}: lost events"

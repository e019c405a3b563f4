"""Real daemons (4 on loopback) with every size the API accepts: bursts of large reliable
events to subscribers on other nodes, the same through gap repair, replays of large
events, filters at each limit, and one byte over the payload limit refused.

Every wait is on a condition with a deadline; the cluster is torn down at the end."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import trio

from deploy import cluster
from overlay.client import AsyncClient, BadFilter, Event, Timeout, TooLarge, connect
from overlay.core.limits import SizeLimits
from tests.integration.fast import FAST

pytestmark = pytest.mark.integration

SIZES = SizeLimits()
KIB64 = 64 << 10

#: Short peer queues: a member stopped for a moment loses the copies sent to it.
SMALL_QUEUES = FAST + "\n[limits]\npeer_queue_frames = 32\n"


def _cluster(directory: Path, extra_config: str) -> Iterator[cluster.Inventory]:
    inventory = cluster.up(directory, 4, extra_config=extra_config, timeout=60.0)
    try:
        yield inventory
    finally:
        outcome = cluster.down(inventory, grace=15.0)
        assert set(outcome.values()) <= {"stopped", "not running"}, outcome


@pytest.fixture
def ring(tmp_path: Path) -> Iterator[cluster.Inventory]:
    yield from _cluster(tmp_path / "cluster", FAST)


@pytest.fixture
def lossy_ring(tmp_path: Path) -> Iterator[cluster.Inventory]:
    yield from _cluster(tmp_path / "cluster", SMALL_QUEUES)


def topic_elsewhere(inventory: cluster.Inventory, avoid: set[str], prefix: str) -> str:
    """A topic whose root is none of the nodes in ``avoid`` (so events cross the ring)."""
    from overlay.core.ids import hash_id

    ids = sorted(int(n.node, 16) for n in inventory.nodes)
    for i in range(1000):
        topic = f"{prefix}-{i}"
        key = hash_id(topic, 128)
        owner = next((x for x in ids if x >= key), ids[0])
        if f"{owner:032x}" not in avoid:
            return topic
    raise AssertionError("no such topic")


async def publish_all(client: AsyncClient, topic: str, payloads: list[bytes],
                      first: int = 0, parallel: int = 16) -> list[int]:
    """Publish every payload reliably, attribute ``i`` its index from ``first`` (a retry
    after a timeout keeps its msg_id); the seqs the root gave."""
    seqs: list[int] = []

    async def one(i: int, payload: bytes) -> None:
        msg_id = f"{i:08x}" + os.urandom(8).hex()
        while True:
            try:
                result = await client.publish(topic, payload, attrs={"i": i}, msg_id=msg_id)
                break
            except Timeout:
                continue
        assert result.seq is not None
        seqs.append(result.seq)

    limiter = trio.CapacityLimiter(parallel)

    async def limited(i: int, payload: bytes) -> None:
        async with limiter:
            await one(i, payload)

    async with trio.open_nursery() as nursery:
        for i, payload in enumerate(payloads, start=first):
            nursery.start_soon(limited, i, payload)
    return seqs


async def receive(sub: object, count: int, into: list[Event], deadline: float) -> None:
    with trio.fail_after(deadline):
        async for event in sub:  # type: ignore[attr-defined]  # the client's subscription is an async iterator
            into.append(event)
            if len(into) == count:
                return


def check_stream(events: list[Event], payloads: list[bytes]) -> None:
    assert len(events) == len(payloads)
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # once each, in seq order
    assert sorted(len(e.payload) for e in events) == sorted(len(p) for p in payloads)
    assert all(e.payload == payloads[e.attrs["i"]] for e in events)  # type: ignore[index]  # the test publishes every event with an int attribute i


async def test_bursts_of_large_events_reach_subscribers_on_other_nodes(
        ring: cluster.Inventory) -> None:
    n = ring.nodes
    topic = topic_elsewhere(ring, {n[1].node, n[2].node}, "large")
    payloads = [os.urandom(KIB64) for _ in range(300)] + \
        [os.urandom(SIZES.max_payload) for _ in range(50)]
    got: list[Event] = []
    async with connect(n[1].api) as sub_client, connect(n[2].api) as pub:
        assert sub_client.hello["max_payload"] == SIZES.max_payload
        async with sub_client.subscribe(topic) as sub, trio.open_nursery() as nursery:
            nursery.start_soon(receive, sub, len(payloads), got, 240.0)
            seqs = await publish_all(pub, topic, payloads)
        assert len(seqs) == len(payloads)
    check_stream(got, payloads)


async def test_large_events_come_through_gap_repair(lossy_ring: cluster.Inventory) -> None:
    """The subscriber's daemon is stopped (SIGSTOP) during a burst: its parent's queue
    to it (32 frames) overflows and copies are dropped; once it runs again it pulls
    what it missed in fills of a message's worth each."""
    n = lossy_ring.nodes
    member = n[3]
    topic = topic_elsewhere(lossy_ring, {member.node, n[0].node}, "repair")
    payloads = [os.urandom(KIB64) for _ in range(300)] + \
        [os.urandom(SIZES.max_payload) for _ in range(20)]
    got: list[Event] = []
    async with connect(member.api) as sub_client, connect(n[0].api) as pub, \
            sub_client.subscribe(topic) as sub, trio.open_nursery() as nursery:
        nursery.start_soon(receive, sub, len(payloads), got, 240.0)
        os.kill(member.pid, signal.SIGSTOP)
        try:
            await publish_all(pub, topic, payloads[:160])
        finally:
            os.kill(member.pid, signal.SIGCONT)
        await publish_all(pub, topic, payloads[160:], first=160)
    check_stream(got, payloads)
    repairs = [json.loads(line) for path in Path(member.trace_dir).glob("*.jsonl*")
               for line in path.read_text().splitlines() if '"repair"' in line]
    assert any(r["ev"] == "repair" and r["topic"] == topic for r in repairs)


async def test_replay_of_large_events_returns_all_of_them(ring: cluster.Inventory) -> None:
    n = ring.nodes
    topic = topic_elsewhere(ring, {n[1].node}, "replay")
    payloads = [os.urandom(KIB64 if i % 2 else SIZES.max_payload) for i in range(40)]
    async with connect(n[2].api) as pub:
        await publish_all(pub, topic, payloads)
    got: list[Event] = []
    async with connect(n[1].api) as late, late.subscribe(topic, last=40) as sub:
        await receive(sub, 40, got, 60.0)
    check_stream(got, payloads)


FILTERS_AT_LIMITS = {
    "chars": "s = '" + "\u00e9" * (4096 - 6) + "'",
    "in_items": "a IN (" + ",".join(str(i) for i in range(1024)) + ")",
    "canonical": "a IN (" + ",".join(["1e15"] * 818) + ")",
    "depth": "(" * 64 + "a = 1" + ")" * 64,
}


async def test_filters_at_each_limit_match_events_published_elsewhere(
        ring: cluster.Inventory) -> None:
    n = ring.nodes
    topic = topic_elsewhere(ring, {n[1].node, n[3].node}, "filters")
    events = {"chars": {"s": "\u00e9" * (4096 - 6)}, "in_items": {"a": 1023},
              "canonical": {"a": 1e15}, "depth": {"a": 1}}
    got: dict[str, list[Event]] = {name: [] for name in FILTERS_AT_LIMITS}
    async with connect(n[1].api) as subs, connect(n[3].api) as pub, AsyncExitStack() as stack:
        handles = {name: await stack.enter_async_context(subs.subscribe(topic, text))
                   for name, text in FILTERS_AT_LIMITS.items()}
        async with trio.open_nursery() as nursery:
            for name, sub in handles.items():
                nursery.start_soon(receive, sub, 1, got[name], 30.0)
            await pub.publish(topic, b"miss", attrs={"a": -1, "s": "x"})  # type: ignore[arg-type]  # attrs built from a dict of mixed value types
            for name, attrs in events.items():
                await pub.publish(topic, name.encode(), attrs=attrs)  # type: ignore[arg-type]  # attrs built from a dict of mixed value types
    for name, received in got.items():
        assert [e.payload for e in received] == [name.encode()]
    async with connect(n[1].api) as c:
        with pytest.raises(BadFilter, match="at most 4096 characters, found 4097"):
            async with c.subscribe(topic, FILTERS_AT_LIMITS["chars"] + " "):
                pass


async def test_one_byte_over_the_payload_limit_is_refused_and_not_published(
        ring: cluster.Inventory) -> None:
    n = ring.nodes
    topic = topic_elsewhere(ring, {n[1].node}, "over")
    got: list[Event] = []
    async with connect(n[1].api) as sub_client, connect(n[2].api) as pub:
        async with sub_client.subscribe(topic) as sub:
            await _refused_then_the_edge(pub, sub, topic, got)
        status = await pub.status()
    assert [len(e.payload) for e in got] == [SIZES.max_payload]
    assert got[0].seq == 1  # nothing was numbered for the refused ones
    assert status["counters"]["internal_errors"] == 0 and status["counters"]["oversized"] == 0


async def _refused_then_the_edge(pub: AsyncClient, sub: object, topic: str,
                                 got: list[Event]) -> None:
    # The client refuses such events itself (it read the limits from hello): told of a
    # larger max_frame, it sends them, as a client that does not check would.
    with pytest.raises(TooLarge):
        await pub.publish(topic, b"x" * (SIZES.max_payload + 1))
    pub.sizes = SizeLimits(4 << 20)
    with pytest.raises(TooLarge) as refused:
        await pub.publish(topic, b"x" * (SIZES.max_payload + 1))
    assert refused.value.extra["max_payload"] == SIZES.max_payload
    with pytest.raises(TooLarge):
        await pub.publish(topic, b"", attrs={"a": "v" * (SIZES.max_event)})
    # The edge itself goes through, after the refused ones: the stream holds only it.
    await pub.publish(topic, b"y" * SIZES.max_payload, attrs={"last": True})
    await receive(sub, 1, got, 30.0)

"""One conformance suite, run over the simulator and over the TCP transport."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from overlay.testing.harness import Harness, sim_harness, tcp_harness
from overlay.testing.pingpong import PingPongCore


@pytest.fixture(params=["sim", "tcp"])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    if request.param == "sim":
        yield sim_harness()
    else:
        async with tcp_harness() as tcp:
            yield tcp


async def test_pings_are_answered_in_a_window(harness: Harness) -> None:
    a = await harness.spawn(PingPongCore)
    b = await harness.spawn(PingPongCore)
    await harness.call(a, lambda core, now: core.start(now, b.address, count=50, window=8))
    await harness.wait_for(lambda: a.done, timeout=10)
    assert sorted(a.rtts) == list(range(50))
    assert all(rtt > 0 for rtt in a.rtts.values())
    assert b.pings_answered == 50  # no retries were needed on a healthy link
    assert a.unreachable == []


async def test_payload_arrives_intact(harness: Harness) -> None:
    got: list[bytes] = []

    class Recording(PingPongCore):
        def on_message(self, now, src, msg):
            if hasattr(msg, "payload"):
                got.append(msg.payload)
            super().on_message(now, src, msg)

    a = await harness.spawn(PingPongCore)
    b = await harness.spawn(Recording)
    payload = bytes(range(256)) * 16  # 4 KiB
    await harness.call(a, lambda core, now: core.start(now, b.address, count=3, payload=payload))
    await harness.wait_for(lambda: a.done, timeout=10)
    assert got == [payload] * 3


async def test_sending_to_a_dead_address_reports_unreachable(harness: Harness) -> None:
    a = await harness.spawn(lambda addr: PingPongCore(addr, timeout=60))
    dead = harness.dead_address()
    await harness.call(a, lambda core, now: core.start(now, dead, count=3, window=3))
    await harness.wait_for(lambda: len(a.unreachable) == 3, timeout=10)
    assert sorted(a.unreachable) == [(dead, 0), (dead, 1), (dead, 2)]


async def test_a_node_can_message_itself(harness: Harness) -> None:
    a = await harness.spawn(PingPongCore)
    await harness.call(a, lambda core, now: core.start(now, a.address, count=5, window=2))
    await harness.wait_for(lambda: a.done, timeout=10)
    assert a.pings_answered == 5

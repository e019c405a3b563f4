"""Peers with the cluster key talk; a peer without it, or with another, is refused."""

from __future__ import annotations

import pytest
import trio

from overlay.runtime.crypto import generate_key
from overlay.runtime.transport import TransportConfig
from overlay.testing.harness import tcp_harness
from overlay.testing.pingpong import PingPongCore

KEY = generate_key()


async def test_peers_holding_the_key_exchange_sealed_frames() -> None:
    async with tcp_harness(TransportConfig(cluster_key=KEY)) as h:
        a = await h.spawn(PingPongCore)
        b = await h.spawn(PingPongCore)
        await h.call(a, lambda core, now: core.start(now, b.address, count=20, window=5))
        await h.wait_for(lambda: a.done, timeout=10)
        assert sorted(a.rtts) == list(range(20))


@pytest.mark.parametrize(
    "intruder_key", [generate_key(), None], ids=["wrong-key", "no-key"]
)
async def test_a_peer_without_the_right_key_is_refused(intruder_key: bytes | None) -> None:
    async with tcp_harness(TransportConfig(cluster_key=KEY)) as h:
        b = await h.spawn(PingPongCore)
        intruder = await h.spawn(
            lambda addr: PingPongCore(addr, timeout=60),
            config=TransportConfig(cluster_key=intruder_key),
        )
        await h.call(intruder, lambda core, now: core.start(now, b.address, count=2, window=2))
        await h.wait_for(lambda: len(intruder.unreachable) == 2, timeout=10)
        assert b.pings_answered == 0
        assert h.transports[b.address].stats.peers_refused == 1
        # The refused peer cost nothing: b still serves a legitimate peer.
        good = await h.spawn(PingPongCore)
        await h.call(good, lambda core, now: core.start(now, b.address, count=3))
        await h.wait_for(lambda: good.done, timeout=10)
        assert b.pings_answered == 3


async def test_garbage_on_the_peer_port_closes_only_that_link() -> None:
    async with tcp_harness() as h:
        b = await h.spawn(PingPongCore)
        host, port = b.address.rsplit(":", 1)
        for garbage in [b"\x00\x00\x00\x05\xff\xff\xff\xff\xff", b"\xff\xff\xff\xff", b"GET /"]:
            stream = await trio.open_tcp_stream(host, int(port))
            await stream.send_all(garbage)
            with trio.fail_after(5):
                while await stream.receive_some(1024):
                    pass  # the node answers at most a refusal, then closes the link
            await stream.aclose()
        a = await h.spawn(PingPongCore)
        await h.call(a, lambda core, now: core.start(now, b.address, count=3))
        await h.wait_for(lambda: a.done, timeout=10)
        assert h.transports[b.address].stats.peers_refused == 3


async def test_a_peer_with_another_max_frame_is_refused() -> None:
    """The size model holds only if every hop takes what the first hop took: a peer
    configured with another max_frame is refused at the handshake."""
    async with tcp_harness(TransportConfig(max_frame=1 << 20)) as h:
        b = await h.spawn(PingPongCore)
        other = await h.spawn(lambda addr: PingPongCore(addr, timeout=60),
                              config=TransportConfig(max_frame=2 << 20))
        await h.call(other, lambda core, now: core.start(now, b.address, count=2, window=2))
        await h.wait_for(lambda: len(other.unreachable) == 2, timeout=10)
        assert b.pings_answered == 0
        assert h.transports[b.address].stats.peers_refused == 1

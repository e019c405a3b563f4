"""Messages queued together for one peer share frames: bundles bounded by max_frame bytes,
every message arriving once and in order, sealed or not."""

from __future__ import annotations

import math

import pytest
import trio

from overlay.core.framing import decode_map, encode_map
from overlay.core.limits import MIN_MAX_FRAME
from overlay.core.messages import encode_message
from overlay.runtime.crypto import generate_key
from overlay.runtime.transport import (
    BUNDLE_KEY,
    Inbound,
    Transport,
    TransportConfig,
    Unreachable,
    bundle_bodies,
)
from overlay.testing.pingpong import Ping

MAX_FRAME = MIN_MAX_FRAME


def bodies_of(pings: list[Ping]) -> list[bytes]:
    return [encode_map(encode_message(ping)) for ping in pings]


def test_a_bundle_takes_messages_up_to_max_frame_at_the_byte() -> None:
    def pings(*sizes: int) -> list[bytes]:
        return bodies_of([Ping(i, b"x" * size) for i, size in enumerate(sizes)])

    # Three messages of 20000-byte payloads: one bundle, whose size tells the room left
    # (the sizes below stay in the same CBOR length classes).
    p = 20000
    [bundle] = bundle_bodies(pings(p, p, p), MAX_FRAME)
    fill = p + MAX_FRAME - len(bundle)
    at_edge = pings(p, p, fill)
    [bundle] = bundle_bodies(at_edge, MAX_FRAME)
    assert len(bundle) == MAX_FRAME
    assert decode_map(bundle) == {BUNDLE_KEY: [decode_map(b) for b in at_edge]}
    past = pings(p, p, fill + 1)
    first, second = bundle_bodies(past, MAX_FRAME)
    assert decode_map(first) == {BUNDLE_KEY: [decode_map(b) for b in past[:2]]}
    assert second == past[2]  # a lone message goes as itself


def test_a_message_of_max_frame_goes_alone_and_a_run_of_one_is_not_wrapped() -> None:
    [alone] = bodies_of([Ping(1)])
    assert bundle_bodies([alone], MAX_FRAME) == [alone]
    big = b"\xa0" * MAX_FRAME  # stands for a message of exactly max_frame bytes
    assert bundle_bodies([alone, big, alone], MAX_FRAME) == [alone, big, alone]


@pytest.mark.parametrize("key", [None, generate_key()], ids=["plain", "sealed"])
async def test_a_burst_to_one_peer_arrives_whole_in_order_in_few_frames(
        key: bytes | None) -> None:
    config = TransportConfig(cluster_key=key, max_frame=MAX_FRAME)
    inbox_a, _ = trio.open_memory_channel[Inbound | Unreachable](math.inf)
    inbox_b, received = trio.open_memory_channel[Inbound | Unreachable](math.inf)
    a, b = Transport(config, inbox_a), Transport(config, inbox_b)
    count = 2000
    async with trio.open_nursery() as nursery:
        await nursery.start(a.run)
        await nursery.start(b.run)
        a.send(b.address, Ping(-1))  # the link is up before the burst is queued
        with trio.fail_after(10):
            assert (await received.receive()).msg == Ping(-1)  # type: ignore[union-attr]
        for seq in range(count):
            a.send(b.address, Ping(seq, b"p" * (seq % 300)))
        got = []
        with trio.fail_after(20):
            while len(got) < count:
                item = await received.receive()
                assert isinstance(item, Inbound) and item.src == a.address
                got.append(item.msg)
        nursery.cancel_scope.cancel()
    assert got == [Ping(seq, b"p" * (seq % 300)) for seq in range(count)]
    assert a.stats.messages_sent == b.stats.messages_received == count + 1
    assert b.stats.frames_received == a.stats.frames_sent
    # 2000 messages of ~170 bytes on average fit in a handful of 64 KiB frames.
    assert a.stats.frames_sent <= 20, a.stats.as_dict()
    assert b.stats.bad_messages == 0


async def test_a_malformed_bundle_is_skipped_and_the_link_goes_on() -> None:
    inbox, received = trio.open_memory_channel[Inbound | Unreachable](math.inf)
    b = Transport(TransportConfig(), inbox)
    for bad in ({BUNDLE_KEY: [1, 2]}, {BUNDLE_KEY: "x"},
                {BUNDLE_KEY: [], "t": "test.ping"}):
        assert b._unbundle("peer", bad) == []
    assert b.stats.bad_messages == 3
    good = encode_message(Ping(7))
    assert b._unbundle("peer", {BUNDLE_KEY: [good]}) == [good]
    assert b._unbundle("peer", good) == [good]
    received.close()

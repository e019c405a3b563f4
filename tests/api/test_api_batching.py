"""The API server's hot path: a burst is handled per read, answered in batched writes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from overlay.core.framing import encode_frame
from overlay.runtime.api import ApiConfig, ApiServer
from tests.api.fake_service import FakeService
from tests.api.test_api_server import raw


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[FakeService, ApiServer, Path]]:
    service = FakeService()
    path = tmp_path / "api.sock"
    server = ApiServer(service, ApiConfig(socket_path=path, max_inflight_publishes=2))
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        yield service, server, path
        nursery.cancel_scope.cancel()


def publishes(first_rid: int, n: int, reliable: bool) -> bytes:
    return b"".join(encode_frame({"op": "publish", "topic": "t", "payload": b"x" * 100,
                                  "reliable": reliable, "rid": first_rid + i})
                    for i in range(n))


async def test_a_burst_of_publishes_leaves_in_a_few_writes(served: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    service, _, path = served
    subscriber = await raw(path)
    sub = (await subscriber.call(op="subscribe", topic="t", rid=1))["sub"]
    publisher = await raw(path)
    clients = {id(subscriber.stream), id(publisher.stream)}
    writes: list[int] = []
    send_all = trio.SocketStream.send_all

    async def counted(self: trio.SocketStream, data: Any) -> None:
        if id(self) not in clients:  # the server's side
            writes.append(len(data))
        await send_all(self, data)

    monkeypatch.setattr(trio.SocketStream, "send_all", counted)
    n = 100
    await publisher.send(publishes(10, n, reliable=False))
    replies = [await publisher.recv() for _ in range(n)]
    pushes = [await subscriber.recv() for _ in range(n)]
    assert [r["rid"] for r in replies] == list(range(10, 10 + n))
    assert all(r["ok"] and r["seq"] is not None for r in replies)
    assert [p["seq"] for p in pushes] == [r["seq"] for r in replies]
    assert all(p["sub"] == sub for p in pushes)
    # One write per connection per turn of 64 requests (so two here, and maybe one more
    # if the burst came in two reads), not one per reply and one per push.
    assert len(writes) <= 6, writes
    # Each turn's requests ran in one service batch (their overlay work done together).
    assert 2 <= service.batches <= 10, service.batches


async def test_reliable_publishes_past_the_in_flight_bound_wait_in_order(served: Any) -> None:
    service, _, path = served
    conn = await raw(path)
    service.publish_gate = trio.Event()
    # Two may be in flight: the third waits for room, and the status behind it too.
    await conn.send(publishes(1, 3, reliable=True) + encode_frame({"op": "status", "rid": 4}))
    with trio.move_on_after(0.2):
        early = await conn.recv()
        pytest.fail(f"a reply came before the publishes were let through: {early}")
    service.publish_gate.set()
    replies = [await conn.recv() for _ in range(4)]
    assert [r["rid"] for r in replies] == [1, 2, 3, 4]
    assert sorted(r["seq"] for r in replies[:3]) == [1, 2, 3] and all(r["ok"] for r in replies)


async def test_unreliable_publishes_keep_their_place_behind_a_pending_one(served: Any) -> None:
    service, _, path = served
    conn = await raw(path)
    gate = service.publish_gate = trio.Event()
    await conn.send(publishes(1, 1, reliable=True))
    await trio.sleep(0.05)
    service.publish_gate = None  # the next ones are done at once, the first still waits
    await conn.send(publishes(2, 2, reliable=False))
    with trio.move_on_after(0.2):
        early = await conn.recv()
        pytest.fail(f"an unreliable publish's reply overtook the pending one: {early}")
    gate.set()
    replies = [await conn.recv() for _ in range(3)]
    assert [r["rid"] for r in replies] == [1, 2, 3]
    assert [r["seq"] for r in replies] == [3, 1, 2]  # numbered when each was done


async def test_unreliable_publishes_read_together_reach_the_service_in_one_call(
        served: Any) -> None:
    service, _, path = served
    conn = await raw(path)
    calls = service.unreliable_calls
    await conn.send(publishes(1, 40, reliable=False))
    replies = [await conn.recv() for _ in range(40)]
    assert [r["rid"] for r in replies] == list(range(1, 41))
    assert [r["seq"] for r in replies] == list(range(1, 41))
    # One read brought all 40 (one send of 4.6 kB on a Unix socket): at most a couple of
    # calls, not 40.
    assert 1 <= service.unreliable_calls - calls <= 3


async def test_a_request_between_unreliable_publishes_sees_the_earlier_ones_done(
        served: Any) -> None:
    _, _, path = served
    conn = await raw(path)
    subscribe = encode_frame({"op": "subscribe", "topic": "t", "rid": 3})
    await conn.send(publishes(1, 2, reliable=False) + subscribe + publishes(4, 2, reliable=False))
    frames = [await conn.recv() for _ in range(7)]
    replies = [f for f in frames if "rid" in f]
    notes = [f for f in frames if f.get("event") == "notify"]
    assert [r["rid"] for r in replies] == [1, 2, 3, 4, 5]
    # The subscription came after events 1 and 2 were published, before 3 and 4.
    assert [n["seq"] for n in notes] == [3, 4]


async def test_a_refused_publish_among_unreliable_ones_fails_alone(served: Any) -> None:
    service, _, path = served
    conn = await raw(path)
    bad = encode_frame({"op": "publish", "topic": "t", "attrs": {"x": [1]}, "reliable": False,
                        "rid": 2})
    await conn.send(publishes(1, 1, reliable=False) + bad + publishes(3, 1, reliable=False))
    replies = [await conn.recv() for _ in range(3)]
    assert [r["rid"] for r in replies] == [1, 2, 3]
    assert [r["ok"] for r in replies] == [True, False, True]
    assert replies[1]["error"]["code"] == "bad_request"
    service.fail_publish = True
    await conn.send(publishes(4, 2, reliable=False))
    failed = [await conn.recv() for _ in range(2)]
    assert [(r["rid"], r["error"]["code"]) for r in failed] == [(4, "internal"), (5, "internal")]

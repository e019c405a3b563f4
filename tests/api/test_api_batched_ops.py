"""Batched publish (``publish_batch``) and batched notify (``notify_batch`` pushes for a
connection that asked at hello), against the test-double service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from overlay import client as api_client
from overlay.core.framing import decode_map, encode_frame
from overlay.runtime.api import ApiConfig, ApiServer
from tests.api.fake_service import FakeService
from tests.api.test_api_server import RawConn

MAX_FRAME = 1 << 16  # the smallest the daemon takes
MAX_BATCH = MAX_FRAME // 320


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[FakeService, ApiServer, Path]]:
    service = FakeService()
    path = tmp_path / "api.sock"
    server = ApiServer(service, ApiConfig(socket_path=path, max_inflight_publishes=2,
                                          max_frame=MAX_FRAME))
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        yield service, server, path
        nursery.cancel_scope.cancel()


class Conn(RawConn):
    """A raw connection that also tells each frame's body size."""

    async def recv_sized(self) -> tuple[int, dict[str, Any]]:
        body = await self.recv_body()
        return len(body), decode_map(body)


async def connect(path: Path, batch_notify: bool = False) -> Conn:
    conn = Conn(await trio.open_unix_socket(str(path)))
    hello = await conn.call(op="hello", version=1, rid=0, batch_notify=batch_notify)
    assert hello["ok"] and "publish_batch" in hello["features"], hello
    assert hello["max_frame"] == MAX_FRAME and hello["max_batch"] == MAX_BATCH
    return conn


def publish(rid: int, payloads: list[bytes], reliable: bool = False) -> bytes:
    """Single publishes in one write: their notifies are ready together."""
    return b"".join(encode_frame({"op": "publish", "topic": "t", "payload": p,
                                  "reliable": reliable, "rid": rid + i})
                    for i, p in enumerate(payloads))


async def test_a_batched_publish_answers_per_event_and_refuses_bad_ones_alone(
        served: Any) -> None:
    _, _, path = served
    subscriber = await connect(path)
    sub = (await subscriber.call(op="subscribe", topic="t", rid=1))["sub"]
    conn = await connect(path)
    reply = await conn.call(op="publish_batch", rid=7, reliable=False, events=[
        {"topic": "t", "attrs": {"n": 1}, "payload": b"a"},
        {"topic": "t", "msg_id": "NOT HEX"},
        {"topic": "t", "attrs": {"n": 3}, "msg_id": "beef"},
        "not a map",
        {"topic": "t", "reliable": True},
    ])
    assert reply["rid"] == 7 and reply["ok"]
    results = reply["results"]
    assert [sorted(r) for r in results] == [["msg_id", "seq"], ["error"], ["msg_id", "seq"],
                                            ["error"], ["error"]]
    assert {results[i]["error"]["code"] for i in (1, 3, 4)} == {"bad_request"}
    assert results[2]["msg_id"] == "beef"
    notes = [await subscriber.recv() for _ in range(2)]
    assert [(n["sub"], n["attrs"], n["seq"]) for n in notes] == [
        (sub, {"n": 1}, results[0]["seq"]), (sub, {"n": 3}, results[2]["seq"])]


async def test_a_reliable_batch_larger_than_the_in_flight_bound_goes_alone(served: Any) -> None:
    service, _, path = served
    conn = await connect(path)
    service.publish_gate = trio.Event()
    events = [{"topic": "t", "attrs": {"n": n}} for n in range(5)]  # the bound is 2
    await conn.send({"op": "publish_batch", "rid": 1, "events": events})
    await conn.send({"op": "status", "rid": 2})
    with trio.move_on_after(0.2):
        early = await conn.recv()
        pytest.fail(f"a reply came before the publishes were let through: {early}")
    service.publish_gate.set()
    reply, status = await conn.recv(), await conn.recv()
    assert reply["rid"] == 1 and sorted(r["seq"] for r in reply["results"]) == [1, 2, 3, 4, 5]
    assert status["rid"] == 2 and status["ok"]
    # And one behind it waits for the five places to free.
    service.publish_gate = trio.Event()
    await conn.send(publish(3, [b"x"], reliable=True))
    await conn.send({"op": "publish_batch", "rid": 4, "events": events[:2]})
    service.publish_gate.set()
    assert [(await conn.recv())["rid"] for _ in range(2)] == [3, 4]


@pytest.mark.parametrize("bad", [
    {"events": []},
    {"events": "x"},
    {"events": [{"topic": "t"}] * (MAX_BATCH + 1)},
    {"events": [{"topic": "t"}], "reliable": "yes"},
], ids=["empty", "not-a-list", "more-than-max-batch", "reliable-mistyped"])
async def test_a_malformed_batch_is_refused_whole(served: Any, bad: dict[str, Any]) -> None:
    service, _, path = served
    conn = await connect(path)
    reply = await conn.call(op="publish_batch", rid=5, **bad)
    assert reply["rid"] == 5 and reply["error"]["code"] == "bad_request"
    assert service.seq == 0  # nothing of it was published
    assert (await conn.call(op="status", rid=6))["ok"]  # the connection goes on


async def test_the_reply_of_the_largest_batch_fits_in_max_frame(served: Any) -> None:
    """max_batch events, each refused with the longest message a check makes (an
    attribute name of 256 characters), or each published: the reply fits either way."""
    service, _, path = served
    conn = await connect(path)
    name = "k" * 256
    failing = [{"topic": "t", "attrs": {name: float("nan")}}] * MAX_BATCH
    await conn.send({"op": "publish_batch", "rid": 1, "reliable": False, "events": failing})
    size, reply = await conn.recv_sized()
    assert reply["rid"] == 1 and len(reply["results"]) == MAX_BATCH and size <= MAX_FRAME
    assert {r["error"]["code"] for r in reply["results"]} == {"bad_request"}
    msg_id = "f" * 64  # the longest msg_id a client may give
    published = [{"topic": "t", "msg_id": msg_id}] * MAX_BATCH
    await conn.send({"op": "publish_batch", "rid": 2, "reliable": True, "events": published})
    size, reply = await conn.recv_sized()
    assert reply["rid"] == 2 and len(reply["results"]) == MAX_BATCH and size <= MAX_FRAME
    assert service.seq == MAX_BATCH


async def test_ready_notifies_come_in_one_batch_only_to_who_asked(served: Any) -> None:
    _, _, path = served
    batched = await connect(path, batch_notify=True)
    plain = await connect(path)
    subs = [(await c.call(op="subscribe", topic="t", rid=1))["sub"] for c in (batched, plain)]
    publisher = await connect(path)
    await publisher.send(publish(10, [bytes([n]) * 10 for n in range(5)]))
    push = await batched.recv()
    assert push["event"] == "notify_batch"
    assert [e["payload"] for e in push["events"]] == [bytes([n]) * 10 for n in range(5)]
    assert all(e["sub"] == subs[0] and "event" not in e for e in push["events"])
    singles = [await plain.recv() for _ in range(5)]
    assert [s["event"] for s in singles] == ["notify"] * 5
    # An event in a batch carries what its plain notify carries.
    assert [{"event": "notify", **e, "sub": subs[1]} for e in push["events"]] == singles
    # One ready alone is a plain notify.
    await publisher.send(publish(20, [b"alone"]))
    alone = await batched.recv()
    assert alone["event"] == "notify" and alone["payload"] == b"alone"


async def test_a_notify_batch_is_bounded_by_max_frame_at_the_byte(served: Any) -> None:
    _, _, path = served
    batched = await connect(path, batch_notify=True)
    await batched.call(op="subscribe", topic="t", rid=1)
    publisher = await connect(path)

    async def publish_three(rid: int, last: int) -> None:
        """Three events in one request: their notifies are ready together."""
        events = [{"topic": "t", "payload": p} for p in (b"a" * 20000, b"b" * 20000,
                                                          b"c" * last)]
        await publisher.send({"op": "publish_batch", "rid": rid, "reliable": False,
                              "events": events})

    # Three events of 20000-byte payloads (under max_payload): one batch, whose size
    # tells the fixed overhead (the sizes below stay in the same CBOR length classes,
    # and seq stays under 24).
    await publish_three(10, 20000)
    size, push = await batched.recv_sized()
    assert push["event"] == "notify_batch" and len(push["events"]) == 3
    fill = 20000 + MAX_FRAME - size
    # At the edge: exactly max_frame, one batch.
    await publish_three(20, fill)
    size, push = await batched.recv_sized()
    assert (size, push["event"], len(push["events"])) == (MAX_FRAME, "notify_batch", 3)
    # One byte past it: a batch of two, then the third as a plain notify.
    await publish_three(30, fill + 1)
    first, second = await batched.recv_sized(), await batched.recv_sized()
    assert (first[1]["event"], len(first[1]["events"])) == ("notify_batch", 2)
    assert second[1]["event"] == "notify" and second[1]["payload"] == b"c" * (fill + 1)
    assert first[0] <= MAX_FRAME and second[0] <= MAX_FRAME


async def test_the_async_client_batches_publishes_that_tasks_start_together(
        served: Any) -> None:
    service, server, path = served
    async with api_client.connect(str(path)) as subscriber, \
            api_client.connect(str(path)) as publisher:
        async with subscriber.subscribe("t") as sub:
            requests = server.stats["requests"]
            results: dict[int, api_client.Published] = {}

            async def publish(n: int) -> None:
                results[n] = await publisher.publish("t", bytes([n]), attrs={"n": n},
                                                     reliable=False)

            async with trio.open_nursery() as nursery:
                for n in range(100):
                    nursery.start_soon(publish, n)
            # Started together: a few batched requests, not 100.
            assert server.stats["requests"] - requests < 20, server.stats["requests"] - requests
            assert sorted(r.seq for r in results.values()) == list(range(1, 101))
            events = [await sub.__anext__() for _ in range(100)]
            assert sorted(e.attrs["n"] for e in events) == list(range(100))
            assert all(e.payload == bytes([e.attrs["n"]]) for e in events)
        outcomes = await publisher.publish_many([
            api_client.publish_event("t", {"n": 1}), api_client.publish_event("t", msg_id="X"),
            api_client.publish_event("t", payload=b"x" * MAX_FRAME)], reliable=False)
        assert len(outcomes) == 3
        assert isinstance(outcomes[0], api_client.Published)
        assert isinstance(outcomes[1], api_client.RequestError)
        assert outcomes[1].code == "bad_request"
        assert outcomes[2].code == "too_large"  # refused locally: the connection goes on
        assert (await publisher.status())["api"]["bad_frames"] == 0
    assert service.seq == 101


async def test_the_blocking_client_batches_publish_many_and_unpacks_notify_batches(
        served: Any) -> None:
    _, server, path = served

    def run() -> None:
        with api_client.BlockingClient.connect(str(path), timeout=5) as client:
            sub = client.subscribe("t")
            requests = server.stats["requests"]
            n = 2 * MAX_BATCH + 10
            # Small events: the count bound splits them (3 requests), not the bytes.
            events = [api_client.publish_event("t", {"n": i}, b"p") for i in range(n)]
            outcomes = client.publish_many(events, reliable=False)
            assert server.stats["requests"] - requests == 3
            assert [o.seq for o in outcomes] == list(range(1, n + 1))  # type: ignore[union-attr]  # every outcome is a PublishResult here (asserted above)
            # Large ones: the bytes do (~20 kB each: 3 to a request of 64 KiB).
            big = [api_client.publish_event("t", {"n": n + i}, b"P" * 20000) for i in range(9)]
            outcomes = client.publish_many(big, reliable=False)
            assert server.stats["requests"] - requests == 3 + 3
            got = []
            for event in client.events():
                assert isinstance(event, api_client.Event) and event.sub == sub
                got.append(event.attrs["n"])
                if len(got) == n + 9:
                    break
            assert got == list(range(n + 9))

    # The blocking client is called from a thread: the server runs on this trio loop.
    await trio.to_thread.run_sync(run)

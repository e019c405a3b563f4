"""The local API server against a test-double service: every op, push, error and limit."""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import cbor2
import pytest
import trio
import trio.testing

from overlay import client as api_client
from overlay.core.framing import FrameDecoder, decode_map, encode_frame
from overlay.runtime.api import ApiConfig, ApiServer, outbox
from tests.api.fake_service import FakeService
from tests.api.writer_wakes import counting_writer_sends


class RawConn:
    """A raw API connection: frames in, frames out, nothing checked on our side."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(1 << 24)

    async def send(self, obj: Any) -> None:
        await self.stream.send_all(encode_frame(obj) if isinstance(obj, dict) else obj)

    async def recv(self) -> dict[str, Any]:
        return decode_map(await self.recv_body())

    async def recv_body(self) -> bytes:
        with trio.fail_after(5):
            while (body := self.decoder.next_body()) is None:
                data = await self.stream.receive_some(1 << 16)
                if not data:
                    raise EOFError
                self.decoder.feed(data)
        return body

    async def call(self, **req: Any) -> dict[str, Any]:
        await self.send(req)
        return await self.recv()

    async def closed(self) -> bool:
        with trio.fail_after(5):
            try:
                while await self.stream.receive_some(1 << 16):
                    pass
            except trio.BrokenResourceError:
                pass
        return True


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[FakeService, ApiServer, Path]]:
    service = FakeService()
    path = tmp_path / "api.sock"
    server = ApiServer(service, ApiConfig(socket_path=path, max_queue_bytes=64 << 10,
                                          close_grace=0.5))
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        yield service, server, path
        nursery.cancel_scope.cancel()


async def raw(path: Path, greet: bool = True) -> RawConn:
    conn = RawConn(await trio.open_unix_socket(str(path)))
    if greet:
        reply = await conn.call(op="hello", version=1, rid=0)
        assert reply["ok"], reply
    return conn


async def test_socket_is_private_to_its_owner(served: Any) -> None:
    _, _, path = served
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


async def test_hello_first_then_every_op(served: Any) -> None:
    service, _, path = served
    conn = await raw(path, greet=False)
    reply = await conn.call(op="status", rid=1)
    assert reply == {"rid": 1, "ok": False, "error": {
        "code": "bad_request", "message": "the first request on a connection must be hello"}}
    assert (await conn.call(op="hello", version=2, rid=2))["error"]["code"] == "unsupported_version"
    hello = await conn.call(op="hello", version=1, client="t", rid=3)
    assert hello == {"rid": 3, "ok": True, "node": service.node_hex, "version": 1,
                     "mode": "structured", "max_frame": 1 << 20,
                     "max_event": (1 << 20) - 16384, "max_payload": (1 << 20) - 32768,
                     "features": ["publish_batch", "notify_batch"],
                     "max_batch": (1 << 20) // 320}
    sub = (await conn.call(op="subscribe", topic="t", filter="", expiry=5, rid=4))["sub"]
    assert (await conn.call(op="renew", sub=sub, expiry=9, rid=5)) == {"rid": 5, "ok": True}
    assert service.renewed == [(sub, 9.0)]
    published = await conn.call(op="publish", topic="t", attrs={"a": 1}, payload=b"p", rid=6)
    notify = published if "event" in published else await conn.recv()
    reply = await conn.recv() if "event" in published else published
    assert reply["rid"] == 6 and reply["ok"] and reply["seq"] == 1
    assert notify == {"event": "notify", "sub": sub, "topic": "t", "msg_id": reply["msg_id"],
                      "seq": 1, "attrs": {"a": 1}, "payload": b"p",
                      "publisher": service.node_hex, "ts": 1.0, "attempt": 1}
    assert (await conn.call(op="unsubscribe", sub=sub, rid=7)) == {"rid": 7, "ok": True}
    assert service.ended == [(sub, "client")]
    status = await conn.call(op="status", rid=8)
    assert status["ok"] and status["subscriptions"] == 0 and status["api"]["connections"] == 1


async def test_status_counts_requests_and_the_reads_that_brought_them(served: Any) -> None:
    _, server, path = served
    conn = await raw(path)
    before = dict(server.stats)
    burst = b"".join(encode_frame({"op": "publish", "topic": "t", "payload": b"p", "rid": i,
                                   "reliable": False}) for i in range(1, 6))
    await conn.send(burst)  # one write: read at once (a Unix socket, 5 small frames)
    replies = [await conn.recv() for _ in range(5)]
    assert [r["rid"] for r in replies] == [1, 2, 3, 4, 5]
    assert server.stats["requests"] - before["requests"] == 5
    assert server.stats["reads"] - before["reads"] == 1


@pytest.mark.parametrize(
    ("request_map", "code"),
    [
        ({"op": "nope"}, "bad_request"),
        ({"op": "subscribe"}, "bad_request"),
        ({"op": "subscribe", "topic": 5}, "bad_request"),
        ({"op": "subscribe", "topic": "t", "expiry": -1}, "bad_request"),
        ({"op": "subscribe", "topic": "t", "replay": {"first": 1}}, "bad_request"),
        ({"op": "publish", "topic": "t", "attrs": {"k": [1]}}, "bad_request"),
        ({"op": "publish", "topic": "t", "msg_id": "XYZ"}, "bad_request"),
        ({"op": "publish", "topic": "t", "reliable": 1}, "bad_request"),
        ({"op": "subscribe", "topic": "t", "filter": "bad filter"}, "bad_filter"),
        ({"op": "unsubscribe", "sub": 999}, "unknown_sub"),
        ({"op": "renew", "sub": 999, "expiry": 1}, "unknown_sub"),
    ],
)
async def test_bad_requests_get_their_error_code(served: Any, request_map: dict[str, Any],
                                                 code: str) -> None:
    _, _, path = served
    conn = await raw(path)
    reply = await conn.call(**request_map, rid=11)
    assert reply["rid"] == 11 and reply["ok"] is False and reply["error"]["code"] == code
    if code == "bad_filter":
        assert reply["error"]["pos"] == 0
    assert (await conn.call(op="status", rid=12))["ok"]  # the connection goes on


async def test_a_request_without_rid_is_answered_with_null_rid(served: Any) -> None:
    _, _, path = served
    conn = await raw(path)
    reply = await conn.call(op="status")
    assert reply["rid"] is None and reply["error"]["code"] == "bad_request"


async def test_not_ready_and_internal(served: Any) -> None:
    service, _, path = served
    conn = await raw(path)
    service.is_ready = False
    assert (await conn.call(op="subscribe", topic="t", rid=1))["error"]["code"] == "not_ready"
    assert (await conn.call(op="publish", topic="t", rid=2))["error"]["code"] == "not_ready"
    service.is_ready = True
    service.fail_publish = True
    reply = await conn.call(op="publish", topic="t", rid=3)
    assert reply["error"]["code"] == "internal"


async def test_replies_keep_request_order(served: Any) -> None:
    service, _, path = served
    conn = await raw(path)
    service.publish_gate = trio.Event()
    await conn.send({"op": "publish", "topic": "t", "rid": 1})
    await conn.send({"op": "status", "rid": 2})
    with trio.move_on_after(0.2):
        early = await conn.recv()
        pytest.fail(f"a reply overtook the pending publish: {early}")
    service.publish_gate.set()
    assert [(await conn.recv())["rid"] for _ in range(2)] == [1, 2]


async def test_a_subscription_s_events_wait_behind_its_reply(served: Any) -> None:
    service, _, path = served
    conn = await raw(path)
    publisher = await raw(path)
    service.subscribe_gate = trio.Event()
    await conn.send({"op": "subscribe", "topic": "t", "rid": 1})
    await conn.send({"op": "status", "rid": 2})
    # An event for the new subscription comes while it is not in effect yet.
    assert (await publisher.call(op="publish", topic="t", rid=1))["ok"]
    with trio.move_on_after(0.2):
        early = await conn.recv()
        pytest.fail(f"something overtook the pending subscribe reply: {early}")
    service.subscribe_gate.set()
    reply, push, status = [await conn.recv() for _ in range(3)]
    assert reply["rid"] == 1 and reply["ok"] and push["event"] == "notify"
    assert push["sub"] == reply["sub"] and status["rid"] == 2


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">I", 5) + b"\xff\xff\xff\xff\xff",  # not CBOR
        encode_frame({"a": 1})[:4] + cbor2.dumps([1, 2]),  # wrong length, then a list
        struct.pack(">I", 4) + cbor2.dumps([1, 2, 3]),  # an array, not a map
        struct.pack(">I", (1 << 20) + 1),  # oversized
    ],
    ids=["not-cbor", "truncated", "not-a-map", "oversized"],
)
async def test_bad_frames_close_only_that_connection(served: Any, garbage: bytes) -> None:
    service, server, path = served
    bystander = await raw(path)
    sub = (await bystander.call(op="subscribe", topic="t", rid=1))["sub"]
    conn = await raw(path)
    await conn.send(garbage)
    if garbage.startswith(encode_frame({"a": 1})[:4]):
        await conn.stream.send_eof()  # the frame can never complete
        assert await conn.closed()
    else:
        push = await conn.recv()
        assert push["event"] == "error" and push["error"]["code"] == "bad_frame"
        assert await conn.closed()
    assert server.stats["bad_frames"] == 1
    reply = await bystander.call(op="publish", topic="t", rid=2)
    assert reply.get("event") == "notify" or reply["ok"]
    assert sub in service.subs


async def test_disconnect_ends_its_subscriptions(served: Any) -> None:
    service, _, path = served
    conn = await raw(path)
    subs = [(await conn.call(op="subscribe", topic=f"t{i}", rid=i))["sub"] for i in range(3)]
    await conn.stream.aclose()
    with trio.fail_after(5):
        while len(service.ended) < 3:
            await trio.sleep(0.01)
    assert sorted(service.ended) == [(s, "disconnect") for s in subs]


async def test_a_subscriber_that_stops_reading_is_cut_off(served: Any) -> None:
    service, server, path = served
    slow = await raw(path)
    await slow.call(op="subscribe", topic="t", rid=1)
    async with api_client.connect(str(path)) as publisher:
        # 64 KiB queue bound; the slow client reads nothing while we publish ~1 MiB.
        with trio.fail_after(20):
            while server.stats["overloaded_closes"] == 0:
                await publisher.publish("t", b"x" * 4096)
        # The daemon keeps serving the publisher.
        assert (await publisher.status())["api"]["overloaded_closes"] == 1
    with trio.fail_after(5):
        while len(service.ended) < 1:
            await trio.sleep(0.01)
    assert service.ended[0][1] == "disconnect"


async def test_async_client_round_trip(served: Any) -> None:
    service, _, path = served
    async with api_client.connect(str(path)) as client:
        assert client.hello["node"] == service.node_hex
        async with client.subscribe("t", expiry=30) as sub:
            published = await client.publish("t", b"hi", attrs={"x": True})
            event = await sub.__anext__()
            assert (event.msg_id, event.payload, event.attrs) == (published.msg_id, b"hi",
                                                                   {"x": True})
        with pytest.raises(api_client.BadFilter) as err:
            async with client.subscribe("t", filter="bad"):
                pass
        assert err.value.pos == 0
    with trio.fail_after(5):
        while not service.ended:
            await trio.sleep(0.01)
    assert service.ended == [(1, "client")]


def test_blocking_client_reports_an_unreachable_daemon(tmp_path: Path) -> None:
    with pytest.raises(api_client.ConnectionLost), api_client.BlockingClient.connect(
        str(tmp_path / "none.sock")
    ):
        pass


async def test_a_turn_s_frames_are_written_when_it_ends_without_waking_writers(
        served: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The notifies and the reply a publish causes leave at the end of the publisher's
    turn (docs/DESIGN.md, "The daemon"): no writer task is woken for them."""
    _, _, path = served
    subscriber = await raw(path)
    sub = (await subscriber.call(op="subscribe", topic="t", rid=1))["sub"]
    publisher = await raw(path)
    # Until the writers are done with the frames before (idle, as between events).
    await trio.testing.wait_all_tasks_blocked()
    with counting_writer_sends(monkeypatch) as sends:
        await publisher.send({"op": "publish", "topic": "t", "payload": b"p", "rid": 2,
                              "reliable": False})
        reply = await publisher.recv()
        notify = await subscriber.recv()
    assert reply["rid"] == 2 and reply["ok"]
    assert notify["event"] == "notify" and notify["sub"] == sub and notify["payload"] == b"p"
    assert sends.count == 0


async def test_what_a_full_socket_does_not_take_follows_in_order(tmp_path: Path) -> None:
    """A subscriber that reads nothing for a while: the end-of-turn write hands the
    kernel what fits, the writer task the rest; nothing is lost, doubled or reordered,
    and the publisher's replies keep coming meanwhile."""
    service = FakeService()
    path = tmp_path / "api.sock"
    server = ApiServer(service, ApiConfig(socket_path=path, max_queue_bytes=64 << 20))
    payload_size, count = 60_000, 64  # ~3.8 MB: far past a Unix socket's buffer
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        subscriber = await raw(path)
        sub = (await subscriber.call(op="subscribe", topic="t", rid=1))["sub"]
        publisher = await raw(path)
        for rid in range(2, 2 + count):
            payload = rid.to_bytes(2, "big") * (payload_size // 2)
            reply = await publisher.call(op="publish", topic="t", payload=payload, rid=rid,
                                         reliable=False)
            assert reply["rid"] == rid and reply["ok"]
        notifies = [await subscriber.recv() for _ in range(count)]
        assert [n["sub"] for n in notifies] == [sub] * count
        assert [n["seq"] for n in notifies] == list(range(1, 1 + count))
        assert [n["payload"] for n in notifies] == [
            rid.to_bytes(2, "big") * (payload_size // 2) for rid in range(2, 2 + count)]
        assert server.stats["overloaded_closes"] == 0
        nursery.cancel_scope.cancel()


async def test_a_connection_whose_frames_cannot_be_made_ends_alone(
        served: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug of ours making one connection's frames (here: its notify batches) ends
    that connection only; the turn that caused them, the publisher and the other
    subscribers go on."""
    _, _, path = served
    batched = RawConn(await trio.open_unix_socket(str(path)))
    assert (await batched.call(op="hello", version=1, rid=0, batch_notify=True))["ok"]
    await batched.call(op="subscribe", topic="t", rid=1)
    plain = await raw(path)
    plain_sub = (await plain.call(op="subscribe", topic="t", rid=1))["sub"]
    publisher = await raw(path)

    def broken(*_: Any) -> list[bytes]:
        raise RuntimeError("a bug making notify_batch frames")

    monkeypatch.setattr(outbox, "notify_frames", broken)
    reply = await publisher.call(op="publish", topic="t", payload=b"p", rid=2,
                                 reliable=False)
    assert reply["rid"] == 2 and reply["ok"]
    notify = await plain.recv()
    assert notify["sub"] == plain_sub and notify["payload"] == b"p"
    assert await batched.closed()
    assert (await publisher.call(op="status", rid=3))["ok"]

"""The daemon's service over a real node, in process: publishes in batches."""

from __future__ import annotations

import select
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from overlay.core.framing import FrameDecoder, decode_map, encode_frame
from overlay.core.storage import SyncPolicy
from overlay.runtime.api import ApiError, Notifications, PublishResult
from overlay.runtime.api.connection import ApiConnection
from overlay.runtime.api.requests import Publish, Subscribe
from overlay.runtime.api.service import Push
from overlay.runtime.config import build_config
from overlay.runtime.logstore import LOG_FILE, LogStore
from overlay.runtime.serve import Node, build_node
from tests.api.writer_wakes import counting_writer_sends


@pytest.mark.parametrize("mode", ["structured", "unstructured"])
async def test_batches_of_publishes_are_published_in_order(
        tmp_path: Path, mode: str) -> None:
    node = build_node(build_config(None, {}, {"bind": "127.0.0.1:0", "state_dir": str(tmp_path),
                                              "mode": mode}))
    service = node.service
    refused = service.publish_unreliable([Publish("t", reliable=False)] * 2)
    assert [o.code for o in refused if isinstance(o, ApiError)] == ["not_ready"] * 2
    async with trio.open_nursery() as nursery:
        await nursery.start(node.daemon.run)
        with trio.fail_after(10):
            while not service.ready:
                await trio.sleep(0.02)
        pushes: list[Push] = []
        service.subscribe(Subscribe("t", "n >= 2"), pushes.append)
        requests = [Publish("t", {"n": n}, b"p%d" % n, reliable=False) for n in range(4)]
        # The core refuses attributes that are not text/int/float/bool: that one alone.
        requests.insert(2, Publish("t", {"n": [1]}, reliable=False))  # type: ignore[dict-item]  # deliberately not an attribute value: the refusal is under test
        published = service.status()["counters"]["published"]
        outcomes = service.publish_unreliable(requests)
        assert [type(o) for o in outcomes] == [PublishResult, PublishResult, ApiError,
                                               PublishResult, PublishResult]
        assert isinstance(outcomes[2], ApiError) and outcomes[2].code == "bad_request"
        assert service.status()["counters"]["published"] == published + 4
        with trio.fail_after(10):
            while not pushes:
                await trio.sleep(0.02)
        # The burst is one step of the core: its two matching events reach the
        # subscription in one hand-over, in order.
        assert len(pushes) == 1 and isinstance(pushes[0], Notifications)
        events = pushes[0].events
        ok = [o for o in outcomes if isinstance(o, PublishResult)]
        assert [(e.payload, e.msg_id) for e in events] == [(b"p2", ok[2].msg_id),
                                                           (b"p3", ok[3].msg_id)]
        if mode == "structured":  # numbered by the root in publish order
            assert [e.seq for e in events] == [3, 4]
        answers: list[PublishResult | ApiError] = []
        reliable = [Publish("t", {"n": 9}, msg_id=f"{i:04x}") for i in range(3)]
        assert service.begin_publishes(reliable, [answers.append] * 3) == [True] * 3
        with trio.fail_after(10):
            while len(answers) < 3 or sum(len(p.events) for p in pushes
                                          if isinstance(p, Notifications)) < 5:
                await trio.sleep(0.02)
        assert sorted(a.msg_id for a in answers if isinstance(a, PublishResult)) == [
            "0000", "0001", "0002"]
        if mode == "structured":
            assert sorted(a.seq for a in answers if isinstance(a, PublishResult)) == [5, 6, 7]
        node.daemon.stop()


async def test_what_a_core_step_causes_is_written_when_it_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reliable publish is answered, and its event delivered, by the core step that
    learns it is stored (the sync), not by the reader's turn: the reply and the notify
    leave when that step's effects are carried out (docs/DESIGN.md, "The daemon"),
    without waking the connections' writer tasks, the notify first."""
    node = build_node(build_config(None, {}, {"bind": "127.0.0.1:0",
                                              "state_dir": str(tmp_path)}))
    async with trio.open_nursery() as nursery:
        await nursery.start(node.daemon.run)
        with trio.fail_after(10):
            while not node.service.ready:
                await trio.sleep(0.02)
        subscriber = await _connect(node, nursery, 1)
        assert (await subscriber.call({"op": "subscribe", "rid": 2, "topic": "t",
                                       "filter": ""}))["ok"]
        publisher = await _connect(node, nursery, 2)
        # Until the writers are done with the frames before (idle, as between events).
        await trio.testing.wait_all_tasks_blocked()
        with counting_writer_sends(monkeypatch) as sends:
            await publisher.send({"op": "publish", "rid": 3, "topic": "t",
                                  "payload": b"p", "reliable": True})
            reply = await publisher.recv()
            notify_ready = subscriber.readable_now()
            notify = await subscriber.recv()
        assert reply["rid"] == 3 and reply["ok"] and reply["seq"] == 1
        assert notify["event"] == "notify" and notify["msg_id"] == reply["msg_id"]
        assert notify_ready  # written before the reply
        assert sends.count == 0
        node.daemon.stop()
        nursery.cancel_scope.cancel()  # the connections' tasks


class _Raw:
    """A client end of a socket pair the node's API serves: frames in, frames out."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.stream = trio.SocketStream(sock)
        self.decoder = FrameDecoder(1 << 24)

    async def send(self, req: dict[str, object]) -> None:
        await self.stream.send_all(encode_frame(req))

    async def recv(self) -> dict[str, Any]:
        with trio.fail_after(10):
            while (body := self.decoder.next_body()) is None:
                self.decoder.feed(await self.stream.receive_some(1 << 16))
        return decode_map(body)

    async def call(self, req: dict[str, object]) -> dict[str, Any]:
        await self.send(req)
        return await self.recv()

    def readable_now(self) -> bool:
        """Whether bytes wait in the socket (asked without waiting)."""
        return bool(select.select([self.sock], [], [], 0)[0])


async def _connect(node: Node[Any], nursery: trio.Nursery, conn_id: int) -> _Raw:
    ours, theirs = trio.socket.socketpair()
    nursery.start_soon(ApiConnection(node.api, trio.SocketStream(theirs), conn_id).serve)
    client = _Raw(ours)
    assert (await client.call({"op": "hello", "rid": 1, "version": 1}))["ok"]
    return client


async def test_events_whose_persists_linger_are_written_when_the_daemon_stops(
        tmp_path: Path) -> None:
    node = build_node(build_config(None, {}, {"bind": "127.0.0.1:0",
                                              "state_dir": str(tmp_path)}))
    service = node.service
    async with trio.open_nursery() as nursery:
        await nursery.start(node.daemon.run)
        with trio.fail_after(10):
            while not service.ready:
                await trio.sleep(0.02)
        storage = node.daemon.storage
        assert storage is not None
        storage.linger = 3600.0  # nobody waits for them: they are still queued at the stop
        outcomes = service.publish_unreliable(
            [Publish("t", {"n": n}, reliable=False) for n in range(3)])
        assert all(isinstance(o, PublishResult) for o in outcomes)
        await trio.testing.wait_all_tasks_blocked()
        assert storage.synced < storage.submitted
        node.daemon.stop()
    assert node.daemon.node is not None
    store = LogStore(tmp_path / LOG_FILE, node.daemon.node.node_hex, SyncPolicy())
    (log,) = store.load().logs
    store.close()
    assert [e.msg_id for e in log.events] == [
        o.msg_id for o in outcomes if isinstance(o, PublishResult)]

"""Reliable publishes answered by callback: on the core's notice, or ``timeout`` when none
comes in time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import trio
import trio.testing

from overlay.core.effects import Notice
from overlay.core.pubsub import NewEvent, PublishOutcome, publish_each
from overlay.runtime.api import ApiError, PublishResult
from overlay.runtime.api.requests import Publish
from overlay.runtime.core_service import CoreService


class FakeCore:
    """Publishes are recorded; ``root_here`` answers during the call, like a local root."""

    def __init__(self) -> None:
        self.published: list[tuple[str, str]] = []
        self.root_here = False
        self.service: CoreService | None = None

    def publish(self, now: float, topic: str, attrs: Any, payload: bytes, msg_id: str,
                ts: float, reliable: bool = True, ttl: float | None = None) -> str:
        if topic == "bad":
            raise ValueError("bad topic")
        self.published.append((topic, msg_id))
        if self.root_here:
            assert self.service is not None
            self.service._on_notice(Notice("published", {"topic": topic, "msg_id": msg_id,
                                                          "seq": len(self.published)}))
        return msg_id

    def publish_many(self, now: float, events: Sequence[NewEvent]) -> list[PublishOutcome]:
        return publish_each(self, now, events)  # type: ignore[arg-type]  # a fake core: publish_each calls only publish


class FakeDaemon:
    def __init__(self, core: FakeCore) -> None:
        self.node = core
        self.address = "127.0.0.1:1"
        self.deliver_handlers: list[Any] = []
        self.notice_handlers: list[Any] = []
        self.services: list[Any] = []

    def call(self, fn: Callable[[Any, float], Any]) -> Any:
        return fn(self.node, trio.current_time())


class Service(CoreService):
    mode = "test"

    @property
    def ready(self) -> bool:
        return self.daemon.node is not None

    def core_of(self, node: Any) -> Any:
        return node

    def core_status(self, node: Any) -> dict[str, Any]:
        return {}


def make(timeout: float = 10.0) -> tuple[Service, FakeCore]:
    core = FakeCore()
    service = Service(FakeDaemon(core), publish_timeout=timeout)  # type: ignore[arg-type]  # a fake daemon: the service uses only what it has
    core.service = service
    return service, core


def recorder() -> tuple[list[PublishResult | ApiError], Callable[[Any], None]]:
    seen: list[PublishResult | ApiError] = []
    return seen, seen.append


async def test_a_local_root_answers_before_begin_publishes_returns() -> None:
    service, core = make()
    core.root_here = True
    seen, done = recorder()
    assert service.begin_publishes([Publish(topic="t", msg_id="ab")], [done]) == [True]
    assert seen == [PublishResult("ab", 1)]
    assert len(service.pending) == 0 and not service.pending._queue


async def test_a_later_notice_answers_every_publish_of_that_msg_id() -> None:
    service, _ = make()
    first, done1 = recorder()
    second, done2 = recorder()
    service.begin_publishes([Publish(topic="t", msg_id="ab")] * 2, [done1, done2])
    assert first == second == [] and len(service.pending) == 2
    service._on_notice(Notice("published", {"topic": "t", "msg_id": "ab", "seq": 7}))
    assert first == second == [PublishResult("ab", 7)]
    assert len(service.pending) == 0 and not service.pending._queue


async def test_no_notice_is_a_timeout_after_the_timeout(
        autojump_clock: trio.testing.MockClock) -> None:
    service, _ = make(timeout=2.0)
    seen, done = recorder()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service._time_out_publishes, service.daemon)
        service.begin_publishes([Publish(topic="t", msg_id="ab")], [done])
        await trio.sleep(1.9)
        assert seen == []
        await trio.sleep(0.2)
        assert len(seen) == 1 and isinstance(seen[0], ApiError)
        assert seen[0].code == "timeout" and "msg_id ab" in seen[0].message
        # A notice after the time-out answers nobody twice.
        service._on_notice(Notice("published", {"topic": "t", "msg_id": "ab", "seq": 1}))
        assert len(seen) == 1
        nursery.cancel_scope.cancel()
    assert service.pending.timeouts == 1 and len(service.pending) == 0


async def test_a_refused_publish_is_answered_alone_and_leaves_no_waiter() -> None:
    service, _ = make()
    refused, done_refused = recorder()
    waiting, done_waiting = recorder()
    begun = service.begin_publishes([Publish(topic="bad"), Publish(topic="t", msg_id="ab")],
                                    [done_refused, done_waiting])
    assert begun == [True, True]
    assert len(refused) == 1 and isinstance(refused[0], ApiError)
    assert refused[0].code == "bad_request" and waiting == []
    assert len(service.pending) == 1 and len(service.pending._queue) == 1
    service._on_notice(Notice("published", {"topic": "t", "msg_id": "ab", "seq": 1}))
    assert waiting == [PublishResult("ab", 1)] and len(refused) == 1


async def test_a_node_not_ready_refuses_every_publish_of_a_batch() -> None:
    service, _ = make()
    service.daemon.node = None
    seen, done = recorder()
    assert service.begin_publishes([Publish(topic="t")] * 2, [done, done]) == [True, True]
    assert [o.code for o in seen if isinstance(o, ApiError)] == ["not_ready"] * 2
    unreliable = service.publish_unreliable([Publish(topic="t", reliable=False)])
    assert [o.code for o in unreliable if isinstance(o, ApiError)] == ["not_ready"]
    assert len(service.pending) == 0


async def test_the_awaitable_publish_rides_on_the_callback() -> None:
    service, core = make()
    core.root_here = True
    result = await service.publish(Publish(topic="t", msg_id="cd"))
    assert result == PublishResult("cd", 1)
    unreliable = await service.publish(Publish(topic="t", reliable=False))
    assert unreliable.seq is None and len(unreliable.msg_id) == 32


async def test_a_refused_notice_is_a_storage_error_for_every_publish_of_that_msg_id() -> None:
    service, _ = make()
    first, done1 = recorder()
    second, done2 = recorder()
    service.begin_publishes([Publish(topic="t", msg_id="ab")] * 2, [done1, done2])
    service._on_notice(Notice("refused", {"topic": "t", "msg_id": "ab",
                                          "code": "storage_error", "reason": "disk full"}))
    for seen in (first, second):
        assert len(seen) == 1 and isinstance(seen[0], ApiError)
        assert seen[0].code == "storage_error" and seen[0].extra == {"msg_id": "ab"}
        assert "disk full" in seen[0].message
    assert len(service.pending) == 0 and not service.pending._queue
    # A late acknowledgement (there is none for a refused event) would answer nobody.
    service._on_notice(Notice("published", {"topic": "t", "msg_id": "ab", "seq": 1}))
    assert len(first) == len(second) == 1

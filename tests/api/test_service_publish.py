"""The daemon's service over a real node, in process: publishes in batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from overlay.runtime.api import ApiError, Notifications, PublishResult
from overlay.runtime.api.requests import Publish, Subscribe
from overlay.runtime.api.service import Push
from overlay.runtime.config import build_config
from overlay.runtime.serve import build_node


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

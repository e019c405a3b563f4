"""When a new subscription is in effect (the ``subscribed`` notice), exact effects: at
the root at once; elsewhere once the parent says every edge from the root down holds
the node's digest with it; at once when the node's digest does not change."""

from __future__ import annotations

from scribe import ScribeConfig
from scribe.messages import Heartbeat, Join, JoinAck
from tests.scribe.helpers import TOPIC, make, ref

CONFIG = ScribeConfig(heartbeat_interval=1.0, parent_timeout=3.5)


def subscribed(host) -> list[int]:
    return [data["sub"] for kind, data in host.notices if kind == "subscribed"]


def test_a_subscription_at_the_root_is_in_effect_at_once() -> None:
    app, host = make(200, root=True, config=CONFIG)
    app.subscribe(0.0, TOPIC, "x > 1", 7)
    assert subscribed(host) == [7]
    assert ("subscribed", {"topic": TOPIC, "sub": 7}) in host.traces


def test_a_members_subscription_is_in_effect_once_its_digest_reached_the_root() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "x > 1", 7)
    assert [type(m) for _, m in host.routed] == [Join] and subscribed(host) == []
    app.on_direct(0.1, "n200", JoinAck(TOPIC, ref(200), (300, 200), 0))
    assert subscribed(host) == []  # adopted, but 200's own digest may not be up yet
    # 200 is not settled itself yet: its aggregate with ours is on its way up.
    app.on_direct(1.0, "n200", Heartbeat(TOPIC, ref(200), (300, 200), 1, 0, 0, False))
    assert subscribed(host) == []
    app.on_direct(2.0, "n200", Heartbeat(TOPIC, ref(200), (300, 200), 1, 0, 0, True))
    assert subscribed(host) == [7]


def test_a_subscription_the_digest_already_covers_is_in_effect_at_once() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 7)
    app.on_direct(0.1, "n200", JoinAck(TOPIC, ref(200), (300, 200), 0))
    app.on_direct(1.0, "n200", Heartbeat(TOPIC, ref(200), (300, 200), 1, 0, 0, True))
    host.clear()
    app.subscribe(2.0, TOPIC, "x > 1", 8)  # every event already comes here
    assert subscribed(host) == [8]
    app.subscribe(2.0, "other", "", 9)  # a new topic: a JOIN first
    assert subscribed(host) == [8]


def test_a_subscription_ended_before_it_was_in_effect_is_not_announced() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 6)
    app.subscribe(0.0, TOPIC, "x > 1", 7)
    app.on_direct(0.1, "n200", JoinAck(TOPIC, ref(200), (300, 200), 0))
    app.unsubscribe(0.5, 6)
    app.on_direct(2.0, "n200", Heartbeat(TOPIC, ref(200), (300, 200), 9, 0, 0, True))
    assert subscribed(host) == [7]

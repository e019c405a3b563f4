"""parse_request on the durable-consumer fields and ops (docs/API.md, Durable consumers):
every limit at its edge and one past it, as a client written from the docs sends them."""

from __future__ import annotations

from typing import Any

import pytest

from overlay.core.pubsub import MAX_TTL
from overlay.runtime.api.requests import (
    ApiError,
    Consumers,
    Durable,
    Fetch,
    Settle,
    Subscribe,
    parse_request,
)
from scribe.consumer_messages import MAX_NAME_CHARS
from scribe.consumer_values import (
    MAX_DELAY,
    MAX_DELIVER_LIMIT,
    MAX_FETCH,
    MAX_FETCH_WAIT,
    MAX_INFLIGHT_LIMIT,
    ConsumerConfig,
)


def durable(**fields: Any) -> Subscribe:
    request = parse_request({"op": "subscribe", "topic": "t", "durable": "w", **fields})
    assert isinstance(request, Subscribe)
    return request


def test_a_durable_subscribe_carries_its_settings_and_defaults_the_rest() -> None:
    assert durable().durable == Durable("w", ConsumerConfig())
    assert durable(ack=True, ack_wait=2, max_deliver=3, dead_letter="t.dead", max_inflight=9,
                   pull=True).durable == Durable("w", ConsumerConfig(
                       ack=True, ack_wait=2.0, max_deliver=3, dead_letter="t.dead",
                       max_inflight=9, pull=True))
    # null is absent, as for every optional field
    assert durable(ack=None, ack_wait=None).durable == Durable("w", ConsumerConfig())


@pytest.mark.parametrize(("field", "edge", "past"), [
    ("ack_wait", MAX_DELAY, MAX_DELAY + 0.001),
    ("max_deliver", MAX_DELIVER_LIMIT, MAX_DELIVER_LIMIT + 1),
    ("max_inflight", MAX_INFLIGHT_LIMIT, MAX_INFLIGHT_LIMIT + 1),
    ("max_deliver", 1, 0),
    ("max_inflight", 1, 0),
])
def test_each_setting_at_its_edge_and_one_past(field: str, edge: Any, past: Any) -> None:
    assert getattr(durable(**{field: edge}).durable.config, field) == edge  # type: ignore[union-attr]
    with pytest.raises(ApiError, match=field) as refused:
        durable(**{field: past})
    assert refused.value.code == "bad_request"


def test_a_consumer_name_at_its_edge_and_one_past() -> None:
    assert durable(durable="n" * MAX_NAME_CHARS).durable.name == "n" * MAX_NAME_CHARS  # type: ignore[union-attr]
    with pytest.raises(ApiError, match="durable"):
        durable(durable="n" * (MAX_NAME_CHARS + 1))
    with pytest.raises(ApiError, match="durable"):
        durable(durable="")


@pytest.mark.parametrize(("fields", "message"), [
    ({"expiry": 5}, "expiry"),
    ({"replay": {"last": 1}}, "replay"),
    ({"group": "g"}, "group"),
    ({"ack_wait": 0}, "ack_wait"),
    ({"ack_wait": float("nan")}, "ack_wait"),
    ({"ack": 1}, "field 'ack' must be a boolean"),
    ({"max_deliver": 2.0}, "field 'max_deliver' must be an integer"),
    ({"dead_letter": ""}, "dead_letter"),
])
def test_a_durable_subscribe_refuses_what_does_not_belong(fields: dict[str, Any],
                                                          message: str) -> None:
    with pytest.raises(ApiError, match=message):
        durable(**fields)


def test_settings_without_durable_are_refused_not_ignored() -> None:
    with pytest.raises(ApiError, match="'ack' is for a durable subscription"):
        parse_request({"op": "subscribe", "topic": "t", "ack": True})


def test_ack_nak_term_name_events_by_msg_id_or_msg_ids() -> None:
    assert parse_request({"op": "ack", "sub": 1, "msg_id": "ab"}) == Settle(1, "ack", ("ab",))
    assert parse_request({"op": "term", "sub": 1, "msg_ids": ["ab", "cd"]}) == \
        Settle(1, "term", ("ab", "cd"))
    assert parse_request({"op": "nak", "sub": 1, "msg_id": "ab", "delay": MAX_DELAY}) == \
        Settle(1, "nak", ("ab",), MAX_DELAY)
    for bad, message in [({"msg_id": "ab", "msg_ids": ["cd"]}, "one of"), ({}, "one of"),
                         ({"msg_ids": []}, "at least one"), ({"msg_ids": ["AB"]}, "msg_ids"),
                         ({"msg_ids": [5]}, "text"), ({"msg_id": "ab", "delay": -1}, "delay"),
                         ({"msg_id": "ab", "delay": MAX_DELAY + 1}, "delay")]:
        with pytest.raises(ApiError, match=message):
            parse_request({"op": "nak", "sub": 1, **bad})


def test_fetch_at_its_edges() -> None:
    assert parse_request({"op": "fetch", "sub": 2}) == Fetch(2, 1, 0.0)  # the defaults
    assert parse_request({"op": "fetch", "sub": 2, "max": MAX_FETCH, "wait": MAX_FETCH_WAIT}) \
        == Fetch(2, MAX_FETCH, MAX_FETCH_WAIT)
    for bad in ({"max": MAX_FETCH + 1}, {"max": 0}, {"wait": MAX_FETCH_WAIT + 0.5},
                {"wait": -0.1}, {"wait": float("inf")}):
        with pytest.raises(ApiError):
            parse_request({"op": "fetch", "sub": 2, **bad})


def test_consumers_and_delete_consumer() -> None:
    assert parse_request({"op": "consumers", "topic": "t"}) == Consumers("t", None)
    assert parse_request({"op": "delete_consumer", "topic": "t", "durable": "w"}) == \
        Consumers("t", "w", delete=True)
    with pytest.raises(ApiError, match="durable"):
        parse_request({"op": "delete_consumer", "topic": "t"})


def test_a_publish_ttl_at_its_edges() -> None:
    assert parse_request({"op": "publish", "topic": "t", "ttl": MAX_TTL}).ttl == MAX_TTL  # type: ignore[union-attr]
    assert parse_request({"op": "publish", "topic": "t", "ttl": 1}).ttl == 1.0  # type: ignore[union-attr]
    for bad in (0, -1, MAX_TTL + 1, float("inf"), True):
        with pytest.raises(ApiError, match="ttl"):
            parse_request({"op": "publish", "topic": "t", "ttl": bad})
    batch = parse_request({"op": "publish_batch", "events": [{"topic": "t", "ttl": 5},
                                                             {"topic": "t", "ttl": 0}]})
    assert batch.events[0].ttl == 5.0 and isinstance(batch.events[1], ApiError)  # type: ignore[union-attr]

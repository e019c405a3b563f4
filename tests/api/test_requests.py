"""parse_request on publishes: the fields checked in line and those left to helpers."""

from __future__ import annotations

from typing import Any

import pytest

from overlay.core.pubsub import MAX_TOPIC_CHARS
from overlay.runtime.api.requests import ApiError, Publish, parse_request

PAYLOAD = b"\x00p"


@pytest.mark.parametrize(
    ("request_map", "expected"),
    [
        ({"topic": "t", "attrs": {}, "payload": PAYLOAD, "reliable": False},
         Publish("t", {}, PAYLOAD, False, None)),
        ({"topic": "t"}, Publish("t", {}, b"", True, None)),  # every default
        ({"topic": "t", "attrs": None, "payload": None, "reliable": None},
         Publish("t", {}, b"", True, None)),  # null is absent
        ({"topic": "t", "attrs": {"k": 1, "s": "x", "b": True, "f": 0.5}, "payload": PAYLOAD},
         Publish("t", {"k": 1, "s": "x", "b": True, "f": 0.5}, PAYLOAD, True, None)),
        ({"topic": "t", "msg_id": "00ff"}, Publish("t", {}, b"", True, "00ff")),
        ({"topic": "x" * MAX_TOPIC_CHARS}, Publish("x" * MAX_TOPIC_CHARS, {}, b"", True, None)),
    ],
)
def test_good_publishes(request_map: dict[str, Any], expected: Publish) -> None:
    assert parse_request({"op": "publish", **request_map}) == expected


@pytest.mark.parametrize(
    ("request_map", "message"),
    [
        ({}, "missing field 'topic'"),
        ({"topic": ""}, "a topic is text of 1 to 1024"),
        ({"topic": "x" * (MAX_TOPIC_CHARS + 1)}, "a topic is text of 1 to 1024"),
        ({"topic": 5}, "field 'topic' must be text"),
        ({"topic": "t", "payload": "text"}, "field 'payload' must be bytes"),
        ({"topic": "t", "reliable": 1}, "field 'reliable' must be a boolean"),
        ({"topic": "t", "attrs": []}, "field 'attrs' must be a map"),
        ({"topic": "t", "attrs": {"k": [1]}}, "attribute 'k' must be"),
        ({"topic": "t", "attrs": {"k": float("nan")}}, "attribute 'k' is NaN"),
        ({"topic": "t", "attrs": {"": 1}}, "attribute names are text of 1 to 256"),
        ({"topic": "t", "msg_id": "XYZ"}, "a msg_id is 1 to 64 lowercase hex"),
        ({"topic": "t", "attrs": {"k": 1 << 63}}, "integers are 64-bit"),
        ({"topic": "t", "attrs": {"k": -(1 << 63) - 1}}, "integers are 64-bit"),
        ({"topic": "t", "attrs": {str(i): i for i in range(257)}}, "at most 256 attributes"),
        ({"topic": "t", "attrs": {"a" * 257: 1}}, "attribute names are text of 1 to 256"),
        ({"topic": "t", "msg_id": 7}, "field 'msg_id' must be text"),
    ],
)
def test_bad_publishes(request_map: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiError, match=message) as raised:
        parse_request({"op": "publish", **request_map})
    assert raised.value.code == "bad_request"

"""The size model (overlay.core.limits): its limits at their edges, and that every message
carrying one event at the largest size the API accepts fits ``max_frame``."""

from __future__ import annotations

import pytest

from chord.kbr import MAX_ADDRESS_LENGTH, NodeRef
from chord.messages import Route
from overlay.core.framing import encode_frame, encode_map
from overlay.core.limits import (
    DEFAULT_MAX_FRAME,
    GROUP_BYTES,
    MIN_MAX_FRAME,
    SizeLimits,
    TooLargeError,
    batches,
    event_cost,
    event_size,
)
from overlay.core.messages import Message, encode_message
from overlay.core.pubsub import MAX_ATTRS, MAX_TOPIC_CHARS
from overlay.gossip import messages as gossip
from scribe import messages as scribe
from scribe import publish_messages, wire_records

BIG_ID = (1 << 128) - 1
FAR = NodeRef(BIG_ID, "h" * MAX_ADDRESS_LENGTH)
MSG_ID = "f" * 64


def test_event_size_counts_payload_topic_and_attributes_as_documented() -> None:
    # text: UTF-8 bytes; integers and floats 8; booleans 1; names their UTF-8 bytes.
    assert event_size("t", {}, b"") == 1
    assert event_size("tö", {"a": "xé", "bb": 7, "c": 1.5, "d": True}, b"123") == (
        3 + 3 + (1 + 3) + (2 + 8) + (1 + 8) + (1 + 1))
    assert event_cost("t", {"a": 1}, b"xy") > event_size("t", {"a": 1}, b"xy")


@pytest.mark.parametrize("max_frame", [MIN_MAX_FRAME, DEFAULT_MAX_FRAME, 4 << 20])
def test_limits_at_their_edges(max_frame: int) -> None:
    sizes = SizeLimits(max_frame)
    assert sizes.max_payload < sizes.max_event < sizes.max_frame
    sizes.check_event("t", {}, b"x" * sizes.max_payload)
    with pytest.raises(TooLargeError, match="max_payload"):
        sizes.check_event("t", {}, b"x" * (sizes.max_payload + 1))
    # An event at exactly max_event, the rest of it in one attribute.
    room = sizes.max_event - sizes.max_payload - len("t") - len("a")
    sizes.check_event("t", {"a": "v" * room}, b"x" * sizes.max_payload)
    with pytest.raises(TooLargeError, match="max_event"):
        sizes.check_event("t", {"a": "v" * (room + 1)}, b"x" * sizes.max_payload)


def test_max_frame_below_the_minimum_is_refused() -> None:
    SizeLimits(MIN_MAX_FRAME)
    with pytest.raises(ValueError, match="at least"):
        SizeLimits(MIN_MAX_FRAME - 1)


def test_batches_are_bounded_by_bytes_and_by_count() -> None:
    items = [5, 5, 5, 5, 5]
    assert list(batches(items, lambda x: x, 10)) == [[5, 5], [5, 5], [5]]
    assert list(batches(items, lambda x: x, 15, max_count=2)) == [[5, 5], [5, 5], [5]]
    assert list(batches([30, 1], lambda x: x, 10)) == [[30], [1]]  # alone, never dropped
    assert list(batches([], lambda x: x, 10)) == []


def _largest_event(sizes: SizeLimits, seq: int | None) -> wire_records.EventBody:
    """An event at exactly max_event with as much CBOR around its counted bytes as the
    API allows: a topic of 4-byte characters, the most attributes, each a 64-bit
    integer (9 bytes of CBOR for 8 counted), the rest in one long text value."""
    topic = "\U0001f600" * MAX_TOPIC_CHARS
    attrs: dict[str, str | int | float | bool] = {
        f"{i:03d}": -(1 << 63) for i in range(MAX_ATTRS - 1)}
    used = event_size(topic, attrs, b"")
    attrs["z"] = "v" * (sizes.max_event - used - 1 - sizes.max_payload)
    body = wire_records.EventBody(topic, MSG_ID, seq, attrs, b"\xff" * sizes.max_payload,
                            "f" * 32, 1e300)
    assert event_size(topic, attrs, body.payload) == sizes.max_event
    return body


def _wire_size(msg: Message, **extra: int) -> int:
    wire = encode_message(msg)
    wire.update(extra)  # the transport's request keys
    return len(encode_map(wire))


@pytest.mark.parametrize("max_frame", [MIN_MAX_FRAME, DEFAULT_MAX_FRAME])
def test_every_message_with_one_largest_event_fits_max_frame(max_frame: int) -> None:
    sizes = SizeLimits(max_frame)
    numbered = _largest_event(sizes, (1 << 63) - 1)
    fresh = _largest_event(sizes, None)
    groups = tuple(f"{i:04d}" + "\U0001f600" * 252 for i in range(64))
    copies = [
        Route(BIG_ID, FAR, (1 << 63) - 1, 1 << 20, True, True,
              publish_messages.Publish(fresh, FAR, True)),
        publish_messages.Replicate(numbered, FAR),
        *[scribe.Event(numbered, 1 << 20, FAR, True, run, (1 << 63) - 2, True, 1 << 62)
          for run in wire_records.group_runs(groups)],
        scribe.Fill(numbered.topic, FAR, 0, (1 << 63) - 1, (numbered,), 1 << 62, True, True),
        scribe.ReplayFill(numbered.topic, 1 << 62, FAR, (1 << 63) - 1, (numbered,), 7, 8),
        publish_messages.ReplicaSync(numbered.topic, (1 << 63) - 1, FAR, (numbered,)),
        gossip.Event(gossip.EventBody(fresh.topic, MSG_ID, fresh.attrs, fresh.payload,
                                      "f" * 32, 1e300), 1 << 16, 1 << 16, True),
        gossip.Rumor((gossip.Carried(gossip.EventBody(fresh.topic, MSG_ID, fresh.attrs,
                                                      fresh.payload, "f" * 32, 1e300),
                                     1 << 16, True),)),
    ]
    assert len(wire_records.group_runs(groups)) > 1  # the groups did not fit one copy
    for msg in copies:
        size = _wire_size(msg, r=(1 << 63) - 1, a=(1 << 63) - 1)
        assert size <= max_frame, (type(msg).__name__, size, max_frame)
    # The API frames: the publish request and the notify push.
    publish = {"op": "publish", "rid": (1 << 64) - 1, "topic": fresh.topic,
               "attrs": fresh.attrs, "payload": fresh.payload, "reliable": True,
               "msg_id": MSG_ID}
    notify = {"event": "notify", "sub": (1 << 64) - 1, "topic": fresh.topic,
              "msg_id": MSG_ID, "seq": (1 << 63) - 1, "attrs": fresh.attrs,
              "payload": fresh.payload, "publisher": "f" * 32, "ts": 1e300}
    for frame in (publish, notify):
        assert len(encode_frame(frame, max_frame)) - 4 <= max_frame


def test_group_runs_stay_within_their_share() -> None:
    groups = [f"g{i}" + "x" * 250 for i in range(200)]
    runs = wire_records.group_runs(groups)
    assert [g for run in runs for g in run] == groups
    assert all(sum(wire_records.group_cost(g) for g in run) <= GROUP_BYTES for run in runs)
    assert wire_records.group_runs([]) == [()]

"""Scribe messages survive the wire, and malformed ones from peers are rejected."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from overlay.core.errors import MessageError
from overlay.core.framing import decode_map, encode_map
from overlay.core.messages import Message, decode_message, encode_message
from scribe.messages import (
    AnycastBack,
    DigestUpdate,
    Disown,
    Event,
    Events,
    Heartbeat,
    HeartbeatAck,
    JoinAck,
    Leave,
    RootHandover,
)
from scribe.publish_messages import (
    Publish,
    PublishAck,
    Publishes,
    PublishRefused,
    ReplicateAck,
    ReplicateAcks,
)
from scribe.wire_records import MAX_BATCH, EventBody
from tests.scribe.helpers import TOPIC, body, digest, join, ref

EXAMPLES: list[Message] = [
    join(5, "x > 1", "sym IN ('A', 'B')", groups={"g": (["y = 2"], 3)}, redirects=2),
    JoinAck(TOPIC, ref(7), (1, 2, 7)),
    Leave(TOPIC, ref(5)),
    Disown(TOPIC, ref(7)),
    DigestUpdate(TOPIC, ref(5), digest(""), 4),
    Heartbeat(TOPIC, ref(7), (), 3),
    HeartbeatAck(TOPIC, ref(5)),
    RootHandover(TOPIC, 12, ref(7), None, 0),
    RootHandover(TOPIC, 0, ref(7), digest("a = 1"), 5),
    RootHandover(TOPIC, 3, ref(7), None, 0, (body("00ff", seq=3),), live=True),
    Publish(body("00ff", seq=None, x=1.5, ok=True, s="v"), ref(3)),
    Publishes(TOPIC, (body("00ff", seq=None, x=1), body("0100", seq=None)), ref(3), False),
    PublishAck(TOPIC, "00ff", 4, ref(9)),
    PublishRefused(TOPIC, "00ff", "database or disk is full", ref(9)),
    ReplicateAck(TOPIC, "00ff", 4, ref(9), stored=False),
    ReplicateAcks(TOPIC, ("00ff", "0100"), (4, 5), ref(9)),
    Event(body("00ff", seq=4, x=1), 2, ref(7), True, ("g", "h")),
    Events(TOPIC, (body("00ff", seq=4, x=1), body("0100", seq=6)), 2, ref(7), 3, True, 5),
    AnycastBack(TOPIC, "00ff", ("g",), ref(5)),
]


def round_tripped(msg: Message) -> Message:
    """``msg`` encoded, framed, unframed and decoded, as a peer gets it."""
    return decode_message(decode_map(encode_map(encode_message(msg))))


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: m.type_name)
def test_round_trip(msg: Message) -> None:
    assert round_tripped(msg) == msg


#: A run of publishes, for malformed variants.
RUN = Publishes(TOPIC, (body("aa", seq=None),), ref(1))
#: A run of copies down a tree edge, for malformed variants.
DOWN = Events(TOPIC, (body("aa", seq=2), body("bb", seq=3)), 1, ref(7), 1)


def wire_of(msg: Message, **changes: Any) -> dict[str, Any]:
    wire = encode_message(msg)
    wire.update(changes)
    return wire


@pytest.mark.parametrize("wire", [
    wire_of(Leave(TOPIC, ref(5)), topic=""),
    wire_of(JoinAck(TOPIC, ref(7), ()), path=list(range(2000))),
    wire_of(Event(body(seq=1), 1, ref(7), True, ()), hop=0),
    wire_of(Event(body(seq=1), 1, ref(7), True, ()),
            body={**body(seq=1).to_wire(), "msg_id": "XYZ"}),
    wire_of(Event(body(seq=1), 1, ref(7), True, ()),
            body={**body(seq=1).to_wire(), "attrs": {"x": [1]}}),
    wire_of(Publish(body(seq=None), ref(1)), body=body(seq=3).to_wire()),
    wire_of(DigestUpdate(TOPIC, ref(5), digest(""), 1), digest={"plain": {"f": ["x >"]},
                                                                "groups": {}}),
    wire_of(DigestUpdate(TOPIC, ref(5), digest(""), 1), digest={"plain": {}, "groups": {
        "g": {"summary": {}, "distance": -1}}}),
    wire_of(Leave(TOPIC, ref(5)), extra=1),
    wire_of(PublishRefused(TOPIC, "00ff", "full", ref(9)), reason="x" * 201),
    wire_of(RUN, bodies=[]),
    wire_of(RUN, bodies=[body("aa", seq=3).to_wire()]),
    wire_of(RUN, bodies=[EventBody("u", "aa", None, {}, b"p", "0001", 5.0).to_wire()]),
    wire_of(RUN, bodies=[body("aa", seq=None).to_wire()] * 2),
    wire_of(RUN, bodies=[body(format(i, "x"), seq=None).to_wire()
                         for i in range(MAX_BATCH + 1)]),
    wire_of(DOWN, bodies=[]),
    wire_of(DOWN, bodies=[body("aa", seq=None).to_wire()]),
    wire_of(DOWN, bodies=[body("aa", seq=3).to_wire(), body("bb", seq=3).to_wire()]),
    wire_of(DOWN, bodies=[EventBody("u", "aa", 2, {}, b"p", "0001", 5.0).to_wire()]),
    wire_of(DOWN, prev=2),
    wire_of(DOWN, hop=0),
    wire_of(DOWN, bodies=[body(format(i, "x"), seq=i + 1).to_wire()
                          for i in range(MAX_BATCH + 1)]),
], ids=range(22))
def test_malformed_messages_are_rejected(wire: dict[str, Any]) -> None:
    with pytest.raises(MessageError):
        decode_message(wire)


def test_a_run_of_publishes_carries_up_to_max_batch_events() -> None:
    full = Publishes(TOPIC, tuple(body(format(i, "x"), seq=None) for i in range(MAX_BATCH)),
                     ref(1))
    assert round_tripped(full) == full


def test_a_run_down_an_edge_carries_up_to_max_batch_events_and_stands_for_chained_copies(
        ) -> None:
    full = Events(TOPIC, tuple(body(format(i, "x"), seq=i + 1) for i in range(MAX_BATCH)),
                  2, ref(7))
    assert round_tripped(full) == full
    assert DOWN.copies() == [Event(body("aa", seq=2), 1, ref(7), True, (), 1),
                             Event(body("bb", seq=3), 1, ref(7), True, (), 2)]


def test_numbering_copies_every_field_but_seq_and_prev() -> None:
    published = EventBody("t", "ab", None, {"x": 1}, b"p", "00c8", 2.5)
    assert published.numbered(7, "ab") == dataclasses.replace(published, seq=7, prev="ab")
    with pytest.raises(ValueError):
        published.numbered(0, None)


@pytest.mark.parametrize("publisher", ["00C8", "", "0" * 65, "00c8 ", "xyz"])
def test_a_bad_publisher_id_is_refused_every_time_after_good_ones_were_remembered(
        publisher: str) -> None:
    """The publisher test remembers its answers (is_node_hex): a good id is still
    accepted, a bad one refused each time, not only when first seen."""
    for _ in range(2):
        assert EventBody("t", "ab", None, {}, b"p", "00c8", 2.5).publisher == "00c8"
        with pytest.raises(ValueError, match="publisher id"):
            EventBody("t", "ab", None, {}, b"p", publisher, 2.5)
        wire = {**body("aa", seq=2).to_wire(), "publisher": publisher}
        with pytest.raises(MessageError):
            decode_message(wire_of(Event(body(seq=1), 1, ref(7), True, ()), body=wire))

"""Durable consumers' messages survive the wire, and malformed ones from peers are
rejected (scribe.consumer_messages)."""

from __future__ import annotations

from typing import Any

import pytest

from overlay.core.errors import MessageError
from overlay.core.messages import Message, decode_message, encode_message
from scribe.consumer_messages import (
    MAX_ACK_IDS,
    MAX_NAME_CHARS,
    MAX_REPORTED,
    ConsumerAck,
    ConsumerAttach,
    ConsumerAttached,
    ConsumerDeliver,
    ConsumerDetach,
    ConsumerFetch,
    ConsumerQuery,
    ConsumerReport,
    ConsumerSync,
)
from scribe.consumer_values import MAX_FETCH, ConsumerConfig, Progress
from tests.scribe.helpers import TOPIC, body, ref
from tests.scribe.test_messages import round_tripped, wire_of

CONFIG = tuple(ConsumerConfig(ack=True, ack_wait=2.5, dead_letter="dead").to_wire())
REPORT = {"durable": "workers", "filter": "", "ack": True, "ack_wait": 30.0, "max_deliver": 5,
          "dead_letter": None, "max_inflight": 256, "pull": False, "pending": 3, "inflight": 1,
          "members": 2, "redelivered": 0, "dead_lettered": 0, "ack_floor": 9}
PROGRESS = tuple(Progress(ConsumerConfig(ack=True), 3, (5,), ((4, 2),), 6).to_wire())

EXAMPLES: list[Message] = [
    ConsumerAttach(TOPIC, "workers", ref(3), 7, CONFIG, "x > 1"),
    ConsumerAttached(TOPIC, "workers", 7, ref(9)),
    ConsumerAttached(TOPIC, "workers", 7, ref(9), "exists with other settings", "conflict"),
    ConsumerDetach(TOPIC, "workers", ref(3), 7),
    ConsumerAck(TOPIC, "workers", ref(3), 7, "nak", ("00ff", "0100"), 1.5),
    ConsumerFetch(TOPIC, "workers", ref(3), 7, 12, MAX_FETCH, 30.0),
    ConsumerDeliver(TOPIC, "workers", 7, (body("00ff", seq=4), body("0100", seq=2)), (1, 3)),
    ConsumerDeliver(TOPIC, "workers", 7, (), (), fetch_id=12),
    ConsumerSync(TOPIC, "workers", ref(9), PROGRESS, ""),
    ConsumerSync(TOPIC, "workers", ref(9), None, ""),
    ConsumerQuery(TOPIC, ref(3), 5),
    ConsumerQuery(TOPIC, ref(3), 6, "workers", delete=True),
    ConsumerReport(TOPIC, 6, (REPORT,), more=True),
]


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: m.type_name)
def test_round_trip(msg: Message) -> None:
    assert round_tripped(msg) == msg


@pytest.mark.parametrize("msg,changes", [
    (EXAMPLES[0], {"name": ""}),
    (EXAMPLES[0], {"name": "n" * (MAX_NAME_CHARS + 1)}),
    (EXAMPLES[0], {"config": [True, 0, 5, None, 256, False]}),  # ack_wait 0
    (EXAMPLES[0], {"sub": -1}),
    (EXAMPLES[4], {"op": "maybe"}),
    (EXAMPLES[4], {"msg_ids": []}),
    (EXAMPLES[4], {"msg_ids": ["00"] * (MAX_ACK_IDS + 1)}),
    (EXAMPLES[4], {"msg_ids": ["XYZ"]}),
    (EXAMPLES[4], {"delay": -1.0}),
    (EXAMPLES[5], {"count": MAX_FETCH + 1}),
    (EXAMPLES[5], {"count": 0}),
    (EXAMPLES[6], {"attempts": [1]}),  # one attempt for two events
    (EXAMPLES[6], {"attempts": [0, 1]}),
    (EXAMPLES[7], {"fetch_id": None}),  # a push without events
    (EXAMPLES[8], {"progress": [1, 2, 3]}),
    (EXAMPLES[1], {"code": "conflict"}),  # a code without an error
    (EXAMPLES[2], {"code": "other"}),
    (EXAMPLES[2], {"code": None}),  # an error without a code
    (EXAMPLES[10], {"delete": True}),  # a delete names its consumer
    (EXAMPLES[11], {"name": ""}),
    (EXAMPLES[12], {"consumers": [{"durable": "w"}]}),  # fields missing
    (EXAMPLES[12], {"consumers": [{**REPORT, "durable": ""}]}),
    (EXAMPLES[12], {"consumers": [REPORT] * (MAX_REPORTED + 1)}),
])
def test_malformed_messages_from_peers_are_rejected(msg: Message,
                                                    changes: dict[str, Any]) -> None:
    with pytest.raises(MessageError):
        decode_message(wire_of(msg, **changes))


def test_the_largest_allowed_values_pass() -> None:
    ack = ConsumerAck(TOPIC, "n" * MAX_NAME_CHARS, ref(3), 7, "ack", ("00",) * MAX_ACK_IDS)
    assert decode_message(encode_message(ack)) == ack

"""How :class:`overlay.runtime.logstore.LogStore`'s rows hold what they store, and how a
row read back is checked: any decoding or checking failure is damage, reported and
never served."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, TypeVar

import cbor2

from scribe.consumer_values import Progress
from scribe.wire_records import EventBody

T = TypeVar("T")


def event_row(body: EventBody) -> tuple[Any, ...]:
    """What a run stores of an event beyond its topic: a CBOR array, cheaper to make than
    the event's wire map (the worker thread shares the interpreter with the event
    loop)."""
    row: tuple[Any, ...] = (body.seq, body.msg_id, body.attrs, body.payload, body.publisher,
                            body.ts)
    if body.prev is not None:
        return (*row, body.ttl, body.prev)
    return row if body.ttl is None else (*row, body.ttl)


def checked_run(topic: str, first: int, last: int, data: bytes, crc: int
                 ) -> list[EventBody] | str:
    """A run's events, or what is wrong with it."""
    def decode(rows: Any) -> list[EventBody]:
        if type(rows) is not list or not rows:
            raise ValueError("a run is a non-empty array of events")
        return [_stored_event(topic, row, first, last) for row in rows]

    return checked_row(data, crc, f"events {first}-{last}", decode)


def _stored_event(topic: str, row: Any, first: int, last: int) -> EventBody:
    # Six fields, the ttl seventh when the event has one or a prev, the prev eighth
    # when it has one.
    seq, msg_id, attrs, payload, publisher, ts, *rest = row
    if len(rest) > 2:
        raise ValueError("an event is 6 to 8 fields")
    if type(seq) is not int or not first <= seq <= last:
        raise ValueError("an event's seq is within its run's")
    # EventBody checks every field as it does a peer's (a ValueError if one is bad).
    return EventBody(topic, msg_id, seq, attrs, payload, publisher, ts, *rest)


def checked_row(data: object, crc: int, what: str, decode: Callable[[Any], T]) -> T | str:
    """A stored row's CBOR decoded and checked by ``decode``, or what is wrong with it
    (``what``: the row, for the report). Any decoding or checking failure is damage."""
    if not isinstance(data, bytes) or zlib.crc32(data) != crc:
        return f"{what}: checksum mismatch"
    try:
        return decode(cbor2.loads(data))
    except Exception as exc:  # any decoding or checking failure is damage
        return f"{what}: undecodable ({type(exc).__name__})"


def decode_consumer(row: Any) -> tuple[Progress, str]:
    wire, filter_text = row
    if type(filter_text) is not str:
        raise TypeError("the filter is text")
    return Progress.from_wire(wire), filter_text


def checked_body_v1(topic: str, seq: int, msg_id: str, data: bytes, crc: int
                    ) -> EventBody | str:
    """A schema-1 row's event (one row per event), or what is wrong with it. Its CBOR is
    a run's event without the seq, which had a column of its own (rows written before
    events had a prev have five or six fields)."""
    body = checked_row(data, crc, f"event {seq}",
                       lambda row: _stored_event(topic, [seq, *row], seq, seq))
    if isinstance(body, EventBody) and body.msg_id != msg_id:
        return f"event {seq}: does not match its row"
    return body


__all__ = ["checked_body_v1", "checked_row", "checked_run", "decode_consumer", "event_row"]

"""Frames and messages: round trips and every kind of bad input."""

from __future__ import annotations

import contextlib
import dataclasses
import struct
from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chord.messages import FindSuccessor, Notify
from overlay.core import (
    FrameDecoder,
    FrameError,
    LocalProtocolError,
    Message,
    MessageError,
    Record,
    decode_map,
    decode_message,
    encode_frame,
    encode_map,
    encode_message,
    message,
    messages,
    record,
)
from overlay.core.framing import CborEncoder, MapDecoder, frame_bytes


@record
class Ref(Record):
    id: int
    addr: str


@message("test.wire_sample")
class Sample(Message):
    seq: int
    who: Ref
    ratio: float
    ok: bool
    blob: bytes
    path: tuple[Ref, ...] = ()
    note: str | None = None
    attrs: dict[str, str | int | float | bool] | None = None


SAMPLE = Sample(
    seq=7,
    who=Ref(2**127 + 3, "10.0.0.1:7000"),
    ratio=0.5,
    ok=True,
    blob=b"\x00\xff",
    path=(Ref(1, "a:1"), Ref(2, "b:2")),
    attrs={"sym": "ACME", "price": 101.5, "n": 3, "urgent": False},
)


def frame_of(obj: object) -> bytes:
    body = cbor2.dumps(obj)
    return struct.pack(">I", len(body)) + body


def test_message_round_trip_through_a_frame() -> None:
    decoder = FrameDecoder()
    decoder.feed(encode_frame(encode_message(SAMPLE)))
    (body,) = decoder.bodies()
    assert decode_message(decode_map(body)) == SAMPLE


def test_frames_split_across_reads_and_glued_together() -> None:
    data = encode_frame({"a": 1}) + encode_frame({"b": [1, 2]}) + encode_frame({"c": b"x"})
    decoder = FrameDecoder()
    got = []
    for i in range(len(data)):  # one byte at a time
        decoder.feed(data[i : i + 1])
        got += [decode_map(b) for b in decoder.bodies()]
    assert got == [{"a": 1}, {"b": [1, 2]}, {"c": b"x"}]
    decoder.close()  # nothing left over: no error


def test_what_is_buffered_counts_only_bytes_not_taken_out_as_frames() -> None:
    first, second = encode_frame({"a": 1}), encode_frame({"b": b"xy"})
    decoder = FrameDecoder()
    decoder.feed(first + second + second[:3])
    assert decoder.buffered == len(first + second) + 3
    assert decode_map(decoder.next_body() or b"") == {"a": 1}
    assert decoder.buffered == len(second) + 3
    assert decode_map(decoder.next_body() or b"") == {"b": b"xy"}
    assert decoder.next_body() is None and decoder.buffered == 3
    decoder.feed(second[3:])  # the rest of the third frame, after the first two are gone
    assert decoder.bodies() == [second[4:]] and decoder.buffered == 0
    decoder.close()


def test_truncated_frame_is_an_error_at_end_of_stream() -> None:
    decoder = FrameDecoder()
    decoder.feed(encode_frame({"a": 1})[:-1])
    assert decoder.bodies() == []
    with pytest.raises(FrameError, match="inside a frame"):
        decoder.close()


def test_oversized_frame_is_refused_before_its_body_arrives() -> None:
    decoder = FrameDecoder(max_frame=100)
    decoder.feed(struct.pack(">I", 101))
    with pytest.raises(FrameError, match="exceeds the limit of 100"):
        decoder.next_body()
    with pytest.raises(FrameError):  # the stream stays broken
        decoder.feed(b"more")


def test_encoding_an_oversized_frame_is_local_misuse() -> None:
    with pytest.raises(LocalProtocolError, match=r"of 20[0-9] bytes exceeds"):
        encode_frame({"x": b"0" * 200}, max_frame=100)
    with pytest.raises(LocalProtocolError, match="exceeds the limit of 100"):
        frame_bytes(b"0" * 101, max_frame=100)
    assert frame_bytes(b"0" * 100, max_frame=100) == b"\x00\x00\x00\x64" + b"0" * 100


@pytest.mark.parametrize("encode", [encode_frame, encode_map])
def test_encoding_what_cbor_cannot_hold_is_local_misuse(encode: Any) -> None:
    with pytest.raises(LocalProtocolError, match="cannot encode"):
        encode({"x": object()})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xff\xff", "not valid CBOR"),
        (cbor2.dumps([1, 2]), "must be a CBOR map"),
        (cbor2.dumps({"a": 1}) + b"\x00", "trailing bytes"),
        (b"\xa1", "not valid CBOR"),
        (b"\xa2\x61a\x01\x61a\x02", "not valid CBOR"),  # duplicate key
        (b"\x81" * 100 + b"\x00", "not valid CBOR"),  # nesting too deep
    ],
)
def test_bad_frame_bodies(body: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        decode_map(body)


def test_one_map_decoder_reads_frame_after_frame() -> None:
    """Its one buffer is refilled per frame: a short frame after a long one has no
    bytes of the long one left behind, and a bad frame spoils none after it."""
    decode = MapDecoder()
    long_map = {"op": "publish", "payload": b"x" * 5000, "attrs": {"a": 1}}
    assert decode(cbor2.dumps(long_map)) == long_map
    assert decode(cbor2.dumps({"a": 1})) == {"a": 1}
    with pytest.raises(FrameError, match="trailing bytes"):
        decode(cbor2.dumps({"a": 1}) + b"\x00")
    with pytest.raises(FrameError, match="not valid CBOR"):
        decode(b"\xa2\x61a\x01")  # truncated inside the map
    with pytest.raises(FrameError, match="not valid CBOR"):
        decode(b"\xa2\x61a\x01\x61a\x02")  # duplicate key
    assert decode(cbor2.dumps({"b": [1, 2]})) == {"b": [1, 2]}


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        ({"seq": 1}, "needs a text field 't'"),
        ({"t": "no.such.type"}, "unknown message type"),
        ({**encode_message(SAMPLE), "seq": "7"}, "seq: expected int, got str"),
        ({**encode_message(SAMPLE), "seq": True}, "seq: expected int, got bool"),
        ({**encode_message(SAMPLE), "ratio": "x"}, "ratio: expected a number"),
        ({**encode_message(SAMPLE), "who": {"id": 1}}, "who: missing field 'addr'"),
        ({**encode_message(SAMPLE), "path": [{"id": 1, "addr": 2}]}, "path: addr: expected str"),
        ({**encode_message(SAMPLE), "path": "ab"}, "path: expected an array"),
        ({**encode_message(SAMPLE), "attrs": {"k": [1]}}, "attrs"),
        ({**encode_message(SAMPLE), "extra": 1}, "unknown field 'extra'"),
        ({**encode_message(SAMPLE), 7: 1}, "unknown field 7"),
        ({k: v for k, v in encode_message(SAMPLE).items() if k != "blob"}, "missing field 'blob'"),
    ],
)
def test_bad_messages(wire: dict[str, object], message: str) -> None:
    with pytest.raises(MessageError, match=message):
        decode_message(wire)


@message("test.wire_envelope")
class Envelope(Message):
    key: int
    payload: Message


def test_a_message_field_carries_any_registered_message() -> None:
    env = Envelope(5, SAMPLE)
    assert decode_message(decode_map(encode_map(encode_message(env)))) == env
    bad = {**encode_message(env), "payload": {"t": "no.such"}}
    with pytest.raises(MessageError, match="payload: unknown message type"):
        decode_message(bad)


def test_optional_fields_take_their_defaults() -> None:
    wire = encode_message(SAMPLE)
    for key in ("path", "note", "attrs"):
        del wire[key]
    decoded = decode_message(wire)
    assert isinstance(decoded, Sample)
    assert decoded.path == () and decoded.note is None and decoded.attrs is None


def test_registering_a_type_twice_is_local_misuse() -> None:
    with pytest.raises(LocalProtocolError):

        @message("test.wire_sample")
        class Again(Message):
            x: int


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_raise_anything_but_frame_errors(data: bytes) -> None:
    decoder = FrameDecoder(max_frame=256)
    try:
        decoder.feed(data)
        for body in decoder.bodies():
            with contextlib.suppress(MessageError):
                decode_message(decode_map(body))
        decoder.close()
    except FrameError:
        pass


cbor_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["t", "seq", "who", "ratio", "ok", "blob", "path"]), cbor_values
    )
)
def test_random_maps_are_rejected_with_message_errors(wire: dict[str, object]) -> None:
    with contextlib.suppress(MessageError, FrameError):
        decode_message(decode_map(cbor2.dumps(wire)))


@record
class Checked(Record):
    """A record with a default and a check, built by the slot-storing __init__."""

    low: int
    high: int = 10

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError("low above high")


def test_records_take_positional_keyword_and_default_fields_and_run_their_check() -> None:
    assert (Checked(1).low, Checked(1).high) == (1, 10)
    assert Checked(1, 5) == Checked(high=5, low=1) == dataclasses.replace(Checked(1), high=5)
    assert hash(Checked(1, 5)) == hash(Checked(low=1, high=5))
    with pytest.raises(ValueError, match="low above high"):
        Checked(11)
    with pytest.raises(TypeError):
        Checked()  # type: ignore[call-arg]  # deliberately wrong: the refusal is under test
    with pytest.raises(TypeError):
        Checked(1, 2, 3)  # type: ignore[call-arg]  # deliberately wrong: the refusal is under test
    with pytest.raises(dataclasses.FrozenInstanceError):
        Checked(1).low = 2  # type: ignore[misc]  # deliberately assigning a frozen field: the refusal is under test
    assert SAMPLE.path[1] == Ref(2, "b:2") and SAMPLE.note is None


def test_a_record_field_with_a_default_factory_is_refused_at_declaration() -> None:
    with pytest.raises(TypeError, match="plain defaults"):

        @record
        class Listy(Record):
            items: list[int] = dataclasses.field(default_factory=list)


@message("test.wire_unions")
class Unions(Message):
    number_first: float | int
    int_first: int | float
    values: dict[str, str | int | float | bool]
    items: tuple[int | None, ...]


def test_union_values_decode_as_the_first_option_that_takes_them() -> None:
    wire = {"t": "test.wire_unions", "number_first": 3, "int_first": 3,
            "values": {"s": "x", "i": 2, "f": 2.5, "b": True}, "items": [1, None]}
    got = decode_message(wire)
    assert isinstance(got, Unions)
    # float comes first: its decoder turns the int into a float; int first keeps it.
    assert type(got.number_first) is float and type(got.int_first) is int
    assert [type(v) for v in got.values.values()] == [str, int, float, bool]
    assert got.items == (1, None)
    for bad in ({"values": {"x": [1]}}, {"items": [1.5]}, {"int_first": "3"}):
        with pytest.raises(MessageError):
            decode_message({**wire, **bad})


@record
class Peer(Record):
    reuse_wire = True
    intern_decoded = True

    id: int
    addr: str


@message("test.wire_hello")
class Hello(Message):
    who: Peer
    n: int


def test_an_interned_record_is_made_once_per_map_and_a_look_alike_map_is_still_checked() -> None:
    wire = {"t": "test.wire_hello", "who": {"id": 1, "addr": "a:1"}, "n": 0}
    first, second = decode_message(wire), decode_message({**wire, "n": 1})
    assert isinstance(first, Hello) and isinstance(second, Hello)
    assert first.who is second.who and first.who == Peer(1, "a:1")
    # Equal under == but not of the field's type: refused, not served from what was kept.
    for who in ({"id": True, "addr": "a:1"}, {"id": 1.0, "addr": "a:1"},
                {"id": 1, "addr": "a:1", "x": 2}):
        with pytest.raises(MessageError):
            decode_message({**wire, "who": who})
    other = decode_message({**wire, "who": {"id": 2, "addr": "a:1"}})
    assert isinstance(other, Hello) and other.who == Peer(2, "a:1")


def test_a_reused_wire_map_belongs_to_the_same_instance_only() -> None:
    a, b = Peer(1, "a:1"), Peer(2, "b:2")
    assert encode_message(Hello(a, 0))["who"] == {"id": 1, "addr": "a:1"}
    assert encode_message(Hello(a, 1))["who"] is encode_message(Hello(a, 2))["who"]
    assert encode_message(Hello(b, 0))["who"] == {"id": 2, "addr": "b:2"}
    assert decode_message(encode_message(Hello(a, 3))) == Hello(a, 3)


@record
class Item(Record):
    reuse_wire = True

    n: int
    note: str | None = None


@message("test.wire_items")
class Items(Message):
    items: tuple[Item, ...]


def test_a_decoded_record_goes_on_with_the_peers_map_when_it_holds_exactly_its_fields(
        ) -> None:
    full, short, tagged = {"n": 1, "note": None}, {"n": 2}, {"n": 3, "t": "x"}
    got = decode_message({"t": "test.wire_items", "items": [full, short, tagged]})
    assert isinstance(got, Items) and got.items == (Item(1), Item(2), Item(3))
    out = encode_message(Items(got.items))["items"]  # passed on as it came
    assert out[0] is full
    # Checked and decoded, but not of exactly the fields: the instance's own map goes.
    assert out[1] == {"n": 2, "note": None} and out[2] == {"n": 3, "note": None}
    with pytest.raises(MessageError):  # a look-alike of a kept map is still checked
        decode_message({"t": "test.wire_items", "items": [{"n": "1", "note": None}]})


def test_recent_records_are_encoded_once_for_every_message_and_the_store_is_bounded(
        ) -> None:
    messages._REUSED[Item].clear()  # what earlier tests left
    first = Item(4)
    shared = encode_message(Items((first,)))["items"][0]
    later = [Item(i) for i in range(messages.REUSED_MAX - 2)]
    assert encode_message(Items((*later, first)))["items"][-1] is shared
    assert len(messages._REUSED[Item]) <= messages.REUSED_MAX
    more = [Item(i) for i in range(3)]  # one past the bound: the store starts afresh
    encode_message(Items(tuple(more)))
    assert len(messages._REUSED[Item]) <= messages.REUSED_MAX
    again = encode_message(Items((first,)))["items"][0]
    assert again == shared and again is not shared


@message("test.wire_two_peers")
class TwoPeers(Message):
    a: Peer
    b: Peer


def test_every_field_of_an_interned_type_shares_one_bounded_store() -> None:
    peer = {"id": 7, "addr": "g:7"}
    wire = {"t": "test.wire_two_peers", "a": dict(peer), "b": dict(peer)}
    got = decode_message(wire)
    hello = decode_message({"t": "test.wire_hello", "who": dict(peer), "n": 0})
    assert isinstance(got, TwoPeers) and isinstance(hello, Hello)
    assert got.a is got.b is hello.who


def test_trusted_builds_a_record_without_its_check() -> None:
    built = Checked.trusted(11, 10)  # the check would refuse low above high
    assert (built.low, built.high) == (11, 10) and built == Checked.trusted(11, 10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.low = 1  # type: ignore[misc]  # deliberately assigning a frozen field: the refusal is under test
    assert Checked.trusted(1) == Checked(1)  # defaults as for the class itself


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: FindSuccessor("not-an-int", 5), "FindSuccessor.rid"),  # type: ignore[arg-type]  # deliberately mistyped: the encoder's check is under test
        (lambda: FindSuccessor(1, 5, avoid=("a", 7)), "FindSuccessor.avoid"),  # type: ignore[arg-type]  # deliberately mistyped: the encoder's check is under test
        (lambda: FindSuccessor(1, 5, owner_check=1), "FindSuccessor.owner_check"),  # type: ignore[arg-type]  # deliberately mistyped: the encoder's check is under test
        (lambda: Notify("a:1"), "Notify.node"),  # type: ignore[arg-type]  # deliberately mistyped: the encoder's check is under test
    ],
)
def test_encoding_a_mistyped_message_is_local_misuse(build: Any, field: str) -> None:
    """Encoding checks what decoding checks: our own mistyped message fails at the
    sender (LocalProtocolError), naming the field, instead of reaching a peer that would
    blame it for the fault."""
    with pytest.raises(LocalProtocolError, match=field):
        encode_message(build())


def test_a_reused_map_encoder_gives_the_bytes_of_encode_map_and_survives_a_failure() -> None:
    encode = CborEncoder()
    maps = [{"a": 1, "payload": b"x" * 300}, {}, {"nested": {"list": [1, 2.5, "t"]}},
            {"big": (1 << 64) - 1, "neg": -(1 << 63)}]
    for obj in maps:
        assert encode(obj) == encode_map(obj)
    with pytest.raises(LocalProtocolError):
        encode({"bad": object()})
    assert encode(maps[0]) == encode_map(maps[0])  # a longer map after a shorter one too
    assert encode(maps[1]) == encode_map(maps[1])

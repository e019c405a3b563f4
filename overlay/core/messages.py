"""Messages: frozen dataclasses registered by a type name, with validating wire codecs.

A message class is declared once and gets, at registration, a compiled converter for
each field: to plain CBOR-friendly data for the wire, and back with type checks. Decoding
input from a peer never trusts it: an unknown type, a missing, extra or mistyped field
raises :class:`MessageError` (remote blame). Encoding a message of ours that does not
fit its own declaration raises :class:`LocalProtocolError` (our blame).

Supported field types: ``int``, ``float``, ``str``, ``bytes``, ``bool``, ``None``,
unions of these (``X | None``), ``tuple[X, ...]``, ``dict[str, X]``, nested
:class:`Record` dataclasses (encoded as maps without a type name), and ``Message``
(any registered message, encoded with its type name: an envelope's payload).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar, dataclass_transform

from overlay.core.errors import LocalProtocolError, MessageError
from overlay.core.record_fields import passed_through, slot_init

#: Key of the type name in a message's wire map.
TYPE_KEY = "t"

Converter = Callable[[Any], Any]


class _Invalid(Exception):
    """Raised by decoders; turned into MessageError with the field's path."""


class Record:
    """Base of frozen dataclasses that travel inside messages (e.g. a node reference)."""

    _decoders: ClassVar[dict[str, Converter]]
    _encoders: ClassVar[dict[str, Converter]]
    #: Encoding, as a field of a message: the same instances go out again and again
    #: (a run of event bodies down each edge in turn, this node's own reference in
    #: every message), so the maps made for recent instances are given again; and an
    #: instance decoded from a peer's map of exactly its fields (unless interned, see
    #: below) has that map as its own, checked (a body passed on down the tree is not
    #: encoded again). (Maps of nested records may thus be shared between messages'
    #: maps: nothing changes them once made.)
    reuse_wire: ClassVar[bool] = False
    #: Decoding, as a field of a message: equal maps come again and again (a peer's
    #: reference in every message it sends), so instances made from recent maps are
    #: given again. Only for records whose fields are all scalars (hashable).
    intern_decoded: ClassVar[bool] = False
    #: Builds an instance from field values known to be valid (positional, as for the
    #: class itself) without running ``__post_init__``: a copy of a checked instance
    #: with a field changed. Set by :func:`record`.
    trusted: ClassVar[Callable[..., Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {}
        try:
            for name, as_is, enc in self._encode_plan:
                value = getattr(self, name)
                # As in from_wire: a value of a type the field takes as it is is its own
                # wire form, and needs no converter call.
                wire[name] = value if type(value) in as_is else enc(value)
        except _Invalid as exc:
            # Encoding checks what decoding checks: a mistyped message of ours is our
            # fault, found at the sender, not blamed on the peer that would refuse it.
            bad = next(name for name, enc in self._encoders.items()
                       if not _encodes(enc, getattr(self, name)))
            raise LocalProtocolError(f"{type(self).__name__}.{bad}: {exc}") from None
        return wire

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Any:
        if type(data) is not dict and not isinstance(data, Mapping):  # ABC check: slow
            raise _Invalid(f"expected a map for {cls.__name__}, got {type(data).__name__}")
        # The fields in their order, an absent optional one as its default: the instance
        # is made with positional arguments (a dict of keywords, filled and matched
        # to the parameters by name, cost a record of 9 fields about 1.5k instructions).
        args: list[Any] = []
        absent = 0
        for name, exact, dec, default in cls._plan:
            try:
                value = data[name]
            except KeyError:
                if default is _REQUIRED:
                    raise _Invalid(f"missing field {name!r}") from None
                args.append(default)
                absent += 1
                continue
            # A value of a type the field takes as it is needs no converter call (most
            # fields of most messages: ints, text, bytes, bools, null).
            if type(value) not in exact:
                try:
                    value = dec(value)
                except _Invalid as exc:
                    raise _Invalid(f"{name}: {exc}") from None
            args.append(value)
        # Every key was consumed unless the counts differ: only then look for the stranger.
        if len(args) - absent != len(data) - (TYPE_KEY in data):
            unknown = [k for k in data if k not in cls._decoders and k != TYPE_KEY]
            if unknown:
                raise _Invalid(f"unknown field {unknown[0]!r}")
        try:
            return cls(*args)
        except (TypeError, ValueError) as exc:
            raise _Invalid(str(exc)) from None

    #: Per field, in the constructor's order: name, the value types its decoder passes
    #: through unchanged, the decoder, its default when absent (``_REQUIRED``: none).
    _plan: ClassVar[tuple[tuple[str, frozenset[type], Converter, Any], ...]]
    #: Per field: name, the same types (its encoder too gives them unchanged), the encoder.
    _encode_plan: ClassVar[tuple[tuple[str, frozenset[type], Converter], ...]]


class Message(Record):
    """Base of every peer-to-peer message. Subclasses are registered with :func:`message`."""

    type_name: ClassVar[str]

    def to_wire(self) -> dict[str, Any]:
        wire = super().to_wire()
        wire[TYPE_KEY] = self.type_name
        return wire


_REGISTRY: dict[str, type[Message]] = {}

#: A field's default in a record's decoding plan when it has none (it must be present).
_REQUIRED: Any = object()

R = TypeVar("R", bound=type[Record])


def _scalar(kind: type) -> Converter:
    def check(value: Any) -> Any:
        if type(value) is kind:
            return value
        # bool is a subclass of int, but a bool where an int belongs is a type error.
        if type(value) is bool:
            raise _Invalid(f"expected {kind.__name__}, got bool")
        if isinstance(value, kind):
            return value
        raise _Invalid(f"expected {kind.__name__}, got {type(value).__name__}")

    return check


def _float(value: Any) -> float:
    if type(value) is bool or not isinstance(value, int | float):
        raise _Invalid(f"expected a number, got {type(value).__name__}")
    return float(value)


def _none(value: Any) -> None:
    if value is not None:
        raise _Invalid(f"expected null, got {type(value).__name__}")


def _identity(value: Any) -> Any:
    return value


def _encodes(enc: Converter, value: Any) -> bool:
    try:
        enc(value)
    except _Invalid:
        return False
    return True


def _checking(dec: Converter, as_is: frozenset[type]) -> Converter:
    """The encoder of a field whose wire form is the value itself: the value, once it is
    of a kind the field's decoder takes (else the decoder's conversion, or its error)."""
    def encode(value: Any) -> Any:
        return value if type(value) in as_is else dec(value)

    return encode


def _compile(tp: Any) -> tuple[Converter, Converter]:
    """Return (decoder, encoder) for a field type."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return _identity, _identity
    if tp is type(None) or tp is None:
        return _none, _none
    if tp is float:
        return _float, _checking(_float, frozenset({float}))
    if tp in (int, str, bytes, bool):
        check = _scalar(tp)
        return check, _checking(check, frozenset({tp}))
    if tp is Message:
        # Any registered message (e.g. the payload of a routed envelope).
        return _decode_any_message, _encode_any_message
    if isinstance(tp, type) and issubclass(tp, Record):
        decoder = (_interning_decoder(tp) if tp.intern_decoded
                   else _reusing_decoder(tp) if tp.reuse_wire else tp.from_wire)
        return decoder, _reusing_encoder(tp) if tp.reuse_wire else _record_encoder(tp)
    if origin in (typing.Union, types.UnionType):
        options = [_compile(arg) for arg in typing.get_args(tp)]
        as_is = passed_through(tp)

        def decode_union(value: Any) -> Any:
            if type(value) in as_is:  # no option tried in vain (each failure raises)
                return value
            errors = []
            for dec, _ in options:
                try:
                    return dec(value)
                except _Invalid as exc:
                    errors.append(str(exc))
            raise _Invalid(" or ".join(errors))

        records = tuple(arg for arg in typing.get_args(tp)
                        if isinstance(arg, type) and issubclass(arg, Record))

        def encode_union(value: Any) -> Any:
            if type(value) in as_is:
                return value
            if records and isinstance(value, records):
                return value.to_wire()
            return decode_union(value)  # a scalar option's conversion, or its error

        return decode_union, encode_union
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"only tuple[X, ...] fields are supported, not {tp}")
        item_dec, item_enc = _compile(args[0])

        item_as_is = passed_through(args[0])

        def decode_tuple(value: Any) -> tuple[Any, ...]:
            if not isinstance(value, list | tuple):
                raise _Invalid(f"expected an array, got {type(value).__name__}")
            return tuple(v if type(v) in item_as_is else item_dec(v) for v in value)

        def encode_tuple(value: Any) -> list[Any]:
            if not isinstance(value, tuple | list):
                raise _Invalid(f"expected a tuple, got {type(value).__name__}")
            return [x if type(x) in item_as_is else item_enc(x) for x in value]

        return decode_tuple, encode_tuple
    if origin in (dict, Mapping):
        key_tp, val_tp = typing.get_args(tp)
        key_dec, _ = _compile(key_tp)
        val_dec, val_enc = _compile(val_tp)

        key_as_is, val_as_is = passed_through(key_tp), passed_through(val_tp)

        def decode_map(value: Any) -> dict[Any, Any]:
            if type(value) is not dict and not isinstance(value, Mapping):
                raise _Invalid(f"expected a map, got {type(value).__name__}")
            return {k if type(k) in key_as_is else key_dec(k):
                    v if type(v) in val_as_is else val_dec(v) for k, v in value.items()}

        key_enc = _checking(key_dec, key_as_is)

        def encode_map(value: Any) -> dict[Any, Any]:
            if not isinstance(value, Mapping):
                raise _Invalid(f"expected a map, got {type(value).__name__}")
            return {k if type(k) in key_as_is else key_enc(k):
                    x if type(x) in val_as_is else val_enc(x) for k, x in value.items()}

        return decode_map, encode_map
    raise TypeError(f"unsupported message field type {tp!r}")


#: Most instances an interning decoder keeps (then it starts afresh).
INTERNED_MAX = 4096


#: One interning decoder per record class, shared by every field of that type: the
#: instances a node keeps stay bounded by ``INTERNED_MAX`` per class, however many
#: message fields carry it.
_INTERNING: dict[type[Record], Converter] = {}


def _interning_decoder(cls: type[Record]) -> Converter:
    """``cls.from_wire``, giving the instance made from an equal map again (see
    :attr:`Record.intern_decoded`). Equal means the same keys, and values of the same
    type that compare equal (``1``, ``1.0`` and ``True`` are different keys)."""
    shared = _INTERNING.get(cls)
    if shared is not None:
        return shared
    names = [name for name, *_ in cls._plan]
    made: dict[tuple[Any, ...], Any] = {}

    def decode(value: Any) -> Any:
        if type(value) is not dict or len(value) != len(names):
            return cls.from_wire(value)
        parts: list[Any] = []
        for name in names:
            item = value.get(name)
            parts.append(type(item))
            parts.append(item)
        key = tuple(parts)
        try:
            hit = made.get(key)
        except TypeError:  # an unhashable value: not a valid map of scalars anyway
            return cls.from_wire(value)
        if hit is None:
            hit = cls.from_wire(value)  # raises for a bad map, which is not kept
            if len(made) >= INTERNED_MAX:
                made.clear()
            made[key] = hit
        return hit

    _INTERNING[cls] = decode
    return decode


def _record_encoder(cls: type[Record]) -> Converter:
    def encode(value: Any) -> Any:
        if not isinstance(value, cls):
            raise _Invalid(f"expected {cls.__name__}, got {type(value).__name__}")
        return value.to_wire()

    return encode


#: Most maps the codec keeps per record class that reuses them (then it starts
#: afresh): more than a message's run of event bodies (``scribe.wire_records.MAX_BATCH``),
#: so that a run sent down several edges, or passed on as it came, is encoded once. The
#: instances are kept alive with their maps; a node holds the events it handled longer
#: anyway (``scribe.dissemination.EventMemory``).
REUSED_MAX = 1024

#: Per record class that reuses its maps: id(instance) -> (instance, its map), shared
#: by the class's decoder and every field's encoder.
_REUSED: dict[type[Record], dict[int, tuple[Any, Any]]] = {}


def _reused(cls: type[Record]) -> dict[int, tuple[Any, Any]]:
    return _REUSED.setdefault(cls, {})


def _reusing_encoder(cls: type[Record]) -> Converter:
    """``value.to_wire()``, giving the map again for an instance encoded or decoded
    recently (see :attr:`Record.reuse_wire`)."""
    made = _reused(cls)

    def encode(value: Any) -> Any:
        hit = made.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        if not isinstance(value, cls):
            raise _Invalid(f"expected {cls.__name__}, got {type(value).__name__}")
        wire = value.to_wire()
        if len(made) >= REUSED_MAX:
            made.clear()
        made[id(value)] = (value, wire)
        return wire

    return encode


def _reusing_decoder(cls: type[Record]) -> Converter:
    """``cls.from_wire``, keeping the peer's map as the instance's own when it holds
    exactly the instance's fields (see :attr:`Record.reuse_wire`): it passed every check
    ``to_wire`` makes, and says what that would."""
    made = _reused(cls)
    fields = len(cls._plan)

    def decode(value: Any) -> Any:
        instance = cls.from_wire(value)  # raises for a bad map, which is not kept
        if type(value) is dict and len(value) == fields and TYPE_KEY not in value:
            if len(made) >= REUSED_MAX:
                made.clear()
            made[id(instance)] = (instance, value)
        return instance

    return decode


def _decode_any_message(value: Any) -> Message:
    try:
        return decode_message(value)
    except MessageError as exc:
        raise _Invalid(str(exc)) from None


def _encode_any_message(value: Any) -> Any:
    return encode_message(value)


@dataclass_transform(frozen_default=True)
def record(cls: R) -> R:
    """Make ``cls`` a frozen dataclass with compiled wire converters."""
    dc: Any = dataclasses.dataclass(frozen=True, slots=True)(cls)
    init, trusted = slot_init(dc)
    dc.__init__ = init
    dc.trusted = staticmethod(trusted)
    hints = typing.get_type_hints(dc)
    decoders: dict[str, Converter] = {}
    encoders: dict[str, Converter] = {}
    defaults: dict[str, Any] = {}
    for field in dataclasses.fields(dc):
        decoders[field.name], encoders[field.name] = _compile(hints[field.name])
        # (slot_init refused a default_factory: a default is a plain value.)
        defaults[field.name] = _REQUIRED if field.default is dataclasses.MISSING \
            else field.default
    dc._decoders = decoders
    dc._encoders = encoders
    dc._plan = tuple((name, passed_through(hints[name]), dec, defaults[name])
                     for name, dec in decoders.items())
    dc._encode_plan = tuple((name, passed_through(hints[name]), enc)
                            for name, enc in encoders.items())
    return typing.cast(R, dc)


@dataclass_transform(frozen_default=True)
def message(type_name: str) -> Callable[[R], R]:
    """Register a message class under ``type_name`` (e.g. ``"chord.find_successor"``)."""

    def register(cls: R) -> R:
        if not issubclass(cls, Message):
            raise TypeError(f"{cls.__name__} must subclass Message")
        if type_name in _REGISTRY:
            raise LocalProtocolError(f"message type {type_name!r} is registered twice")
        dc = record(cls)
        dc.type_name = type_name
        _REGISTRY[type_name] = dc
        return dc

    return register


def message_type(type_name: str) -> type[Message]:
    try:
        return _REGISTRY[type_name]
    except KeyError:
        raise LocalProtocolError(f"no message type {type_name!r} is registered") from None


def encode_message(msg: Message) -> dict[str, Any]:
    """The wire map of ``msg``; raises LocalProtocolError if it is not a registered message."""
    if not isinstance(msg, Message) or _REGISTRY.get(msg.type_name) is not type(msg):
        raise LocalProtocolError(f"{msg!r} is not a registered message")
    return msg.to_wire()


def decode_message(data: Any) -> Message:
    """Validate a wire map from a peer and build its message; MessageError when it is bad."""
    if type(data) is not dict and not isinstance(data, Mapping):
        raise MessageError(f"a message must be a map, got {type(data).__name__}")
    type_name = data.get(TYPE_KEY)
    if not isinstance(type_name, str):
        raise MessageError(f"a message needs a text field {TYPE_KEY!r} naming its type")
    cls = _REGISTRY.get(type_name)
    if cls is None:
        raise MessageError(f"unknown message type {type_name!r}")
    try:
        msg: Message = cls.from_wire(data)
    except _Invalid as exc:
        raise MessageError(f"invalid {type_name}: {exc}") from None
    return msg

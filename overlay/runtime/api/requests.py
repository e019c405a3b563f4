"""Requests of the local socket API (API.md, version 1): validation into typed values.

Everything a client sends is checked here, field by field, before any of it reaches
the node; a fault becomes an :class:`ApiError` whose ``code`` is one of API.md's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from overlay.core.errors import LocalProtocolError
from overlay.core.limits import SizeLimits, TooLargeError
from overlay.core.pubsub import (
    AttrValue,
    check_attrs,
    check_expiry,
    check_group,
    check_msg_id,
    check_topic,
    check_ttl,
    is_topic,
)
from scribe.consumer_messages import check_name
from scribe.consumer_values import (
    MAX_DELAY,
    MAX_FETCH,
    MAX_FETCH_WAIT,
    ConsumerConfig,
    ConsumerError,
)

API_VERSION = 1
DEFAULT_SIZES = SizeLimits()


#: Error codes of API.md.
BAD_FRAME = "bad_frame"
BAD_REQUEST = "bad_request"
BAD_FILTER = "bad_filter"
UNKNOWN_SUB = "unknown_sub"
UNSUPPORTED_VERSION = "unsupported_version"
NOT_READY = "not_ready"
OVERLOADED = "overloaded"
INTERNAL = "internal"
TOO_LARGE = "too_large"
TIMEOUT = "timeout"
STORAGE_ERROR = "storage_error"
CONFLICT = "conflict"
#: Every error code a client may see (docs/API.md's table is checked against it).
ERROR_CODES = frozenset({BAD_FRAME, BAD_REQUEST, BAD_FILTER, UNKNOWN_SUB, UNSUPPORTED_VERSION,
                         NOT_READY, OVERLOADED, INTERNAL, TOO_LARGE, TIMEOUT, STORAGE_ERROR,
                         CONFLICT})


class ApiError(Exception):
    """A request failed; becomes ``{"ok": false, "error": {"code", "message", ...}}``."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        if code not in ERROR_CODES:  # a code no client was told of: our misuse
            raise LocalProtocolError(f"{code!r} is not an API error code")
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.extra}

    @classmethod
    def not_ready(cls) -> ApiError:
        return cls(NOT_READY, "this node has not joined the overlay yet")

    @classmethod
    def internal(cls, exc: BaseException) -> ApiError:
        """A bug of ours met while serving a request (logged by the caller)."""
        return cls(INTERNAL, f"internal error: {type(exc).__name__}")


@dataclass(frozen=True)
class Hello:
    version: int
    client: str | None = None
    #: The client takes several ready notifies in one ``notify_batch`` push.
    batch_notify: bool = False


@dataclass(frozen=True)
class Replay:
    last: int | None = None
    since_seq: int | None = None


@dataclass(frozen=True)
class Durable:
    """A subscription's durable consumer: its name and how it delivers."""

    name: str
    config: ConsumerConfig


@dataclass(frozen=True)
class Subscribe:
    topic: str
    filter: str
    expiry: float | None = None
    replay: Replay | None = None
    group: str | None = None
    durable: Durable | None = None


@dataclass(frozen=True)
class Settle:
    """``ack``, ``nak`` (again after ``delay`` s) or ``term`` of events of a durable
    subscription (the request's ``op``)."""

    sub: int
    op: str
    msg_ids: tuple[str, ...]
    delay: float = 0.0


@dataclass(frozen=True)
class Fetch:
    sub: int
    max: int
    wait: float


@dataclass(frozen=True)
class Consumers:
    """``consumers`` (``delete`` False: report them) or ``delete_consumer``."""

    topic: str
    durable: str | None
    delete: bool = False


@dataclass(frozen=True)
class Renew:
    sub: int
    expiry: float


@dataclass(frozen=True)
class Unsubscribe:
    sub: int


@dataclass(slots=True)  # one per event, and frozen costs each field a call (1.6 -> 0.5 us)
class Publish:
    topic: str
    attrs: dict[str, AttrValue] = field(default_factory=dict)
    payload: bytes = b""
    reliable: bool = True
    msg_id: str | None = None
    ttl: float | None = None


@dataclass(frozen=True)
class PublishBatch:
    """A ``publish_batch``: many events, one reply with a result per event."""

    reliable: bool
    #: Per event, in order: its request, or the ApiError refusing it (the others go on).
    events: list[Publish | ApiError]


@dataclass(frozen=True)
class Status:
    pass


Request = (Hello | Subscribe | Renew | Unsubscribe | Publish | PublishBatch | Status | Settle
           | Fetch | Consumers)


def _bad(message: str) -> ApiError:
    return ApiError(BAD_REQUEST, message)


def _get(req: Mapping[str, Any], name: str, kinds: type | tuple[type, ...], required: bool,
         default: Any = None) -> Any:
    value = req.get(name)
    if type(value) is kinds:  # the common case, one kind and exactly it: done
        return value
    if name not in req or (req[name] is None and not required):
        if required:
            raise _bad(f"missing field {name!r}")
        return default
    value = req[name]
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise _bad(f"field {name!r} must be {_kind_names(kinds)}, got bool")
    if not isinstance(value, kinds):
        raise _bad(f"field {name!r} must be {_kind_names(kinds)}, got {type(value).__name__}")
    return value


def _kind_names(kinds: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "text", bytes: "bytes", bool: "a boolean",
             dict: "a map"}
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    # "int or float" reads better as "a number".
    shown = [k for k in kinds if k is not int or float not in kinds]
    return " or ".join(names.get(k, k.__name__) for k in shown)


def _uint(req: Mapping[str, Any], name: str, required: bool = True) -> int | None:
    value: int | None = _get(req, name, int, required)
    if value is not None and value < 0:
        raise _bad(f"field {name!r} must be >= 0")
    return value


def _topic(req: Mapping[str, Any]) -> str:
    topic = _get(req, "topic", str, True)
    _checked(check_topic, topic, "topic")
    return topic  # type: ignore[no-any-return]  # _get checked its kind


def _checked(check: Callable[[Any], None], value: Any, field: str) -> None:
    """A check of overlay.core.pubsub, its ValueError a ``bad_request`` naming ``field``."""
    try:
        check(value)
    except ValueError as exc:
        raise _bad(f"field {field!r}: {exc}") from None


def _expiry(req: Mapping[str, Any], required: bool) -> float | None:
    value = _get(req, "expiry", (int, float), required)
    if value is None:
        return None
    _checked(check_expiry, value, "expiry")
    return float(value)


def _replay(req: Mapping[str, Any]) -> Replay | None:
    value = _get(req, "replay", dict, False)
    if value is None:
        return None
    if len(value) != 1 or not ({"last", "since_seq"} & value.keys()):
        raise _bad("replay must be {\"last\": N} or {\"since_seq\": S}")
    if "last" in value:
        return Replay(last=_uint(value, "last"))
    return Replay(since_seq=_uint(value, "since_seq"))


def _attrs(req: Mapping[str, Any]) -> dict[str, AttrValue]:
    attrs = _get(req, "attrs", dict, False, {})
    _checked(check_attrs, attrs, "attrs")
    return dict(attrs)


def _msg_id(req: Mapping[str, Any]) -> str | None:
    value = _get(req, "msg_id", str, False)
    if value is not None:
        _checked(check_msg_id, value, "msg_id")
    return value  # type: ignore[no-any-return]  # _get checked its kind


def _publish(req: Mapping[str, Any], sizes: SizeLimits) -> Publish:
    topic = req.get("topic")
    payload = req.get("payload", b"")
    reliable = req.get("reliable", True)
    if is_topic(topic) and type(payload) is bytes and type(reliable) is bool \
            and "ttl" not in req:
        # The common request, its fields of exactly their kinds, checked at once (the
        # topic by the one rule for topics): one publish comes per event, and the
        # slow path's call per field cost more than its check. The attrs and msg_id are
        # looked at only when there are some.
        attrs = req.get("attrs")
        request = Publish(topic, {} if type(attrs) is dict and not attrs else _attrs(req),
                          payload, reliable, _msg_id(req) if "msg_id" in req else None)
    else:
        request = Publish(_topic(req), _attrs(req), _get(req, "payload", bytes, False, b""),
                          _get(req, "reliable", bool, False, True), _msg_id(req),
                          _number(req, "ttl", check_ttl))
    # Without attributes the payload limit implies the event limit (a topic takes at
    # most 4 KiB of the room kept beside the largest payload): one length to compare.
    if request.attrs or len(request.payload) > sizes.max_payload:
        try:
            sizes.check_event(request.topic, request.attrs, request.payload)
        except TooLargeError as exc:
            raise ApiError(TOO_LARGE, str(exc), **sizes.to_wire()) from None
    return request


#: Bytes one event's result may take in a ``publish_batch`` reply: ``{"msg_id", "seq"}``,
#: or its error (``code``, ``message`` cut to BATCH_ERROR_CHARS, a few small extras), so
#: that the reply of the most events a batch may carry fits in ``max_frame`` too.
BATCH_RESULT_BYTES = 320
BATCH_ERROR_CHARS = 160


def max_batch_events(max_frame: int) -> int:
    """Most events a ``publish_batch`` may carry (hello's ``max_batch``): its request is
    bounded by ``max_frame`` bytes, and so must its reply be."""
    return max_frame // BATCH_RESULT_BYTES


def _publish_batch(req: Mapping[str, Any], sizes: SizeLimits) -> PublishBatch:
    """A publish of many events: each checked as a publish of its own (a bad one is
    refused alone); ``reliable`` is the request's, for all of them. How many fit is
    bounded by bytes: the frame's (``max_frame``), and the reply's (``max_batch``)."""
    events = _get(req, "events", list, True)
    if not 0 < len(events) <= max_batch_events(sizes.max_frame):
        raise _bad(f"'events' must hold 1 to {max_batch_events(sizes.max_frame)} events "
                   "(hello's max_batch)")
    reliable = _get(req, "reliable", bool, False, True)
    parsed: list[Publish | ApiError] = []
    for event in events:
        if type(event) is not dict:
            parsed.append(_bad("each event of 'events' must be a map"))
        elif "reliable" in event:
            parsed.append(_bad("'reliable' belongs to the request, not to one of its events"))
        else:
            try:
                publish = _publish(event, sizes)
            except ApiError as exc:
                parsed.append(exc)
                continue
            publish.reliable = reliable
            parsed.append(publish)
    return PublishBatch(reliable, parsed)


def _hello(req: Mapping[str, Any], sizes: SizeLimits) -> Hello:
    return Hello(version=_get(req, "version", int, True), client=_get(req, "client", str, False),
                 batch_notify=_get(req, "batch_notify", bool, False, False))


#: A durable subscription's settings (docs/API.md, subscribe), with their defaults.
CONSUMER_FIELDS = ("ack", "ack_wait", "max_deliver", "dead_letter", "max_inflight", "pull")


def _subscribe(req: Mapping[str, Any], sizes: SizeLimits) -> Subscribe:
    group = _get(req, "group", str, False)
    if group is not None:
        _checked(check_group, group, "group")
    request = Subscribe(topic=_topic(req), filter=_get(req, "filter", str, False, ""),
                        expiry=_expiry(req, False), replay=_replay(req), group=group,
                        durable=_durable(req))
    if request.durable is not None:
        for name in ("expiry", "replay", "group"):
            if getattr(request, name) is not None:
                raise _bad(f"{name!r} is not for a durable subscription (its consumer keeps "
                           "its place; unsubscribe detaches it)")
    return request


def _durable(req: Mapping[str, Any]) -> Durable | None:
    name = _get(req, "durable", str, False)
    given = [field for field in CONSUMER_FIELDS if req.get(field) is not None]
    if name is None:
        if given:
            raise _bad(f"{given[0]!r} is for a durable subscription: give 'durable' too")
        return None
    _checked(check_name, name, "durable")
    dead_letter = _get(req, "dead_letter", str, False)
    if dead_letter is not None:
        _checked(check_topic, dead_letter, "dead_letter")
    defaults = ConsumerConfig()
    try:
        config = ConsumerConfig(
            ack=_get(req, "ack", bool, False, defaults.ack),
            ack_wait=float(_get(req, "ack_wait", (int, float), False, defaults.ack_wait)),
            max_deliver=_get(req, "max_deliver", int, False, defaults.max_deliver),
            dead_letter=dead_letter,
            max_inflight=_get(req, "max_inflight", int, False, defaults.max_inflight),
            pull=_get(req, "pull", bool, False, defaults.pull))
    except ConsumerError as exc:
        raise _bad(str(exc)) from None
    return Durable(name, config)


def _number(req: Mapping[str, Any], name: str, check: Callable[[Any], None]) -> float | None:
    """An optional number field, checked by ``check`` (its ValueError a bad_request)."""
    value = _get(req, name, (int, float), False)
    if value is None:
        return None
    _checked(check, value, name)
    return float(value)


def _seconds_within(limit: float) -> Callable[[Any], None]:
    def check(value: float) -> None:
        if not math.isfinite(value) or not 0 <= value <= limit:
            raise ValueError(f"must be a number of seconds in [0, {limit:g}]")
    return check


def _settle(req: Mapping[str, Any], sizes: SizeLimits) -> Settle:
    """``ack``, ``nak``, ``term``: ``msg_id`` (one) or ``msg_ids`` (a list)."""
    op = req["op"]
    one, many = req.get("msg_id"), req.get("msg_ids")
    if (one is None) == (many is None):
        raise _bad("give one of 'msg_id' (text) or 'msg_ids' (a list of text)")
    if one is not None:
        msg_ids = [_get(req, "msg_id", str, True)]
    else:
        msg_ids = _get(req, "msg_ids", list, True)
        if not msg_ids:
            raise _bad("'msg_ids' holds at least one msg_id")
    for msg_id in msg_ids:
        if type(msg_id) is not str:
            raise _bad("each msg_id is text")
        _checked(check_msg_id, msg_id, "msg_ids" if many is not None else "msg_id")
    delay = 0.0
    if op == "nak":
        delay = _number(req, "delay", _seconds_within(MAX_DELAY)) or 0.0
    return Settle(_sub(req), op, tuple(msg_ids), delay)


def _fetch(req: Mapping[str, Any], sizes: SizeLimits) -> Fetch:
    count = _get(req, "max", int, False, 1)
    if not 1 <= count <= MAX_FETCH:
        raise _bad(f"'max' must be within [1, {MAX_FETCH}]")
    wait = _number(req, "wait", _seconds_within(MAX_FETCH_WAIT)) or 0.0
    return Fetch(_sub(req), count, wait)


def _consumers(req: Mapping[str, Any], sizes: SizeLimits) -> Consumers:
    name = _get(req, "durable", str, False)
    if name is not None:
        _checked(check_name, name, "durable")
    return Consumers(_topic(req), name)


def _delete_consumer(req: Mapping[str, Any], sizes: SizeLimits) -> Consumers:
    name = _get(req, "durable", str, True)
    _checked(check_name, name, "durable")
    return Consumers(_topic(req), name, delete=True)


def _sub(req: Mapping[str, Any]) -> int:
    """The required ``sub`` handle."""
    sub = _uint(req, "sub")
    assert sub is not None  # required: _get raised when it was missing
    return sub


def _renew(req: Mapping[str, Any], sizes: SizeLimits) -> Renew:
    return Renew(sub=_sub(req), expiry=_expiry(req, True))  # type: ignore[arg-type]  # required: never None


def _unsubscribe(req: Mapping[str, Any], sizes: SizeLimits) -> Unsubscribe:
    return Unsubscribe(sub=_sub(req))


def _status(req: Mapping[str, Any], sizes: SizeLimits) -> Status:
    return Status()


#: The ops of API.md, each with the parser of its fields (docs/API.md's table of
#: requests is checked against this one: tests/docs).
OPS: dict[str, Callable[[Mapping[str, Any], SizeLimits], Request]] = {
    "publish": _publish, "publish_batch": _publish_batch, "hello": _hello,
    "subscribe": _subscribe, "renew": _renew, "unsubscribe": _unsubscribe, "status": _status,
    "ack": _settle, "nak": _settle, "term": _settle, "fetch": _fetch,
    "consumers": _consumers, "delete_consumer": _delete_consumer,
}


def parse_request(req: Mapping[str, Any], sizes: SizeLimits = DEFAULT_SIZES) -> Request:
    """Validate one request map (its ``rid`` already taken out); ``sizes``: the size
    model of the daemon's ``max_frame``."""
    op = req.get("op")
    if not isinstance(op, str):
        raise _bad("a request needs a text field 'op'")
    if op == "publish":  # by far the most frequent: no table look-up
        return _publish(req, sizes)
    parser = OPS.get(op)
    if parser is None:
        raise _bad(f"unknown op {op!r}")
    return parser(req, sizes)

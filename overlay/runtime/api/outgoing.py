"""What an API connection writes, before it is written: the place each reply holds in
request order (:class:`ReplySlot`), a ``publish_batch``'s results gathering
(:class:`BatchReply`), and notifies waiting to leave alone or in ``notify_batch`` frames
(:func:`notify_frames`). Split from :mod:`overlay.runtime.api.connection`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from overlay.core.framing import (
    HEADER,
    array_frame,
    array_head_size,
    encode_map,
    group_for_frames,
)
from overlay.runtime.api.requests import BATCH_ERROR_CHARS, ApiError, Publish, PublishBatch


@dataclass(slots=True, eq=False)  # each slot is one reply: compared by identity
class ReplySlot:
    data: bytes | None = None
    #: A subscribe reply's subscription, whose pushes wait behind the reply (in
    #: ``trailing``, a list for such a slot only: most slots are publishes' replies).
    sub: int | None = None
    trailing: list[bytes | NotifyBody] | None = None


@dataclass(slots=True, eq=False)
class BatchReply:
    """The reply of a ``publish_batch``: a result per event, stored in its slot
    once every event is answered."""

    slot: ReplySlot
    rid: int
    results: list[dict[str, Any] | None]
    waiting: int


#: A publish read but not yet handed to the service: where its outcome goes (a reply's
#: place and rid, or a batch's reply and the event's index there), and the request.
Gathered = tuple[ReplySlot | BatchReply, int, Publish]
#: A publish (or batch) that must wait for room among the in-flight publishes, and its rid.
Blocked = tuple[int, Publish | PublishBatch]


class NotifyBody(NamedTuple):
    """A notify's fields as CBOR, waiting to leave alone or in a ``notify_batch``; or
    (``items`` > 1) the fields of that many notifies, one map after the other, which
    leave together in one ``notify_batch`` (:func:`notify_bodies`)."""

    data: bytes
    items: int = 1


# A notify alone is its fields' map with the key "event" first: a map head one larger,
# then "event": "notify", then the fields' entries (the same bytes as encoding it whole).
_NOTIFY_ENTRY = encode_map({"event": "notify"})[1:]
# A notify_batch is {"event": "notify_batch", "events": [field maps...]}.
NOTIFY_BATCH_HEAD = encode_map({"event": "notify_batch", "events": []})[:-1]


def notify_bodies(encode: Callable[[object], bytes], fields: list[dict[str, Any]],
                  max_frame: int) -> list[NotifyBody]:
    """Notifies' ``fields``, ready together for a ``batch_notify`` connection, encoded:
    in one call as one body when they fit one ``notify_batch`` frame (the per-item
    Python work around an encode call is paid once per run rather than once per event:
    5.5% of the instructions per event at one daemon, bench/daemon_path.py --setup 3),
    else one body each, for :func:`notify_frames` to spread over frames."""
    if len(fields) > 1:
        array = encode(fields)  # the array's head, then each item's map: a frame's array
        if len(NOTIFY_BATCH_HEAD) + len(array) <= max_frame:
            return [NotifyBody(array[array_head_size(len(fields)):], len(fields))]
    return [NotifyBody(encode(item)) for item in fields]


def notify_frames(items: Iterable[bytes | NotifyBody], max_frame: int) -> list[bytes]:
    """Frames for queued pushes: each run of notifies in as few ``notify_batch`` frames
    as fit in ``max_frame`` bytes each (a group of one: a plain ``notify``; the notifies
    of one body stay in one frame); other pushes (already frames) in their place."""
    frames: list[bytes] = []
    run: list[bytes] = []
    counts: list[int] = []

    def end_run() -> None:
        at = 0
        for group in group_for_frames(run, len(NOTIFY_BATCH_HEAD), max_frame, counts=counts):
            count = sum(counts[at:at + len(group)])
            at += len(group)
            if count > 1:
                frames.append(array_frame(NOTIFY_BATCH_HEAD, group, count))
                continue
            body = group[0]
            frames.append(b"".join((HEADER.pack(len(body) + len(_NOTIFY_ENTRY)),
                                    bytes((body[0] + 1,)), _NOTIFY_ENTRY, body[1:])))
        run.clear()
        counts.clear()

    for item in items:
        if isinstance(item, NotifyBody):
            run.append(item.data)
            counts.append(item.items)
        else:
            end_run()
            frames.append(item)
    end_run()
    return frames


def batch_error(error: ApiError) -> dict[str, Any]:
    """An event's error in a ``publish_batch`` reply: its message cut so that the result
    stays within BATCH_RESULT_BYTES."""
    wire = error.to_wire()
    wire["message"] = wire["message"][:BATCH_ERROR_CHARS]
    return wire

"""What an API connection writes, before it is written: the place each reply holds in
request order (:class:`ReplySlot`), a ``publish_batch``'s results gathering
(:class:`BatchReply`), and notifies waiting to leave alone or in ``notify_batch`` frames
(:func:`notify_frames`). Split from :mod:`overlay.runtime.api.connection`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from overlay.core.framing import HEADER, array_frame, encode_map, group_for_frames
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
    """A notify's fields as CBOR, waiting to leave alone or in a ``notify_batch``."""

    data: bytes


# A notify alone is its fields' map with the key "event" first: a map head one larger,
# then "event": "notify", then the fields' entries (the same bytes as encoding it whole).
_NOTIFY_ENTRY = encode_map({"event": "notify"})[1:]
# A notify_batch is {"event": "notify_batch", "events": [field maps...]}.
NOTIFY_BATCH_HEAD = encode_map({"event": "notify_batch", "events": []})[:-1]


def notify_frames(items: Iterable[bytes | NotifyBody], max_frame: int) -> list[bytes]:
    """Frames for queued pushes: each run of notifies in as few ``notify_batch`` frames
    as fit in ``max_frame`` bytes each (a group of one: a plain ``notify``); other pushes
    (already frames) in their place."""
    frames: list[bytes] = []
    run: list[bytes] = []

    def end_run() -> None:
        for group in group_for_frames(run, len(NOTIFY_BATCH_HEAD), max_frame):
            if len(group) > 1:
                frames.append(array_frame(NOTIFY_BATCH_HEAD, group))
                continue
            body = group[0]
            frames.append(b"".join((HEADER.pack(len(body) + len(_NOTIFY_ENTRY)),
                                    bytes((body[0] + 1,)), _NOTIFY_ENTRY, body[1:])))
        run.clear()

    for item in items:
        if isinstance(item, NotifyBody):
            run.append(item.data)
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

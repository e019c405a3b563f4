"""Notifies ready together for a ``batch_notify`` connection: encoded in one call when
they fit one frame (``notify_bodies``), and framed with other queued pushes
(``notify_frames``) into the same pushes as when each is encoded alone (docs/API.md:
``notify_batch`` at most ``max_frame`` bytes, a single ready event a plain ``notify``)."""

from __future__ import annotations

from typing import Any

from overlay.core.framing import HEADER, CborEncoder, FrameDecoder, decode_map, encode_frame
from overlay.runtime.api.outgoing import NotifyBody, notify_bodies, notify_frames


def fields(n: int, payload: int = 10) -> dict[str, Any]:
    return {"sub": 1, "topic": "t", "msg_id": f"{n:032x}", "seq": n, "attrs": {},
            "payload": bytes(payload), "publisher": "ab" * 16, "ts": 1.5, "attempt": 1}


def pushes(frames: list[bytes]) -> list[dict[str, Any]]:
    decoder = FrameDecoder(1 << 24)
    decoder.feed(b"".join(frames))
    return [decode_map(body) for body in decoder.bodies()]


def one_by_one(items: list[dict[str, Any]]) -> list[NotifyBody]:
    encode = CborEncoder()
    return [NotifyBody(encode(item)) for item in items]


def frame_size(frame: bytes) -> int:
    (size,) = HEADER.unpack(frame[:HEADER.size])
    assert size == len(frame) - HEADER.size
    return int(size)


def test_a_run_that_fits_one_frame_is_one_body_making_the_same_frame() -> None:
    items = [fields(n) for n in range(1, 31)]
    bodies = notify_bodies(CborEncoder(), items, 1 << 16)
    assert [b.items for b in bodies] == [30]
    # The same bytes as the frame of the notifies encoded one by one.
    assert notify_frames(bodies, 1 << 16) == notify_frames(one_by_one(items), 1 << 16)
    assert pushes(notify_frames(bodies, 1 << 16)) == [
        {"event": "notify_batch", "events": items}]


def test_a_run_of_one_is_a_plain_notify() -> None:
    bodies = notify_bodies(CborEncoder(), [fields(1)], 1 << 16)
    assert [b.items for b in bodies] == [1]
    assert pushes(notify_frames(bodies, 1 << 16)) == [{"event": "notify", **fields(1)}]


def test_a_run_at_max_frame_is_one_body_and_one_byte_past_it_one_body_each() -> None:
    items = [fields(1), fields(2), fields(3)]
    whole = len(notify_frames(one_by_one(items), 1 << 20)[0]) - HEADER.size
    at_edge = notify_bodies(CborEncoder(), items, whole)
    assert [b.items for b in at_edge] == [3]
    frames = notify_frames(at_edge, whole)
    assert [frame_size(f) for f in frames] == [whole]
    past = notify_bodies(CborEncoder(), items, whole - 1)
    assert [b.items for b in past] == [1, 1, 1]
    frames = notify_frames(past, whole - 1)
    assert [len(p.get("events", [p])) for p in pushes(frames)] == [2, 1]
    assert all(frame_size(f) <= whole - 1 for f in frames)


def test_runs_and_single_bodies_share_frames_by_bytes_and_keep_their_order() -> None:
    """A run's notifies stay together: a frame that cannot take the whole run ends
    before it; the array's head counts every notify the frame carries."""
    encode = CborEncoder()
    first = notify_bodies(encode, [fields(1), fields(2)], 1 << 16)
    single = [NotifyBody(encode(fields(3)))]
    later = notify_bodies(encode, [fields(4), fields(5), fields(6)], 1 << 16)
    other = encode_frame({"event": "expired", "sub": 9})
    queued = [*first, *single, *later, other, *single]
    assert pushes(notify_frames(queued, 1 << 16)) == [
        {"event": "notify_batch", "events": [fields(n) for n in range(1, 7)]},
        {"event": "expired", "sub": 9},
        {"event": "notify", **fields(3)}]
    # A frame with room for the first run and the single one, not for the next run too.
    two_runs = len(notify_frames([*first, *single, *later], 1 << 16)[0]) - HEADER.size
    frames = notify_frames([*first, *single, *later], two_runs - 1)
    assert [[e["seq"] for e in p["events"]] for p in pushes(frames)] == [[1, 2, 3], [4, 5, 6]]
    assert all(frame_size(f) <= two_runs - 1 for f in frames)

"""What one API connection writes, and when: its replies in request order, its pushes,
and the writes themselves. Split from :mod:`overlay.runtime.api.connection`.

Replies go out in request order even when a later request finishes first (a status
after a reliable publish waiting for its ack), while pushes are written as they come,
except a subscription's: those wait behind its ``subscribe`` reply, so a client never
sees an event for a handle it has not been given yet. Everything waiting to be written
counts against ``max_queue_bytes``: a subscriber that does not read is cut off with an
``overloaded`` error instead of growing our memory.

When: the frames a step causes (a reader's turn, or a core step the driver carries out:
an event from a peer, a sync that acknowledges reliable publishes), on any connection,
are written as it ends (:class:`~overlay.runtime.turn_writes.TurnWrites`), directly on
the socket, without waking a task: an event published alone reaches its subscribers
with no scheduling between the request and its notifies (`bench/daemon_path.py
--lone`), the subscribers' before the publisher's reply. What the socket does not take
at once is written by the connection's writer task.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import trio

from overlay.core.framing import CborEncoder, encode_frame, frame_bytes
from overlay.runtime.api.outgoing import (
    BatchReply,
    NotifyBody,
    ReplySlot,
    batch_error,
    notify_bodies,
    notify_frames,
)
from overlay.runtime.api.requests import OVERLOADED, ApiError
from overlay.runtime.api.service import Notifications, PublishResult, Push, notify_fields
from overlay.runtime.turn_writes import TurnWrites

log = logging.getLogger("overlay.api")


class Outbox:
    """One connection's frames waiting to be written, in the order they must leave, and
    the writing of them (at a turn's end, or by :meth:`write_loop`'s task)."""

    def __init__(self, stream: trio.abc.Stream, max_frame: int, max_queue_bytes: int,
                 turns: TurnWrites, close: Callable[[ApiError], None],
                 stats: dict[str, int], conn_id: int) -> None:
        self.stream = stream
        self.max_frame = max_frame
        self.max_queue_bytes = max_queue_bytes
        self._turns = turns
        #: The connection's close (an error push, then the end): for a client that does
        #: not read what we queue.
        self._close = close
        self._stats = stats
        self.conn_id = conn_id
        #: The client asked at hello for notifies batched into ``notify_batch`` pushes.
        self.batch_notify = False
        #: Set when the connection closes: nothing more is queued.
        self.closing = False
        #: Encodes this connection's replies and pushes (one encoder reused).
        self._encode = CborEncoder()
        self._pushes: deque[bytes | NotifyBody] = deque()
        self._replies: deque[ReplySlot] = deque()
        #: Subscriptions whose ``subscribe`` reply is not written yet -> its slot.
        self._unreplied: dict[int, ReplySlot] = {}
        self._queued_bytes = 0
        self._wake = trio.Event()
        #: Whether a write is due (``_wake`` set, or this outbox deferred to the turn's
        #: end): frames of one turn come in hundreds, one wake-up is enough.
        self._woken = False
        #: The socket's descriptor, for writes at a turn's end (None: a stream that is
        #: not a socket, written by the writer task only).
        self._fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else None
        #: The writer task waits for ``_wake`` with nothing in hand: a direct write
        #: cannot interleave with one of its own.
        self._writer_idle = False
        #: What a direct write could not hand to the kernel: the writer sends it first.
        self._unsent = b""

    # -- queueing ---------------------------------------------------------------------

    def reply_slot(self, sub: int | None = None) -> ReplySlot:
        """A place among the replies, in request order; a ``subscribe``'s (``sub``)
        holds its subscription's pushes behind it until it is filled and written."""
        slot = ReplySlot() if sub is None else ReplySlot(sub=sub, trailing=[])
        self._replies.append(slot)
        if sub is not None:
            self._unreplied[sub] = slot
        return slot

    def reply_now(self, rid: int | None, body: dict[str, Any] | ApiError) -> None:
        self.fill(self.reply_slot(), rid, body)

    def fill(self, slot: ReplySlot, rid: int | None, body: dict[str, Any] | ApiError) -> None:
        if isinstance(body, ApiError):
            self._store(slot, {"rid": rid, "ok": False, "error": body.to_wire()})
        else:
            self._store(slot, {"rid": rid, "ok": True, **body})

    def fill_publish(self, slot: ReplySlot | BatchReply, rid: int,
                     outcome: PublishResult | ApiError) -> None:
        """:meth:`fill` for a publish's outcome (one per event: its map made at once); for
        an event of a batch, ``rid`` is its index there."""
        if isinstance(slot, BatchReply):
            slot.results[rid] = ({"msg_id": outcome.msg_id, "seq": outcome.seq}
                                 if isinstance(outcome, PublishResult)
                                 else {"error": batch_error(outcome)})
            slot.waiting -= 1
            if not slot.waiting:
                self._store(slot.slot, {"rid": slot.rid, "ok": True, "results": slot.results})
        elif isinstance(outcome, PublishResult):
            self._store(slot, {"rid": rid, "ok": True, "msg_id": outcome.msg_id,
                               "seq": outcome.seq})
        else:
            self.fill(slot, rid, outcome)

    def _store(self, slot: ReplySlot, reply: dict[str, Any]) -> None:
        """Encode ``reply`` into its slot."""
        slot.data = data = frame_bytes(self._encode(reply), self.max_frame)
        self._queued(len(data))

    def push(self, push: Push) -> None:
        """Queue a push (a notify per event of a Notifications)."""
        if self.closing:
            return
        queued: Sequence[bytes | NotifyBody]
        if isinstance(push, Notifications):
            encode, sub = self._encode, push.sub
            if self.batch_notify:
                queued = notify_bodies(encode, [notify_fields(sub, event)
                                                for event in push.events], self.max_frame)
            else:
                queued = [frame_bytes(encode(wire), self.max_frame) for wire in push.to_wire()]
        else:
            queued = [frame_bytes(self._encode(push.to_wire()), self.max_frame)]
        slot = self._unreplied.get(push.sub)
        if slot is not None and slot.trailing is not None:
            slot.trailing.extend(queued)
        else:
            self._pushes.extend(queued)
        self._queued(sum(len(item.data) if isinstance(item, NotifyBody) else len(item)
                         for item in queued))

    def close_with(self, error: ApiError) -> bool:
        """Drop what waits and queue an error push, the last frame; False if closing
        already."""
        if self.closing:
            return False
        self.closing = True
        self._pushes.clear()
        self._replies.clear()
        self._pushes.append(encode_frame({"event": "error", "error": error.to_wire()}))
        self._woken = True
        self._wake.set()
        return True

    def _queued(self, size: int) -> None:
        """``size`` more bytes wait: have them written (at the turn's end, else by the
        writer task), or cut off a client that does not read them."""
        self._queued_bytes += size
        if self._queued_bytes > self.max_queue_bytes and not self.closing:
            self._stats["overloaded_closes"] += 1
            log.warning("API connection %d is not reading: closing it (overloaded)", self.conn_id)
            self._close(ApiError(OVERLOADED, "outgoing queue full: the client is not "
                                 "reading fast enough"))
            self._queued_bytes = 0
        if not self._woken:
            self._woken = True
            if self._writer_idle and self._fd is not None and self._turns.defer(self):
                return
            self._wake.set()

    # -- writing ----------------------------------------------------------------------

    def write_now(self) -> None:
        """At a turn's end: write what is ready without waking the writer task (it is
        idle: nothing of ours is in its hands); what the socket does not take now is
        left to it."""
        self._woken = False
        if self.closing or not self._writer_idle or self._fd is None:
            self._woken = True
            self._wake.set()
            return
        try:
            data = self._ready_bytes()
        except Exception:  # a bug of ours: the writer task meets it too, and ends only
            # this connection (never the step, which may be another client's or the core's)
            log.exception("internal error writing to API connection %d", self.conn_id)
            self._woken = True
            self._wake.set()
            return
        if not data:
            return
        try:
            sent = os.write(self._fd, data)
        except BlockingIOError:
            sent = 0
        except OSError:  # the writer's own send fails the same way and ends the connection
            sent = 0
        self._queued_bytes = max(0, self._queued_bytes - sent)
        if sent < len(data):
            self._unsent = data[sent:]
            self._woken = True
            self._wake.set()

    def _ready_bytes(self) -> bytes:
        """Everything that may be written now, in order: what a direct write left, the
        pushes, then the replies that are filled, up to the first that is not."""
        chunks = self._frames(self._pushes)
        self._pushes.clear()
        if self._unsent:
            chunks.insert(0, self._unsent)
            self._unsent = b""
        replies = self._replies
        while replies and (reply := replies[0].data) is not None:
            slot = replies.popleft()
            chunks.append(reply)
            if slot.trailing is not None:
                self._unreplied.pop(slot.sub, None)  # type: ignore[arg-type]  # a slot with trailing pushes is a subscribe's: sub is set
                chunks.extend(self._frames(slot.trailing))
        return b"".join(chunks)

    def _frames(self, pushes: Iterable[bytes | NotifyBody]) -> list[bytes]:
        if self.batch_notify:
            return notify_frames(pushes, self.max_frame)
        return list(pushes)  # type: ignore[arg-type]  # without batch_notify push framed each

    async def write_loop(self, scope: trio.CancelScope) -> None:
        """The writer task: what is queued outside a turn, and what a direct write left.
        Cancels ``scope`` (the connection) when the stream breaks or the close's error
        push is out."""
        try:
            while True:
                data = self._ready_bytes()
                if data:
                    self._queued_bytes = max(0, self._queued_bytes - len(data))
                    await self.stream.send_all(data)
                    continue
                if self.closing:
                    break
                self._writer_idle = True
                try:
                    await self._wake.wait()
                finally:
                    self._writer_idle = False
                self._wake = trio.Event()
                self._woken = False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()

"""Request/answer bookkeeping inside the core: request ids, callbacks and time-outs.

A call records what to do with the answer and what to do if none comes (time-out) or
the transport reports the peer unreachable; exactly one of the two runs. Time-outs are
named timers ``("rpc", rid)`` in the node's :class:`~overlay.core.timers.Timers`, so a
lost message costs a time-out and never wedges the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from overlay.core.messages import Message
from overlay.core.timers import Timers

AnswerHandler = Callable[[float, Any], None]
FailureHandler = Callable[[float], None]
PeerFailed = Callable[[float, str], None]
Sender = Callable[[str, Message], None]


@dataclass(slots=True)
class PendingCall:
    dest: str
    answer_type: type[Message]
    on_answer: AnswerHandler
    on_failure: FailureHandler


class Calls:
    def __init__(self, timers: Timers, timeout: float, send: Sender,
                 on_peer_failed: PeerFailed) -> None:
        self.timers = timers
        self.timeout = timeout
        self.send = send
        #: Told first when a call fails, so the tables are clean before the caller
        #: decides what to do next (usually: try another node).
        self.on_peer_failed = on_peer_failed
        self.pending: dict[int, PendingCall] = {}
        self._next_rid = 0

    def new_rid(self) -> int:
        self._next_rid += 1
        return self._next_rid

    def call(self, now: float, dest: str, request: Callable[[int], Message],
             answer_type: type[Message], on_answer: AnswerHandler,
             on_failure: FailureHandler) -> int:
        """Send ``request(rid)`` to ``dest`` and wait for an ``answer_type`` with that rid."""
        rid = self.new_rid()
        self.pending[rid] = PendingCall(dest, answer_type, on_answer, on_failure)
        self.timers.set(("rpc", rid), now + self.timeout)
        self.send(dest, request(rid))
        return rid

    def answer(self, now: float, rid: int, msg: Message) -> None:
        """An answer arrived. Its sender is not compared with the address asked: a seed
        given as ``localhost:7400`` answers as ``127.0.0.1:7400``; rids are not reused."""
        call = self.pending.get(rid)
        if call is None or type(msg) is not call.answer_type:
            return  # late (after a time-out), duplicate, or not an answer to this call
        del self.pending[rid]
        self.timers.cancel(("rpc", rid))
        call.on_answer(now, msg)

    def fail(self, now: float, rid: int) -> None:
        """Request ``rid`` timed out or could not be delivered."""
        call = self.pending.pop(rid, None)
        if call is not None:
            self.timers.cancel(("rpc", rid))
            self.on_peer_failed(now, call.dest)
            call.on_failure(now)

    def cancel_all(self) -> None:
        for rid in self.pending:
            self.timers.cancel(("rpc", rid))
        self.pending.clear()
